//! `switchyard serve`: load config and policies, start the [`App`], wait for a
//! signal, drain. The process-level parts only: exit codes, stdout, signals.

use std::process::ExitCode;
use std::sync::Arc;

use super::{runtime, ServeArgs};
use crate::app::{App, AppOptions, StartError};
use crate::config;

/// Runs `switchyard serve` (with `--check`: everything but binding and serving).
///
/// Exit codes: 0, 1 an invalid config or policy set (or a provider or authentication
/// that cannot be set up from it), 2 an I/O error (an unreadable config or policy
/// file, an address in use, an unwatchable policy directory, an access-log file that
/// cannot be opened).
pub fn run(args: ServeArgs) -> ExitCode {
    let (mut config, source_line) = match config::locate_and_load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    let policy = match crate::routing::policy::load(&config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: the policy set is invalid; not starting\n{e}");
            let code = match e {
                crate::routing::policy::LoadError::Io(_) => 2,
                _ => 1,
            };
            return ExitCode::from(code);
        }
    };
    if config.models.is_empty() {
        eprintln!("warning: the config defines no models: every chat request will get 404");
    }
    // The access log's file sink (`telemetry.access_log.path`): opened before the
    // first request; `--check` only makes sure it can be.
    if let Some(file) = &config.telemetry.access_log.file {
        let opened = if args.check {
            crate::logging::check_access_file(file)
        } else {
            crate::logging::open_access_file(file)
        };
        if let Err(e) = opened {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    // With per-core serving threads (each with its own runtime) this runtime keeps
    // only the background work: reloads, upkeep, the admin listener, Redis.
    let workers = match config.server.runtime {
        config::RuntimeMode::PerCore => Some(1),
        config::RuntimeMode::Shared => config.server.threads,
    };
    let rt = match runtime(workers) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = AppOptions {
        watch: !args.no_watch,
        ..AppOptions::default()
    };
    rt.block_on(async move {
        let policy_line = crate::routing::policy::serving_line(&policy);
        let (models, providers) = (config.models.len(), config.providers.len());
        let check_line = format!(
            "config OK: {providers} provider(s), {models} model(s) ({source_line}); policy {} OK: {} file(s)",
            policy.version,
            policy.files.len()
        );
        // `--check` runs the startup path up to the bind: every provider, the
        // authentication and the policy watch are set up as `serve` sets them up.
        let prepared = match App::prepare(config, policy, opts) {
            Ok(p) => p,
            Err(e) => return start_failed(e),
        };
        if args.check {
            drop(prepared);
            println!("{check_line}");
            return ExitCode::SUCCESS;
        }
        let app = match App::serve(prepared).await {
            Ok(app) => app,
            Err(e) => return start_failed(e),
        };
        let addr = app.addr();
        tracing::info!("{source_line}");
        tracing::info!("{policy_line}");
        tracing::info!(models, providers, "switchyard listening on http://{addr}");
        if let Some(a) = app.admin_addr() {
            tracing::info!("admin endpoints (/admin/*, /metrics) listening on http://{a}");
        }
        // The signal handlers go in before the line that says the gateway is up: a
        // supervisor that sends SIGHUP (or SIGTERM) on seeing it must not meet the
        // signal's default action, which ends the process (outside attack: 23 of 40
        // SIGHUPs sent on that line killed the gateway).
        spawn_sighup(app.reloader().clone());
        let stop = crate::server::shutdown_signal();
        // The watch is armed already: a save from here on is seen.
        println!("switchyard listening on {addr}");
        stop.await;
        // A second SIGTERM or SIGINT while draining ends the process at once.
        let again = crate::server::shutdown_signal();
        tokio::spawn(async move {
            again.await;
            tracing::warn!("second shutdown signal: exiting without waiting for the drain");
            crate::logging::close_access_file();
            std::process::exit(1);
        });
        app.shutdown();
        app.wait().await;
        tracing::info!("switchyard stopped");
        crate::logging::close_access_file();
        ExitCode::SUCCESS
    })
}

/// Prints why the gateway did not start, one `error:` line per line; the exit code
/// is 1 for what the config says, 2 for the environment.
fn start_failed(e: StartError) -> ExitCode {
    for line in e.to_string().lines() {
        eprintln!("error: {line}");
    }
    ExitCode::from(match e {
        StartError::Providers(_) | StartError::Auth(_) => 1,
        StartError::Bind { .. } | StartError::Watch(_) => 2,
    })
}

/// Forces a policy reload on every SIGHUP; the handler is installed by this call.
fn spawn_sighup(reloader: Arc<crate::reload::Reloader>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; reload by saving a policy file");
            return;
        };
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading policies");
                reloader.request(true);
            }
        });
    }
    #[cfg(not(unix))]
    let _ = reloader;
}
