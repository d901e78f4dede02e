//! Command line: `switchyard serve`, `mock`, the policy tools `lint`, `fmt`,
//! `dry-run`, `test`, and `keys` (API key files).
//!
//! Flags are parsed by clap, then turned into typed settings; every command returns an
//! exit code (0 success, 1 invalid input such as a bad config, 2 usage or I/O errors).

mod dry_run;
mod explain;
mod health;
pub mod keys;
pub mod policy;
mod replace;
mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::mock::{ErrorShape, MockOptions, RetryAfterFormat, Wire};

/// Switchyard: an LLM gateway where routing is code.
#[derive(Debug, Parser)]
#[command(name = "switchyard", version = crate::telemetry::LONG_VERSION, about, long_about = None)]
pub struct Cli {
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `switchyard=debug`.
    #[arg(long, global = true, env = "SWITCHYARD_LOG", default_value = "info")]
    pub log: String,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

pub use crate::logging::LogFormat;

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Run a provider emulator speaking OpenAI's, Anthropic's, Gemini's or Bedrock's API (--format; for tests and load runs).
    Mock(MockArgs),
    /// Check policies: errors and lint warnings with locations.
    Lint(LintArgs),
    /// Format policy files in the canonical layout.
    Fmt(FmtArgs),
    /// Show the routing decision and its trace for one request, without a server.
    DryRun(dry_run::DryRunArgs),
    /// Run the policy test cases.
    Test(TestArgs),
    /// Manage an API key file (`auth.key_file`).
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Ask a running gateway's `/health` and exit 0 on HTTP 200, 1 otherwise (the
    /// container image's healthcheck).
    Health(health::HealthArgs),
    /// Serve the Language Server Protocol on stdin/stdout for `.policy` files
    /// (diagnostics, hover, go to definition, completion, formatting): what an
    /// editor starts.
    Lsp(LspArgs),
    /// Explain a diagnostic code (`E0401`, `W0206`, ...) with an example and the
    /// fix; without a code, list them all.
    Explain(explain::ExplainArgs),
    /// Print a shell completion script, e.g.
    /// `switchyard completions bash > /etc/bash_completion.d/switchyard`.
    Completions(CompletionsArgs),
}

/// `switchyard lsp` flags.
#[derive(Debug, clap::Args)]
pub struct LspArgs {
    /// Talk over stdin/stdout (the only transport, and the default; accepted
    /// because LSP clients such as vscode-languageclient pass it).
    #[arg(long)]
    pub stdio: bool,
}

/// `switchyard completions` arguments.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `switchyard lint` flags.
#[derive(Debug, clap::Args)]
pub struct LintArgs {
    /// Policy files or directories (default: the config's `policies.dir`).
    pub paths: Vec<PathBuf>,
    /// Config file whose registry names are checked against; default
    /// `./switchyard.yaml` if it exists, else the built-in config.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "human")]
    pub format: policy::Format,
    /// Exit 1 on warnings too.
    #[arg(long)]
    pub deny_warnings: bool,
}

/// `switchyard fmt` flags.
#[derive(Debug, clap::Args)]
pub struct FmtArgs {
    /// Policy files or directories (default: the config's `policies.dir`).
    pub paths: Vec<PathBuf>,
    /// Config file (for the default policy directory).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Change nothing; list the files that would change and exit 1 if any.
    #[arg(long)]
    pub check: bool,
}

/// `switchyard test` flags.
#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// Policy files or directories (default: the config's `policies.dir`).
    pub paths: Vec<PathBuf>,
    /// Engine: `jit`, `interp`, or `both` (a disagreement fails the test).
    #[arg(long, default_value = "both")]
    pub engine: crate::policy::jit::engine::EngineMode,
    /// Config file whose registry the policies use.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "human")]
    pub format: policy::Format,
    /// Total budget of the tests in test requests (a test decides one request, a
    /// `sample N` test N); tests that do not fit are skipped and fail the run. `0`:
    /// unlimited. The gateway's (re)load uses the default.
    #[arg(long, default_value_t = crate::policy::testing::DEFAULT_TEST_BUDGET)]
    pub test_budget: u64,
}

/// `switchyard serve` flags.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Config file; default `./switchyard.yaml` if it exists, else the built-in config.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Listen address, overriding `server.listen` (use port 0 for any free port).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Validate the config and policies and exit (0 valid, 1 invalid), as startup would.
    #[arg(long)]
    pub check: bool,
    /// Do not watch the policy directory (SIGHUP still reloads).
    #[arg(long)]
    pub no_watch: bool,
}

