//! `switchyard serve`: load config and policies, start the [`App`], wait for a
//! signal, drain. The process-level parts only: exit codes, stdout, signals.

use std::process::ExitCode;
use std::sync::Arc;

use super::{runtime, ServeArgs};
use crate::app::{App, AppOptions, StartError};
use crate::config;

/// Runs `switchyard serve`.
pub fn run(args: ServeArgs) -> ExitCode {
    let (mut config, source_line) = match config::locate_and_load(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(listen) = args.listen {
        config.server.listen = listen;
    }
    let policy = match crate::routing::policy::load(&config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: the policy set is invalid; not starting\n{e}");
            return ExitCode::from(1);
        }
    };
    if config.models.is_empty() {
        eprintln!("warning: the config defines no models: every chat request will get 404");
    }
    if args.check {
        // The startup path short of binding: every provider is set up as `serve`
        // would set it up (a kind without an adapter fails here, not at start).
        let env = AppOptions::default().env;
        if let Err(errors) = crate::app::upstreams(&config, &*env) {
            for e in errors {
                eprintln!("error: {e}");
            }
            return ExitCode::from(1);
        }
        println!(
            "config OK: {} provider(s), {} model(s) ({}); policy {} OK: {} file(s)",
            config.providers.len(),
            config.models.len(),
            source_line,
            policy.version,
            policy.files.len()
        );
        return ExitCode::SUCCESS;
    }
    let rt = match runtime() {
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
        let policy_line = format!(
            "policy {} loaded: {}",
            policy.version,
            policy.files.join(", ")
        );
        let (models, providers) = (config.models.len(), config.providers.len());
        let app = match App::start(config, policy, opts).await {
            Ok(app) => app,
            Err(e) => {
                for line in e.to_string().lines() {
                    eprintln!("error: {line}");
                }
                return ExitCode::from(match e {
                    StartError::Providers(_) | StartError::Auth(_) => 1,
                    StartError::Bind { .. } | StartError::Watch(_) => 2,
                });
            }
        };
        let addr = app.addr();
        tracing::info!("{source_line}");
        tracing::info!("{policy_line}");
        tracing::info!(models, providers, "switchyard listening on http://{addr}");
        if let Some(a) = app.admin_addr() {
            tracing::info!("admin endpoints (/admin/*, /metrics) listening on http://{a}");
        }
        // The watch is armed already: a save from here on is seen.
        println!("switchyard listening on {addr}");
        spawn_sighup(app.reloader().clone());
        crate::server::shutdown_signal().await;
        app.shutdown();
        app.wait().await;
        tracing::info!("switchyard stopped");
        ExitCode::SUCCESS
    })
}

/// Forces a policy reload on every SIGHUP.
fn spawn_sighup(reloader: Arc<crate::reload::Reloader>) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; reload by saving a policy file");
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading policies");
            reloader.request(true);
        }
    });
    #[cfg(not(unix))]
    let _ = reloader;
}
