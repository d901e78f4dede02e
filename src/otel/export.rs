//! The exporter: settings from config or the `OTEL_*` variables, the SDK's batch
//! span processor behind a counted bound, and OTLP/HTTP sent through hyper.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, Span, SpanData,
    SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;

use crate::config::telemetry::{self, OtlpConfig, TelemetryConfig};

/// The request path's handle on trace export: off (the default), or a tracer
/// whose spans go to the collector. Cheap to clone.
#[derive(Clone, Default)]
pub struct Tracer(pub(super) Option<Arc<Live>>);

pub(super) struct Live {
    pub(super) tracer: SdkTracer,
    provider: SdkTracerProvider,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Tracer(on)"
        } else {
            "Tracer(off)"
        })
    }
}

impl Tracer {
    /// The tracer for `cfg`, or for the standard variables read through `env`
    /// when `cfg` has no `otlp` block: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the
    /// traces URL as is), else `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL, to which
    /// `/v1/traces` is appended); `OTEL_SERVICE_NAME` names the service when the
    /// block does not. Off when neither is set. Call within a tokio runtime: exports
    /// run on it.
    ///
    /// # Errors
    /// A variable that is not an `http://` or `https://` URL, named in the message.
    pub fn start(
        cfg: &TelemetryConfig,
        env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
    ) -> Result<Tracer, String> {
        let otlp = match &cfg.otlp {
            Some(o) => o.clone(),
            None => {
                let (var, url) = match (
                    env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
                    env("OTEL_EXPORTER_OTLP_ENDPOINT"),
                ) {
                    (Some(u), _) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", u),
                    (None, Some(u)) => ("OTEL_EXPORTER_OTLP_ENDPOINT", telemetry::traces_url(&u)),
                    (None, None) => return Ok(Tracer::default()),
                };
                if let Some(problem) = telemetry::url_problem(&url) {
                    return Err(format!("{var}: {problem}"));
                }
                OtlpConfig {
                    traces_url: url,
                    service_name: None,
                    sample_ratio: 1.0,
                    timeout_ms: telemetry::DEFAULT_TIMEOUT_MS,
                    max_queue: telemetry::DEFAULT_MAX_QUEUE,
                    headers: Vec::new(),
                }
            }
        };
        let service = otlp
            .service_name
            .clone()
            .or_else(|| env("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| telemetry::DEFAULT_SERVICE_NAME.to_string());
        let timeout = Duration::from_millis(otlp.timeout_ms);
        let client = HyperExport::new(timeout, otlp.headers.clone())?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(otlp.traces_url.clone())
            .with_timeout(timeout)
            .build()
            .map_err(|e| format!("telemetry.otlp: {e}"))?;
        let pending = Arc::new(AtomicUsize::new(0));
        let batch = BatchSpanProcessor::builder(Counted {
            inner: exporter,
            pending: pending.clone(),
        })
        .with_batch_config(
            BatchConfigBuilder::default()
                // One more than our own bound: the SDK's queue never fills first,
                // so every drop is ours, and counted.
                .with_max_queue_size(otlp.max_queue + 1)
                .with_max_export_batch_size(otlp.max_queue.min(512))
                .with_scheduled_delay(Duration::from_millis(500))
                .build(),
        )
        .build();
        let processor = Bounded {
            inner: batch,
            pending,
            max: otlp.max_queue,
        };
        let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(otlp.sample_ratio)));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(sampler)
            .with_resource(
                Resource::builder()
                    .with_service_name(service.clone())
                    .with_attribute(opentelemetry::KeyValue::new(
                        "service.version",
                        crate::telemetry::VERSION,
                    ))
                    .build(),
            )
            .build();
        let tracer = provider.tracer("switchyard");
        tracing::info!(
            endpoint = %otlp.traces_url,
            service = %service,
            sample_ratio = otlp.sample_ratio,
            "exporting traces over OTLP/HTTP"
        );
        Ok(Tracer(Some(Arc::new(Live { tracer, provider }))))
    }

    /// Whether spans are recorded and exported.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Exports what is queued and stops, waiting at most `wait` (shutdown). It
    /// blocks: call it off the runtime's worker threads (`spawn_blocking`), as the
    /// exports it waits for run on the runtime.
    pub fn shutdown(&self, wait: Duration) {
        if let Some(live) = &self.0 {
            if let Err(e) = live.provider.shutdown_with_timeout(wait) {
                tracing::warn!(error = %e, "trace export did not finish at shutdown");
            }
        }
    }
}

/// The span processor: the SDK's batch processor, refusing (and counting) spans
/// once `max` are waiting for export.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    /// Spans handed to `inner` and not yet taken by an export.
    pending: Arc<AtomicUsize>,
    max: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let admitted = self
            .pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            self.inner.on_end(span);
        } else {
            metrics::counter!(crate::telemetry::OTEL_SPANS_DROPPED).increment(1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, releasing the spans of each batch it takes from the bound.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    pending: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        self.pending.fetch_sub(batch.len(), Ordering::AcqRel);
        self.inner.export(batch)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

type ExportClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// OTLP/HTTP through hyper (already in the tree, unlike reqwest). The SDK's
/// export thread is no tokio thread, so each request runs on the gateway's
/// runtime and the export thread waits for its result, at most `timeout`.
#[derive(Debug, Clone)]
struct HyperExport {
    client: ExportClient,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    /// `telemetry.otlp.headers`, set on every export (over the SDK's own headers
    /// from `OTEL_EXPORTER_OTLP_HEADERS` for the same name).
    headers: Arc<[(http::HeaderName, http::HeaderValue)]>,
}

/// The largest collector answer read, in bytes (an OTLP answer is a few bytes).
const MAX_ANSWER: usize = 64 * 1024;

impl HyperExport {
    fn new(
        timeout: Duration,
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
    ) -> Result<HyperExport, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "telemetry.otlp: trace export needs a tokio runtime".to_string())?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build(https);
        Ok(HyperExport {
            client,
            runtime,
            timeout,
            headers: headers.into(),
        })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for HyperExport {
    async fn send_bytes(
        &self,
        mut request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        for (name, value) in self.headers.iter() {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        let client = self.client.clone();
        let timeout = self.timeout;
        let task = self.runtime.spawn(async move {
            let exchange = async {
                let resp = client.request(request.map(Full::new)).await?;
                let (parts, body) = resp.into_parts();
                let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
                Ok::<_, opentelemetry_http::HttpError>(http::Response::from_parts(parts, body))
            };
            match tokio::time::timeout(timeout, exchange).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer from the collector within {timeout:?}").into()),
            }
        });
        task.await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(
        vars: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Option<String> + Send + Sync {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[tokio::test]
    async fn the_otel_variables_turn_tracing_on_and_bad_ones_are_named() {
        let off = TelemetryConfig::default();
        assert!(!Tracer::start(&off, &env(&[])).unwrap().is_on());
        let on = Tracer::start(
            &off,
            &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")]),
        );
        assert!(on.unwrap().is_on());
        let e = Tracer::start(
            &off,
            &env(&[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "localhost:4318"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
            ]),
        )
        .unwrap_err();
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:"), "{e}");
        let e = Tracer::start(&off, &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "nope")])).unwrap_err();
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT:"), "{e}");
    }
}