/// `switchyard mock` flags.
#[derive(Debug, clap::Args)]
pub struct MockArgs {
    /// Listen address (use port 0 for any free port).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// Wire format to emulate.
    #[arg(long, value_enum, default_value = "openai")]
    pub format: MockFormat,
    /// Delay before response headers, in ms.
    #[arg(long, default_value_t = 0, value_parser = whole_number::<u64>)]
    pub latency_ms: u64,
    /// Generation speed in tokens per second (0: no delay).
    #[arg(long, default_value_t = 0.0, value_parser = number)]
    pub tokens_per_s: f64,
    /// Probability in [0, 1] of an injected failure.
    #[arg(long, default_value_t = 0.0, value_parser = number)]
    pub fail_rate: f64,
    /// The first N requests fail with `--fail-status`, then `--fail-rate` applies.
    #[arg(long, default_value_t = 0, value_parser = whole_number::<u64>)]
    pub fail_first: u64,
    /// HTTP status of injected failures.
    #[arg(long, default_value_t = 500, value_parser = http_status)]
    pub fail_status: u16,
    /// Retry delay in seconds on failures and 429s (YAML `retry_after_s`).
    #[arg(long = "retry-after", conflicts_with = "retry_after_ms", value_parser = whole_number::<u64>)]
    pub retry_after_s: Option<u64>,
    /// Retry delay in milliseconds on failures and 429s.
    #[arg(long, value_parser = whole_number::<u64>)]
    pub retry_after_ms: Option<u64>,
    /// How the retry delay is sent: `seconds` (Retry-After: S), `ms` (retry-after-ms:
    /// MS) or `date` (Retry-After: HTTP date).
    #[arg(long, default_value = "seconds", value_parser = flag_choice::<RetryAfterFormat>)]
    pub retry_after_format: RetryAfterFormat,
    /// Cut the connection after N stream chunks.
    #[arg(long, value_parser = whole_number::<u32>)]
    pub cut_after_chunks: Option<u32>,
    /// Stall after N stream chunks for `--stall-ms`.
    #[arg(long, value_parser = whole_number::<u32>)]
    pub stall_after_chunks: Option<u32>,
    /// Stall length in ms.
    #[arg(long, default_value_t = 60_000, value_parser = whole_number::<u64>)]
    pub stall_ms: u64,
    /// After N stream events, send the format's error event and end the stream (no
    /// `[DONE]` / `message_stop`).
    #[arg(long, value_parser = whole_number::<u32>)]
    pub error_after_chunks: Option<u32>,
    /// Context window in tokens: longer prompts (estimated) get HTTP 400.
    #[arg(long, value_parser = whole_number::<u64>)]
    pub context_window: Option<u64>,
    /// Shape of injected error bodies: `openai`, `anthropic`, `gemini` or `bedrock` (default:
    /// the `--format`'s own).
    #[arg(long, value_parser = flag_choice::<ErrorShape>)]
    pub error_shape: Option<ErrorShape>,
    /// Continuation mode: a trailing assistant message is the start of the answer
    /// (`--prefill false` to treat it as prompt).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub prefill: bool,
    /// Requests per minute before 429 (sends `x-ratelimit-*-requests`, or
    /// `anthropic-ratelimit-requests-*`).
    #[arg(long, value_parser = whole_number::<u64>)]
    pub ratelimit_requests: Option<u64>,
    /// Tokens per minute before 429 (sends `x-ratelimit-*-tokens`, or
    /// `anthropic-ratelimit-tokens-*`).
    #[arg(long, value_parser = whole_number::<u64>)]
    pub ratelimit_tokens: Option<u64>,
    /// Seed for failures and generated text.
    #[arg(long, default_value_t = 0, value_parser = whole_number::<u64>)]
    pub seed: u64,
    /// Completion length in tokens when the request sets no `max_tokens`.
    #[arg(long, default_value_t = 16, value_parser = whole_number::<u32>)]
    pub completion_tokens: u32,
}

/// Emulated wire formats.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum MockFormat {
    /// OpenAI Chat Completions.
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini generateContent.
    Gemini,
    /// Amazon Bedrock Converse and ConverseStream.
    Bedrock,
}

impl MockFormat {
    /// The emulator's wire format.
    pub fn wire(self) -> Wire {
        match self {
            MockFormat::Openai => Wire::OpenAi,
            MockFormat::Anthropic => Wire::Anthropic,
            MockFormat::Gemini => Wire::Gemini,
            MockFormat::Bedrock => Wire::Bedrock,
        }
    }
}

