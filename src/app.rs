//! The wiring of a running gateway, in one place: config → upstreams (each with its
//! transport) → registry and statistics → policy cell → reloader (and its watch) →
//! listener → server; and the shutdown in reverse.
//!
//! `switchyard serve` is a thin call into [`App::start`]; integration tests start an
//! `App` in process on port 0 the same way. Process-level concerns (signals, exit
//! codes, the `listening` line on stdout) stay in `cli::serve`.
//!
//! Order matters in two places. The policy watch is armed before [`App::start`]
//! returns, so a save made as soon as the caller announces the address is seen. On
//! shutdown, the listener stops accepting, in-flight requests drain for
//! `server.drain_timeout_ms`, and then live streams are ended with one error event
//! each ([`StreamStop`]) before the connections close.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{Config, ProviderConfig, ProviderKind, RuntimeMode};
use crate::egress::http::HttpTransport;
use crate::egress::relay::StreamStop;
use crate::egress::{Transport, Upstream};
use crate::gateway::Gateway;
use crate::ingress::{Services, Surface};
use crate::reload::{Reloader, WatchGuard};
use crate::routing::policy::{PolicyCell, PolicySnapshot};

/// Reads an environment variable: `None` when unset or empty.
pub type Env = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// How to start an [`App`].
pub struct AppOptions {
    /// Watch the policy directory and reload on change (`serve --no-watch`: false).
    pub watch: bool,
    /// Reads the providers' API-key variables (`std::env::var` in `serve`).
    pub env: Env,
}

impl Default for AppOptions {
    fn default() -> Self {
        AppOptions {
            watch: true,
            env: Box::new(|v| std::env::var(v).ok().filter(|s| !s.is_empty())),
        }
    }
}

/// Why an [`App`] did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Providers that cannot be set up, one sentence each (exit code 1: the config).
    #[error("{}", .0.join("\n"))]
    Providers(Vec<String>),
    /// The listen address cannot be bound (exit code 2: the environment).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The bind error.
        source: std::io::Error,
    },
    /// The policy directory cannot be watched (exit code 2).
    #[error("{0}")]
    Watch(String),
    /// Authentication cannot be set up: a key or JWKS file, an unset secret
    /// variable (exit code 1).
    #[error("{0}")]
    Auth(String),
}

/// The upstreams of `config`, one per provider in config order, each with its
/// transport: the in-process emulator for `kind: mock`, pooled HTTP otherwise.
///
/// # Errors
/// One sentence per provider that cannot be set up (Bedrock without a region or
/// credentials).
pub fn upstreams(
    config: &Config,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> Result<Vec<Upstream>, Vec<String>> {
    let mut upstreams = Vec::new();
    let mut errors = Vec::new();
    let pools = per_core_threads(&config.server).unwrap_or(0);
    for p in &config.providers {
        match Upstream::new(p, env, transport(p, pools)) {
            Ok(u) => upstreams.push(u),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(upstreams)
    } else {
        Err(errors)
    }
}

/// A provider's transport; `per_core` serving threads each get their own connection
/// pool (see [`HttpTransport::new`]).
fn transport(p: &ProviderConfig, per_core: usize) -> Arc<dyn Transport> {
    if p.kind == ProviderKind::Mock {
        Arc::new(crate::mock::InProcess::new(p.mock.clone()))
    } else {
        Arc::new(HttpTransport::new(&p.name, &p.timeouts, per_core))
    }
}

/// The number of per-core serving threads `server` asks for, or `None` for the
/// shared work-stealing runtime (`server.runtime: shared`).
pub fn per_core_threads(server: &crate::config::ServerConfig) -> Option<usize> {
    (server.runtime == RuntimeMode::PerCore).then(|| server.serving_threads())
}

/// A running gateway: its listener, services and background tasks.
pub struct App {
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    services: Arc<Services>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
    _watch: Option<WatchGuard>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").field("addr", &self.addr).finish()
    }
}

/// Every part of a gateway built from its config, short of the listeners: what
/// `serve --check` builds and drops (so it fails exactly where startup would, before
/// binding), and what [`App::start`] binds and serves.
pub struct Prepared {
    listen: SocketAddr,
    per_core: Option<usize>,
    admin_listen: Option<SocketAddr>,
    drain: Duration,
    limits: crate::server::ConnLimits,
    gateway: Arc<Gateway>,
    reloader: Arc<Reloader>,
    admin: crate::auth::AdminGuard,
    metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    stream_stop: StreamStop,
    watch_guard: Option<WatchGuard>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("listen", &self.listen)
            .finish()
    }
}

