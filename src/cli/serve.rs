//! `switchyard serve`: load config, build the gateway, listen, drain on shutdown.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use super::{runtime, ServeArgs};
use crate::config;
use crate::gateway::Gateway;

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
    let no_watch = args.no_watch;
    rt.block_on(async move {
        let metrics = crate::metrics::install();
        if let Some(h) = metrics.clone() {
            tokio::spawn(crate::metrics::upkeep(h));
        }
        let listen = config.server.listen;
        let drain = Duration::from_millis(config.server.drain_timeout_ms);
        let limits = crate::server::ConnLimits::from_config(&config.server);
        let policy_line = format!(
            "policy {} loaded: {}",
            policy.version,
            policy.files.join(", ")
        );
        let gw = match Gateway::new(config, policy, metrics, |v| {
            std::env::var(v).ok().filter(|s| !s.is_empty())
        }) {
            Ok(g) => Arc::new(g),
            Err(errors) => {
                for e in errors {
                    eprintln!("error: {e}");
                }
                return ExitCode::from(1);
            }
        };
        let listener = match TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot listen on {listen}: {e}");
                return ExitCode::from(2);
            }
        };
        let addr = listener.local_addr().unwrap_or(listen);
        tracing::info!("{source_line}");
        tracing::info!("{policy_line}");
        tracing::info!(
            models = gw.registry.model_order.len(),
            providers = gw.upstreams.len(),
            "switchyard listening on http://{addr}"
        );
        println!("switchyard listening on {addr}");
        let policy_dir = crate::routing::policy::policy_dir(&gw.config)
            .ok()
            .flatten();
        let reloader = crate::reload::Reloader::new(gw.clone(), policy_dir);
        let _ = gw.reloader.set(Arc::downgrade(&reloader));
        tokio::spawn(reloader.clone().run());
        let _watch = if no_watch {
            None
        } else {
            match reloader.watch() {
                Ok(w) => w,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            }
        };
        spawn_sighup(reloader.clone());
        tokio::spawn(crate::admin::endpoints::log_every(
            gw.clone(),
            crate::admin::endpoints::LOG_EVERY,
        ));
        let gw_for_shutdown = gw.clone();
        let shutdown = async move {
            crate::server::shutdown_signal().await;
            gw_for_shutdown.start_draining();
        };
        crate::server::serve(
            listener,
            move |req, _peer| crate::ingress::handle(gw.clone(), req),
            shutdown,
            drain,
            limits,
        )
        .await;
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