impl MockArgs {
    fn options(&self) -> Result<MockOptions, String> {
        let opts = MockOptions {
            latency_ms: self.latency_ms,
            tokens_per_s: self.tokens_per_s,
            fail_rate: self.fail_rate,
            fail_first: self.fail_first,
            fail_status: self.fail_status,
            retry_after_s: self.retry_after_s,
            retry_after_ms: self.retry_after_ms,
            retry_after_format: self.retry_after_format,
            cut_after_chunks: self.cut_after_chunks,
            stall_after_chunks: self.stall_after_chunks,
            stall_ms: self.stall_ms,
            error_after_chunks: self.error_after_chunks,
            context_window: self.context_window,
            error_shape: match self.error_shape {
                Some(s) => s,
                None => self.format.wire().error_shape(),
            },
            prefill: self.prefill,
            ratelimit_requests: self.ratelimit_requests,
            ratelimit_tokens: self.ratelimit_tokens,
            seed: self.seed,
            completion_tokens: self.completion_tokens,
        };
        // The checks are the YAML's (`providers.<name>.mock`); here they speak of
        // the flags the user typed.
        opts.validate().map_err(|e| in_flag_terms(&e))?;
        Ok(opts)
    }
}

/// The YAML field names of the emulator's options and the `switchyard mock` flags
/// that set them.
const MOCK_FLAGS: &[(&str, &str)] = &[
    ("retry_after_format", "--retry-after-format"),
    ("retry_after_ms", "--retry-after-ms"),
    ("retry_after_s", "--retry-after"),
    ("fail_rate", "--fail-rate"),
    ("fail_status", "--fail-status"),
    ("fail_first", "--fail-first"),
    ("tokens_per_s", "--tokens-per-s"),
    ("completion_tokens", "--completion-tokens"),
    ("context_window", "--context-window"),
    ("error_shape", "--error-shape"),
];

/// `message` (from `MockOptions::validate`) with YAML field names as flags.
fn in_flag_terms(message: &str) -> String {
    let mut out = message.to_string();
    for (field, flag) in MOCK_FLAGS {
        out = out.replace(field, flag);
    }
    out
}

/// A `switchyard mock` flag value that must be a whole number (clap prints it as
/// "invalid value 'x' for '--flag <N>': expected ...").
fn whole_number<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim().parse().map_err(|_| {
        if s.trim().starts_with('-') {
            format!("expected a whole number of 0 or more, not `{s}`")
        } else {
            format!("expected a whole number like 250, not `{s}`")
        }
    })
}

/// A `switchyard mock` flag value that must be a number (`0.25`, `50`).
fn number(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("expected a number like 0.25, not `{s}`")),
    }
}

/// A `switchyard mock` flag value that must be an HTTP status (checked for 400-599
/// with the other options).
fn http_status(s: &str) -> Result<u16, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("expected an HTTP status like 503, not `{s}`"))
}

/// A `switchyard mock` flag value that is one of a fixed list, with the list in the
/// message and without the YAML field's name (clap names the flag).
fn flag_choice<T: std::str::FromStr<Err = String>>(s: &str) -> Result<T, String> {
    T::from_str(s).map_err(|e| match e.split_once(' ') {
        Some((field, rest)) if MOCK_FLAGS.iter().any(|(f, _)| *f == field) => rest.to_string(),
        _ => e,
    })
}