impl App {
    /// Builds every part for `config` serving `policy` in startup order (upstreams,
    /// authentication, admin guard, metrics, gateway, reloader, the policy watch),
    /// without binding anything. Call within a tokio runtime.
    ///
    /// # Errors
    /// [`StartError`]: a provider or the authentication that cannot be set up, or the
    /// watch.
    pub fn prepare(
        config: Config,
        policy: PolicySnapshot,
        opts: AppOptions,
    ) -> Result<Prepared, StartError> {
        let upstreams = upstreams(&config, &*opts.env).map_err(StartError::Providers)?;
        let auth =
            crate::auth::Authenticator::new(&config.auth, &*opts.env).map_err(StartError::Auth)?;
        let admin = crate::auth::AdminGuard::new(&config.admin);
        if admin.is_open() {
            tracing::warn!(
                "no admin keys are configured: /admin/* answers anyone who can reach it (see `admin:` in the README)"
            );
        }
        if auth.mode() == crate::config::AuthMode::None {
            tracing::info!("auth.mode is none: client credentials are not verified");
        }
        let admin_listen = config.admin.listen;
        let metrics = crate::telemetry::install();
        let listen = config.server.listen;
        let per_core = per_core_threads(&config.server);
        let drain = Duration::from_millis(config.server.drain_timeout_ms);
        let limits = crate::server::ConnLimits::from_config(&config.server);
        let policy_dir = crate::routing::policy::policy_dir(&config).ok().flatten();
        let cell: PolicyCell = Arc::new(arc_swap::ArcSwap::from_pointee(policy));
        let reloader = Reloader::new(cell.clone(), &config, policy_dir);
        let stream_stop = StreamStop::new();
        let tracer = crate::otel::Tracer::start(&config.telemetry, &*opts.env)
            .map_err(|e| StartError::Providers(vec![e]))?;
        let gateway = Arc::new(Gateway::new(
            config,
            upstreams,
            cell,
            stream_stop.clone(),
            auth,
            tracer,
        ));
        let watch_guard = if opts.watch {
            reloader.watch().map_err(StartError::Watch)?
        } else {
            None
        };
        Ok(Prepared {
            listen,
            per_core,
            admin_listen,
            drain,
            limits,
            gateway,
            reloader,
            admin,
            metrics,
            stream_stop,
            watch_guard,
        })
    }

    /// Builds every part for `config` serving `policy` ([`App::prepare`]), binds
    /// `config.server.listen` (port 0 picks a free port), and starts serving in the
    /// background; the policy watch is armed before it returns. Call within a tokio
    /// runtime.
    ///
    /// # Errors
    /// [`StartError`]: a provider that cannot be set up, the bind, or the watch.
    pub async fn start(
        config: Config,
        policy: PolicySnapshot,
        opts: AppOptions,
    ) -> Result<App, StartError> {
        Self::serve(Self::prepare(config, policy, opts)?).await
    }

