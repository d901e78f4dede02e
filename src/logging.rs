//! Process logging: the `tracing` subscriber every command runs under, and the
//! access log's file sink (`telemetry.access_log.path`).
//!
//! Two layers, each with its own filter, so neither silences the other:
//! - **stderr**: every log line the `--log` filter lets through, as text (coloured
//!   only on a terminal and never with `NO_COLOR`) or JSON (`--log-format json`);
//! - **the access file**: only the access lines (target [`ACCESS_TARGET`], one per
//!   chat request, see `gateway::access`), as JSON lines, whatever `--log` says, once
//!   [`open_access_file`] has opened it. Until then (and in every command but `serve`)
//!   its filter refuses every event, so the layer costs nothing.
//!
//! The file is written in batches by a background thread (`batch`: lines are
//! appended to a bounded buffer, `batch::MAX_PENDING_BYTES`, and written every
//! `batch::FLUSH_DELAY`): a request never waits for the disk. When the buffer is
//! full (the disk cannot keep up) lines are dropped whole and counted
//! (`switchyard_access_log_dropped_total`, read at scrape time by [`dropped_lines`]).
//! Files rotate by time (`rotation`) and the oldest beyond `max_files` are deleted,
//! by `tracing-appender`'s rolling appender; at shutdown [`close_access_file`] writes
//! what is pending.

use std::sync::OnceLock;

use tracing_subscriber::fmt::writer::{EitherWriter, MakeWriter};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

use crate::config::telemetry::{AccessFileConfig, Rotation};

mod access_json;
pub(crate) mod batch;

/// The target of the access lines (`gateway::access`).
pub const ACCESS_TARGET: &str = "switchyard::access";

/// Log output format (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The open access-log file (none until [`open_access_file`]).
static ACCESS_FILE: OnceLock<batch::BatchFile> = OnceLock::new();

/// stderr's lines are JSON (`--log-format json`), set by [`init`].
static STDERR_JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) use access_json::Fields;

/// Emits one access line: `emit` sends its `tracing` event (target [`ACCESS_TARGET`]);
/// `render` writes the same fields as JSON members ([`Fields`]) first, when a JSON
/// layer may format the event (the access file is open, or stderr is JSON and lets
/// access lines through), so that layer copies them instead of visiting the event's
/// fields (`access_json`).
pub(crate) fn emit_access(render: impl FnOnce(&mut Fields<'_>), emit: impl FnOnce()) {
    let json = ACCESS_FILE.get().is_some()
        || (STDERR_JSON.load(std::sync::atomic::Ordering::Relaxed)
            && tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO));
    access_json::with_fields(json, render, emit);
}

/// Whether an access line emitted now would be written anywhere: the access file
/// is open, or a layer takes the access target's `INFO` events (the stderr filter,
/// `--log`, lets them through). `--log warn` without `telemetry.access_log.path`
/// writes none, and the request path then builds none ([`crate::gateway::Facts`]).
pub(crate) fn access_enabled() -> bool {
    ACCESS_FILE.get().is_some() || tracing::enabled!(target: ACCESS_TARGET, tracing::Level::INFO)
}

/// What the JSON log format writes while `emit` runs, under a subscriber of its own
/// (tests).
#[cfg(test)]
pub(crate) fn json_written(emit: impl FnOnce()) -> String {
    access_json::written(emit)
}

/// [`emit_access`] with the choice made by the caller (`json`: render first), for
/// tests that compare the rendered fields with the visited ones.
#[cfg(test)]
pub(crate) fn emit_access_with(
    json: bool,
    render: impl FnOnce(&mut Fields<'_>),
    emit: impl FnOnce(),
) {
    access_json::with_fields(json, render, emit);
}

/// Installs the process's subscriber: stderr filtered by `filter` (tracing
/// `EnvFilter` syntax; an invalid filter falls back to `info`) in `format`, and the
/// access-file layer. A second call (tests in one process) leaves the first.
pub fn init(filter: &str, format: LogFormat) {
    // cranelift logs every compiled function at `info`; keep that out of the
    // gateway's logs unless the filter asks for it by name.
    let filter = if filter.contains("cranelift") {
        filter.to_string()
    } else {
        format!("{filter},cranelift_jit=warn,cranelift_codegen=warn,cranelift_module=warn")
    };
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,cranelift_jit=warn,cranelift_codegen=warn")
    });
    let ansi = colour(
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let stderr = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let stderr = match format {
        LogFormat::Text => stderr.boxed(),
        LogFormat::Json => {
            STDERR_JSON.store(true, std::sync::atomic::Ordering::Relaxed);
            stderr
                .json()
                .event_format(access_json::AccessJson::default())
                .boxed()
        }
    };
    let file = tracing_subscriber::fmt::layer()
        .json()
        .event_format(access_json::AccessJson::default())
        .with_ansi(false)
        .with_writer(FileWriter)
        .with_filter(
            tracing_subscriber::filter::filter_fn(|m| {
                m.target() == ACCESS_TARGET && ACCESS_FILE.get().is_some()
            })
            // Access lines are `info`: the hint keeps `debug!`/`trace!` call sites
            // behind the global level check when stderr's filter is coarser.
            .with_max_level_hint(tracing::Level::INFO),
        );
    let _ = tracing_subscriber::registry()
        .with(stderr.with_filter(filter))
        .with(file)
        .try_init();
}

