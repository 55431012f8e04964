//! Assembly of the running gateway from its configuration: store, authentication, HTTP router,
//! metrics listener, TLS. [`serve`] is the one entry point; the binary and the in-process tests
//! both call it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::routing::get;
use gateway_auth::TokenConfig;
use gateway_core::SystemClock;
use gateway_http::state::AssembleOptions;
use gateway_http::{CorsMode, HttpConfig};
use gateway_store::Store;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

use crate::config::{GatewayConfig, TlsFiles};
use crate::tasks;

/// How long in-flight requests may take to finish after a shutdown signal.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// The two listening sockets, bound before [`serve`] so that a caller can bind port 0 and learn
/// the addresses.
#[derive(Debug)]
pub struct Listeners {
    /// The API (HTTP and WebSocket).
    pub api: TcpListener,
    /// Prometheus `/metrics`.
    pub metrics: TcpListener,
}

impl Listeners {
    /// Binds the configured addresses.
    pub async fn bind(config: &GatewayConfig) -> anyhow::Result<Self> {
        let api = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("binding the API listener {}", config.listen))?;
        let metrics = TcpListener::bind(config.metrics_listen)
            .await
            .with_context(|| format!("binding the metrics listener {}", config.metrics_listen))?;
        Ok(Self { api, metrics })
    }
}

/// The process's one Prometheus recorder: the `metrics` facade has a single global recorder, so
/// every gateway served in this process (tests serve several) reports through it.
fn metrics_handle() -> anyhow::Result<PrometheusHandle> {
    static HANDLE: std::sync::Mutex<Option<PrometheusHandle>> = std::sync::Mutex::new(None);
    let mut installed = HANDLE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(handle) = installed.as_ref() {
        return Ok(handle.clone());
    }
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    // Remembered only once installed: a failed install (another recorder is already global)
    // fails every `serve`, rather than handing later ones a handle nothing records into.
    metrics::set_global_recorder(recorder).context("installing the metrics recorder")?;
    gateway_ws::metrics::describe_metrics();
    *installed = Some(handle.clone());
    Ok(handle)
}

/// Serves the gateway on `listeners` until `shutdown` resolves: opens the store, assembles the
/// state, starts the background tasks, the metrics listener and the API (TLS when configured),
/// then drains.
pub async fn serve(
    config: GatewayConfig,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if config.dev {
        tracing::warn!(
            "DEVELOPMENT PROFILE: open enrollment grants any scopes for any cooperative, every DID has trust {}, CORS is permissive. Never use --dev in production.",
            config.trust_default
        );
    }
    let tokens =
        TokenConfig { ttl_secs: config.token_ttl, ..TokenConfig::with_secret(config.jwt_secret.clone().into_bytes()) };
    if tokens.secret_is_short() {
        tracing::warn!(
            "the JWT secret is shorter than {} bytes; use a longer random secret",
            gateway_auth::token::RECOMMENDED_SECRET_LEN
        );
    }
    let tls = config.tls.as_ref().map(tls_server_config).transpose()?;
    let metrics = metrics_handle()?;

    let store =
        Arc::new(Store::open(&config.store).await.with_context(|| format!("opening the store {}", config.store))?);
    let cors =
        if config.dev { CorsMode::Development } else { CorsMode::Production { origin: config.cors_origin.clone() } };
    let options = AssembleOptions {
        token: tokens,
        challenge_ttl_secs: config.challenge_ttl,
        open_enrollment: config.open_enrollment,
        trust_anchors: config.trust_anchors.clone(),
        trust_default: config.trust_default,
        trusted_proxies: config.trusted_proxies.clone(),
        http: HttpConfig { cors, tls: config.tls.is_some(), version: env!("CARGO_PKG_VERSION") },
        clock: Arc::new(SystemClock),
        limiter_clock: Arc::new(gateway_limits::SystemClock::new()),
        membership_ttl: Duration::from_secs(1),
        receipt_keys: Arc::new(
            crate::keys::KeystoreKeys::load(config.keystore.clone(), config.keystore_passphrase.clone()).await,
        ),
    };
    let state = gateway_http::state::assemble(store.clone(), options).await?;
    // Every task this gateway starts lives in `background` and stops when `serve` returns, so a
    // process may serve, stop and serve again (the tests restart gateways in-process).
    let mut background = tokio::task::JoinSet::new();
    let trust_changes = store.postgres_pool().is_some().then(|| store.trust_changes());
    tasks::spawn_background(&mut background, &state, trust_changes, config.builtin_executor);
    let ws = gateway_ws::WsState::new(
        gateway_ws::WsDeps {
            events: store.clone(),
            feed: store.clone(),
            tokens: state.auth.tokens().clone(),
            membership: store.clone(),
            open_enrollment: config.open_enrollment,
            clock: state.clock.clone(),
        },
        gateway_ws::WsConfig::default(),
    );
    background.spawn(gateway_ws::run_pruning(store.clone(), state.clock.clone(), gateway_ws::Retention::default()));
    let sockets = ws.shutdown_handle();
    let app = gateway_http::router_with(state, gateway_ws::router(ws), gateway_ws::openapi());
    // On SIGTERM/SIGINT: every socket gets Shutdown{reason, reconnect_after_ms} and a close
    // frame first (axum does not track upgraded sockets), then HTTP drains.
    let shutdown = async move {
        shutdown.await;
        let closed = sockets.shutdown("the gateway is restarting", Some(5_000), DRAIN_DEADLINE).await;
        tracing::info!(closed, "WebSocket connections closed");
    };

    tracing::info!("metrics on http://{}/metrics", listeners.metrics.local_addr()?);
    background.spawn(serve_metrics(listeners.metrics, metrics));

    let listener = listeners.api;
    let addr = listener.local_addr()?;
    match tls {
        None => {
            tracing::info!("listening on http://{addr}");
            gateway_http::serve(listener, app, shutdown).await?;
        }
        Some(server) => {
            tracing::info!("listening on https://{addr} (TLS 1.3)");
            serve_tls(listener, app, server, shutdown).await?;
        }
    }
    background.shutdown().await;
    Ok(())
}

async fn serve_metrics(listener: TcpListener, handle: PrometheusHandle) {
    let upkeep = handle.clone();
    let upkeep = async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    };
    let app = Router::new().route("/metrics", get(move || std::future::ready(handle.render())));
    tokio::select! {
        served = axum::serve(listener, app) => {
            if let Err(err) = served {
                tracing::error!("metrics listener failed: {err}");
            }
        }
        () = upkeep => {}
    }
}

/// The TLS 1.3-only server configuration (rustls with the ring provider) from the PEM files;
/// `config check` builds it too, so a bad file is found before start-up.
pub fn tls_server_config(files: &TlsFiles) -> anyhow::Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let certs = CertificateDer::pem_file_iter(&files.cert)
        .with_context(|| format!("reading {}", files.cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", files.cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&files.key).with_context(|| format!("reading {}", files.key.display()))?;
    let mut server = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("building the TLS configuration")?;
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(server)
}

/// Serves over TLS 1.3 only, draining on shutdown.
async fn serve_tls(
    listener: TcpListener,
    app: Router,
    server: rustls::ServerConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(server));

    let handle = axum_server::Handle::new();
    let drain = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        drain.graceful_shutdown(Some(DRAIN_DEADLINE));
    });
    axum_server::from_tcp_rustls(listener.into_std()?, tls)
        .handle(handle)
        .serve(app.into_make_service_with_connect_info::<SocketAddr>())
        .await?;
    Ok(())
}