    /// Binds the listeners of `prepared` and starts serving in the background.
    ///
    /// # Errors
    /// [`StartError::Bind`].
    pub async fn serve(prepared: Prepared) -> Result<App, StartError> {
        let Prepared {
            listen,
            per_core,
            admin_listen,
            drain,
            limits,
            gateway,
            reloader,
            admin,
            metrics,
            stream_stop,
            watch_guard,
        } = prepared;
        let listeners = match per_core {
            Some(n) => crate::server::bind_per_core(listen, n),
            None => crate::server::bind_listener(listen).map(|l| vec![l]),
        }
        .map_err(|source| StartError::Bind {
            addr: listen,
            source,
        })?;
        let addr = listeners[0].local_addr().unwrap_or(listen);
        let admin_listener = match admin_listen {
            None => None,
            Some(a) => Some(
                crate::server::bind_listener(a)
                    .map_err(|source| StartError::Bind { addr: a, source })?,
            ),
        };
        let admin_addr = admin_listener.as_ref().map(|l| {
            l.local_addr()
                .unwrap_or_else(|_| admin_listen.unwrap_or(listen))
        });
        let mut tasks = vec![tokio::spawn(reloader.clone().run())];
        if let Some(h) = metrics.clone() {
            tasks.push(tokio::spawn(crate::telemetry::upkeep(h)));
        }
        tasks.push(tokio::spawn(crate::admin::endpoints::log_every(
            gateway.clone(),
            crate::admin::endpoints::LOG_EVERY,
        )));
        let services = Arc::new(Services::new(gateway, reloader, metrics, admin));
        let (shutdown, mut shutdown_rx) = watch::channel(false);
        let svc = services.clone();
        let on_shutdown = {
            let svc = services.clone();
            async move {
                let _ = shutdown_rx.wait_for(|s| *s).await;
                svc.start_draining();
            }
        };
        let surface = if admin_listener.is_some() {
            Surface::Public
        } else {
            Surface::All
        };
        if let Some(l) = admin_listener {
            let svc = services.clone();
            let mut rx = shutdown.subscribe();
            tasks.push(tokio::spawn(crate::server::serve(
                l,
                move |req, peer| crate::ingress::handle(svc.clone(), req, peer, Surface::Admin),
                async move {
                    let _ = rx.wait_for(|s| *s).await;
                },
                drain,
                || {},
                limits,
                crate::ingress::refusals(&services, Surface::Admin),
            )));
        }
        let refusals = crate::ingress::refusals(&services, surface);
        let handler = move |req, peer| crate::ingress::handle(svc.clone(), req, peer, surface);
        let server = if per_core.is_some() {
            let threads = crate::server::spawn_per_core(
                listeners,
                handler,
                drain,
                move || stream_stop.stop(),
                limits,
                refusals,
            )
            .map_err(|source| StartError::Bind {
                addr: listen,
                source,
            })?;
            tokio::spawn(threads.run_until(on_shutdown))
        } else {
            let listener = listeners.into_iter().next().expect("one listener");
            tokio::spawn(crate::server::serve(
                listener,
                handler,
                on_shutdown,
                drain,
                move || stream_stop.stop(),
                limits,
                refusals,
            ))
        };
        Ok(App {
            addr,
            admin_addr,
            services,
            shutdown,
            server,
            tasks,
            _watch: watch_guard,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound address of the `admin.listen` listener, if configured.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The gateway's services (gateway, reloader, metrics).
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// The hot-reload machinery (SIGHUP forces a rebuild through it).
    pub fn reloader(&self) -> &Arc<Reloader> {
        &self.services.reloader
    }

    /// Begins the graceful shutdown: `/ready` answers 503, the listener closes, and
    /// in-flight requests drain (see the module doc).
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Waits until the server has stopped (after [`App::shutdown`]), then stops the
    /// background tasks and the policy watch.
    pub async fn wait(self) {
        let App {
            server,
            tasks,
            _watch,
            services,
            ..
        } = self;
        let _ = server.await;
        for t in tasks {
            t.abort();
        }
        drop(_watch);
        // The spans of the last requests go out (at most 5 s more).
        let tracer = services.gateway.tracer.clone();
        if tracer.is_on() {
            let _ =
                tokio::task::spawn_blocking(move || tracer.shutdown(Duration::from_secs(5))).await;
        }
    }
}