/// Whether log lines carry ANSI colour: only on a terminal, and never when
/// `NO_COLOR` is set to anything but the empty string (<https://no-color.org>), so
/// redirected logs hold plain text.
pub fn colour(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Opens the access-log file of `cfg` (creating its directory) and starts writing
/// the access lines to it. Once per process.
///
/// # Errors
/// The directory cannot be created or the file cannot be opened (the message names
/// the path and the system's reason), or a file is already open.
pub fn open_access_file(cfg: &AccessFileConfig) -> Result<(), String> {
    let appender = rolling(cfg)?;
    if ACCESS_FILE.get().is_some() {
        return Err("the access log file is already open".to_string());
    }
    let file = batch::BatchFile::start(appender, "switchyard-access-log").map_err(|e| {
        format!("telemetry.access_log.path: cannot start the access log writer: {e}")
    })?;
    if let Err(file) = ACCESS_FILE.set(file) {
        file.close();
        return Err("the access log file is already open".to_string());
    }
    // The layer's filter read "no file" for every call site so far; ask again.
    tracing::callsite::rebuild_interest_cache();
    Ok(())
}

/// Checks that the access-log file of `cfg` can be opened (creating it and its
/// directory, as `serve` would), without writing to it: `serve --check`.
///
/// # Errors
/// As [`open_access_file`].
pub fn check_access_file(cfg: &AccessFileConfig) -> Result<(), String> {
    rolling(cfg).map(drop)
}

fn rolling(
    cfg: &AccessFileConfig,
) -> Result<tracing_appender::rolling::RollingFileAppender, String> {
    use tracing_appender::rolling::{RollingFileAppender, Rotation as R};
    let rotation = match cfg.rotation {
        Rotation::Minutely => R::MINUTELY,
        Rotation::Hourly => R::HOURLY,
        Rotation::Daily => R::DAILY,
        Rotation::Never => R::NEVER,
    };
    let mut b = RollingFileAppender::builder()
        .rotation(rotation)
        .filename_prefix(cfg.prefix.clone());
    if let Some(s) = &cfg.suffix {
        b = b.filename_suffix(s.clone());
    }
    if cfg.max_files > 0 && cfg.rotation != Rotation::Never {
        b = b.max_log_files(cfg.max_files);
    }
    // The appender creates a missing directory itself; a clearer error first.
    std::fs::create_dir_all(&cfg.dir).map_err(|e| {
        format!(
            "telemetry.access_log.path: cannot create the directory {}: {e}",
            cfg.dir.display()
        )
    })?;
    b.build(&cfg.dir).map_err(|e| {
        format!(
            "telemetry.access_log.path: cannot open the access log in {}: {e}",
            cfg.dir.display()
        )
    })
}

/// Writes the access-log file's pending lines and stops its writer thread
/// (shutdown); access lines after this are not written to the file.
pub fn close_access_file() {
    if let Some(f) = ACCESS_FILE.get() {
        f.close();
    }
}

/// Access lines dropped so far because the file writer's buffer was full (0 when
/// no file is open).
pub fn dropped_lines() -> usize {
    ACCESS_FILE.get().map_or(0, batch::BatchFile::dropped)
}

/// The file layer's writer: the open file's queue, or nothing before one is open.
struct FileWriter;

impl<'a> MakeWriter<'a> for FileWriter {
    type Writer = EitherWriter<batch::LineWriter<'static>, std::io::Sink>;

    fn make_writer(&'a self) -> Self::Writer {
        match ACCESS_FILE.get() {
            Some(f) => EitherWriter::A(f.writer()),
            None => EitherWriter::B(std::io::sink()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 18: colour codes were written into redirected log files.
    #[test]
    fn log_colour_only_on_a_terminal_and_never_with_no_color() {
        use std::ffi::OsStr;
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(false, None));
        assert!(!colour(true, Some(OsStr::new("1"))));
    }

    #[test]
    fn an_unopenable_access_log_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the directory should be.
        let blocker = dir.path().join("not-a-dir");
        std::fs::write(&blocker, "x").unwrap();
        let cfg = AccessFileConfig {
            dir: blocker.join("logs"),
            prefix: "access".into(),
            suffix: Some("log".into()),
            rotation: Rotation::Daily,
            max_files: 7,
        };
        let e = check_access_file(&cfg).unwrap_err();
        assert!(
            e.contains("telemetry.access_log.path") && e.contains("not-a-dir"),
            "{e}"
        );
        let ok = AccessFileConfig {
            dir: dir.path().join("new/logs"),
            ..cfg
        };
        check_access_file(&ok).unwrap();
        assert!(dir.path().join("new/logs").is_dir());
    }
}