/// The process's multi-threaded runtime, with `workers` threads (tokio's default, one
/// per CPU or `TOKIO_WORKER_THREADS`, when `None`).
fn runtime(workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        b.worker_threads(n.max(1));
    }
    b.enable_all().build()
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::logging::init(&cli.log, cli.log_format);
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Lint(a) => policy::lint(&a.paths, a.config.as_deref(), a.format, a.deny_warnings),
        Command::Fmt(a) => policy::fmt(&a.paths, a.config.as_deref(), a.check),
        Command::Test(a) => policy::test(
            &a.paths,
            a.config.as_deref(),
            a.format,
            a.engine,
            (a.test_budget > 0).then_some(a.test_budget),
        ),
        Command::DryRun(a) => dry_run::run(a),
        Command::Keys(k) => keys::run(k),
        Command::Health(a) => health::run(&a),
        Command::Lsp(_) => crate::lsp::run(),
        Command::Explain(a) => explain::run(&a),
        Command::Completions(a) => {
            // Into a buffer first: `clap_complete` panics on a write error, and a
            // reader that stops early (`| head`, `| true`) closes the pipe. A
            // closed pipe ends the command quietly, as it does `cat`'s.
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(a.shell, &mut cmd, "switchyard", &mut script);
            let mut out = std::io::stdout().lock();
            match std::io::Write::write_all(&mut out, &script)
                .and_then(|()| std::io::Write::flush(&mut out))
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write the completion script: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Mock(args) => {
            let opts = match args.options().map(|o| (o, args.format.wire())) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let rt = match runtime(None) {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::from(2);
                }
            };
            let (opts, wire) = opts;
            match rt.block_on(crate::mock::server::run(args.listen, opts, wire)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot listen on {}: {e}", args.listen);
                    ExitCode::from(2)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mock_args(flags: &[&str]) -> Result<MockOptions, String> {
        let argv = ["switchyard", "mock"].iter().chain(flags);
        match Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            Command::Mock(a) => a.options(),
            _ => unreachable!("parsed `mock`"),
        }
    }

    #[test]
    fn mock_flag_defaults_are_the_yaml_defaults() {
        assert_eq!(mock_args(&[]).unwrap(), MockOptions::default());
    }

    #[test]
    fn mock_fault_flags_set_the_yaml_options() {
        let o = mock_args(&[
            "--fail-first",
            "2",
            "--retry-after-ms",
            "250",
            "--retry-after-format",
            "date",
            "--error-after-chunks",
            "1",
            "--context-window",
            "8192",
            "--error-shape",
            "anthropic",
            "--prefill",
            "false",
        ])
        .unwrap();
        let want = MockOptions {
            fail_first: 2,
            retry_after_ms: Some(250),
            retry_after_format: RetryAfterFormat::Date,
            error_after_chunks: Some(1),
            context_window: Some(8192),
            error_shape: ErrorShape::Anthropic,
            prefill: false,
            ..MockOptions::default()
        };
        assert_eq!(o, want);
        let e = mock_args(&["--error-shape", "cohere"]).unwrap_err();
        assert!(e.contains("--error-shape"), "{e}");
        let e = mock_args(&["--retry-after", "1", "--retry-after-ms", "5"]).unwrap_err();
        assert!(e.contains("--retry-after-ms"), "{e}");
        let e = mock_args(&["--context-window", "0"]).unwrap_err();
        assert!(e.contains("--context-window"), "{e}");
    }

    /// Issue 18: `switchyard mock` reported bad flag values in Rust's words
    /// ("invalid digit found in string") and the YAML's field names (`fail_rate`).
    #[test]
    fn mock_flag_errors_speak_of_the_flags() {
        for (flags, want) in [
            (
                &["--latency-ms", "fast"][..],
                "expected a whole number like 250",
            ),
            (
                &["--latency-ms=-5"][..],
                "expected a whole number of 0 or more",
            ),
            (&["--fail-rate", "often"][..], "expected a number like 0.25"),
            (
                &["--fail-status", "teapot"][..],
                "expected an HTTP status like 503",
            ),
            (
                &["--fail-rate", "2"][..],
                "--fail-rate 2 must be between 0 and 1",
            ),
            (
                &["--fail-status", "200"][..],
                "--fail-status 200 must be an HTTP error status",
            ),
            (
                &["--completion-tokens", "0"][..],
                "--completion-tokens must be at least 1",
            ),
            (
                &["--retry-after-format", "hours"][..],
                "`hours` is not one of seconds, ms, date",
            ),
        ] {
            let e = mock_args(flags).unwrap_err();
            assert!(e.contains(want), "{flags:?}: {e}");
            assert!(!e.contains("invalid digit"), "{flags:?}: {e}");
            assert!(
                MOCK_FLAGS.iter().all(|(f, _)| !e.contains(f)),
                "{flags:?}: {e}"
            );
        }
    }

    #[test]
    fn mock_format_picks_its_error_shape_unless_one_is_given() {
        let o = mock_args(&["--format", "gemini"]).unwrap();
        assert_eq!(o.error_shape, ErrorShape::Gemini);
        let o = mock_args(&["--format", "anthropic"]).unwrap();
        assert_eq!(o.error_shape, ErrorShape::Anthropic);
        let o = mock_args(&["--format", "anthropic", "--error-shape", "openai"]).unwrap();
        assert_eq!(o.error_shape, ErrorShape::OpenAi);
    }

    #[test]
    fn mock_format_bedrock_speaks_bedrock_with_its_error_shape() {
        let o = mock_args(&["--format", "bedrock"]).unwrap();
        assert_eq!(o.error_shape, ErrorShape::Bedrock);
        assert_eq!(MockFormat::Bedrock.wire(), Wire::Bedrock);
        let o = mock_args(&["--format", "openai", "--error-shape", "bedrock"]).unwrap();
        assert_eq!(o.error_shape, ErrorShape::Bedrock);
    }
}
