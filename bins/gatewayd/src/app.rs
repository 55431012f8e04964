//! Assembly of the running gateway from its configuration: store, authentication, HTTP router,
//! metrics listener, TLS. [`serve`] is the one entry point; the binary and the in-process tests
//! both call it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gateway_auth::TokenConfig;
use gateway_core::SystemClock;
use gateway_http::state::AssembleOptions;
use gateway_http::{CorsMode, HttpConfig};
use gateway_store::Store;
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
        if config.store == gateway_store::StoreSpec::Memory {
            tracing::warn!(
                "--dev without --store keeps everything in memory: nothing survives a restart (give --store sqlite:<file> to keep it)"
            );
        }
    }
    let tokens =
        TokenConfig { ttl_secs: config.token_ttl, ..TokenConfig::with_secret(config.jwt_secret.clone().into_bytes()) };
    if let Some(weakness) = crate::secret_weakness(&config.jwt_secret) {
        tracing::warn!("{weakness}");
    }
    let anchors: Vec<String> = config.trust_anchors.iter().map(ToString::to_string).collect();
    if anchors.is_empty() && !config.dev {
        tracing::warn!("{}", crate::NO_TRUST_ANCHOR);
    }
    tracing::info!(store = %config.store, trust_anchors = ?anchors, trust_default = config.trust_default, "starting");
    let tls = config.tls.as_ref().map(tls_server_config).transpose()?;
    let metrics = if config.metrics { Some(crate::metrics::handle()?) } else { None };

    let store = Arc::new(
        Store::open_with(&config.store, config.store_options)
            .await
            .with_context(|| format!("opening the store {}", config.store))?,
    );
    let redis = config
        .redis
        .as_ref()
        .map(|settings| {
            gateway_redis::Redis::new(gateway_redis::RedisConfig {
                prefix: settings.prefix.clone(),
                ..gateway_redis::RedisConfig::new(&settings.url)
            })
        })
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let redis_limits = redis.as_ref().map(|redis| Arc::new(gateway_redis::RedisLimits::new(redis.clone())));
    if let Some(redis) = &redis {
        // The first answer also opens the connection: it gets 2 s, not the 50 ms budget of an
        // operation, so that a slow connect at start-up is not taken for an outage.
        match redis.warm_up(Duration::from_secs(2)).await {
            Ok(()) => tracing::info!(redis = %redis.url(), "sharing limits, challenges and nonces through Redis"),
            Err(err) => tracing::warn!(
                redis = %redis.url(),
                "{err}: starting anyway; logins answer 503 and limits are counted per replica until it answers"
            ),
        }
    }
    let nonces = shared_nonces(&store, redis.as_ref()).await;
    let cors =
        if config.dev { CorsMode::Development } else { CorsMode::Production { origin: config.cors_origin.clone() } };
    let options = AssembleOptions {
        token: tokens,
        challenge_ttl_secs: config.challenge_ttl,
        open_enrollment: config.open_enrollment,
        trust_anchors: config.trust_anchors.clone(),
        trust_default: config.trust_default,
        trusted_proxies: config.trusted_proxies.clone(),
        http: HttpConfig {
            cors,
            tls: config.tls.is_some(),
            version: env!("CARGO_PKG_VERSION"),
            metrics: config.metrics,
            quarantine: config.quarantine,
            ..HttpConfig::default()
        },
        clock: Arc::new(SystemClock),
        limiter_clock: Arc::new(gateway_limits::SystemClock::new()),
        membership_ttl: Duration::from_secs(1),
        receipt_keys: Arc::new(
            crate::keys::KeystoreKeys::load(
                config.keystore.clone(),
                config.keystore_passphrase.clone(),
                config.allow_unsigned_receipts,
            )
            .await?,
        ),
        cluster: redis.as_ref().zip(redis_limits.clone()).map(|(redis, limits)| gateway_http::Cluster {
            limits,
            challenges: Arc::new(gateway_redis::RedisChallengeStore::new(redis.clone())),
            velocity_fallback: config.redis.as_ref().map(|r| r.velocity_fallback).unwrap_or_default(),
        }),
        nonces,
        log: gateway_domain::log::LogConfig {
            origin: config.log_origin.clone(),
            witnesses: config.witnesses.clone(),
            quorum: config.witness_quorum,
            ..Default::default()
        },
    };
    let state = gateway_http::state::assemble(store.clone(), options).await?;
    // Every task this gateway starts lives in `background` and stops when `serve` returns, so a
    // process may serve, stop and serve again (the tests restart gateways in-process).
    let mut background = tokio::task::JoinSet::new();
    let trust_changes = store.postgres_pool().is_some().then(|| store.trust_changes());
    tasks::spawn_background(&mut background, &state, trust_changes, config.builtin_executor);
    // The coops' logs: each commit's events are in a signed checkpoint within a second.
    let log = if config.witnesses.is_empty() {
        state.log.clone()
    } else {
        state.log.clone().with_witnesses(Arc::new(crate::coop_log::HttpWitnesses::new()?))
    };
    // `ICN_GATEWAY_LOG_CHECKPOINTER=false` pauses it, for `cargo xtask bench --scenario log` to
    // measure what it costs the payments (the log then falls behind, and catches up on the next
    // start); it is not a setting.
    if std::env::var("ICN_GATEWAY_LOG_CHECKPOINTER").as_deref() == Ok("false") {
        tracing::warn!("the coops' log checkpointer is paused (ICN_GATEWAY_LOG_CHECKPOINTER=false)");
    } else {
        background.spawn(log.run(store.clone()));
    }
    // Before the metrics are served: the first scrape already has every currency's sum.
    tasks::start_balance_gauge(
        &mut background,
        state.ledger.clone(),
        gateway_domain::ports::EventFeed::subscribe(store.as_ref()),
    )
    .await;
    // icn_network_connections_active: the database connections open now, plus Redis while it
    // answers (INTERFACE.md §10: the partition and isolation alerts mean "lost its backends").
    {
        let (store, redis) = (store.clone(), redis.clone());
        background.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            loop {
                tick.tick().await;
                let redis = redis.as_ref().map_or(0, |r| usize::from(r.is_up()));
                metrics::gauge!("icn_network_connections_active").set((store.backend_connections() + redis) as f64);
            }
        });
    }
    if let Some(redis) = redis {
        background.spawn(redis.watch());
    }
    if let Some(limits) = redis_limits {
        background.spawn(tasks::seed_velocity(limits, state.ledger.clone(), state.clock.clone()));
    }
    let ws = gateway_ws::WsState::new(
        gateway_ws::WsDeps {
            events: store.clone(),
            feed: store.clone(),
            tokens: state.auth.tokens().clone(),
            membership: store.clone(),
            open_enrollment: config.open_enrollment,
            clock: state.clock.clone(),
            misbehavior: Some(state.misbehavior.clone()),
        },
        gateway_ws::WsConfig::default(),
    );
    background.spawn(gateway_ws::run_pruning(store.clone(), state.clock.clone(), gateway_ws::Retention::default()));
    let sockets = ws.shutdown_handle();
    let misbehavior = state.misbehavior.clone();
    let app = gateway_http::router_with(state, gateway_ws::router(ws), gateway_ws::openapi());
    // On SIGTERM/SIGINT: every socket gets Shutdown{reason, reconnect_after_ms} and a close
    // frame first (axum does not track upgraded sockets), then HTTP drains.
    let shutdown = async move {
        shutdown.await;
        // A stop, which may or may not be followed by a start: the client is told to try again
        // in 5 s (another replica, or this one back), and backfills what it missed.
        let open = sockets.active_connections();
        let left = sockets.shutdown("the gateway is stopping", Some(5_000), DRAIN_DEADLINE).await;
        tracing::info!(closed = open.saturating_sub(left), still_open = left, "WebSocket connections closed");
    };

    tracing::info!("metrics on http://{}/metrics", listeners.metrics.local_addr()?);
    // The gauge of quarantined addresses is computed at each scrape, so it falls the moment a
    // quarantine expires.
    let before_scrape = move || {
        misbehavior.export_quarantined_now();
    };
    background.spawn(crate::metrics::serve(listeners.metrics, metrics, before_scrape));

    let listener = listeners.api;
    let addr = listener.local_addr()?;
    // One accept loop and one router for both transports: TLS only adds the handshake.
    let proxies = config.trusted_proxies.clone();
    let limits = gateway_http::serve::EdgeLimits {
        exempt: Arc::new(move |ip| proxies.iter().any(|net| net.contains(&ip))),
        drain: DRAIN_DEADLINE,
        ..gateway_http::serve::EdgeLimits::default()
    };
    match tls {
        None => {
            tracing::info!("listening on http://{addr}");
            tracing::info!("API documentation on http://{addr}/swagger-ui/ (OpenAPI at /api-docs/openapi.json)");
            gateway_http::serve::serve(listener, app, limits, shutdown).await?;
        }
        Some(server) => {
            tracing::info!("listening on https://{addr} (TLS 1.3)");
            tracing::info!("API documentation on https://{addr}/swagger-ui/ (OpenAPI at /api-docs/openapi.json)");
            gateway_http::serve::serve_tls(listener, app, Arc::new(server), limits, shutdown).await?;
        }
    }
    background.shutdown().await;
    Ok(())
}

/// `config check --connect`: what start-up does with the outside world, without serving. Opens
/// the store (applying its migrations, as start-up would), pings Redis within 2 s, and unlocks
/// the keystore (honouring `--allow-unsigned-receipts`); the first failure is the error.
pub async fn connect_check(config: &GatewayConfig) -> anyhow::Result<()> {
    Store::open_with(&config.store, config.store_options)
        .await
        .with_context(|| format!("opening the store {}", config.store))?;
    println!("store: {} opens", config.store);
    if let Some(settings) = &config.redis {
        let redis = gateway_redis::Redis::new(gateway_redis::RedisConfig {
            prefix: settings.prefix.clone(),
            ..gateway_redis::RedisConfig::new(&settings.url)
        })
        .map_err(anyhow::Error::msg)?;
        redis
            .warm_up(Duration::from_secs(2))
            .await
            .map_err(|err| anyhow::anyhow!("Redis {} does not answer: {err}", redis.url()))?;
        println!("redis: {} answers", redis.url());
    }
    if config.keystore.is_some() {
        let keys = crate::keys::KeystoreKeys::load(
            config.keystore.clone(),
            config.keystore_passphrase.clone(),
            config.allow_unsigned_receipts,
        )
        .await?;
        let state = if gateway_domain::governance::ReceiptKeys::available(&keys) { "unlocks" } else { "stays locked" };
        println!("keystore: {state}");
    }
    Ok(())
}

/// Where request-signature nonces are remembered so that every replica sees them (INTERFACE.md §11):
/// Redis when configured, else the shared PostgreSQL database; `None` on SQLite or in memory,
/// where the one gateway keeps them in its memory (from its start: `gateway_http::state`).
///
/// With Redis, the epoch marker is set now if Redis has none, and the gateway waits for that
/// second to begin before it serves, so a token it issues is never older than Redis's memory of
/// nonces. Redis unreachable: the marker is set by the first check that reaches it.
async fn shared_nonces(
    store: &Store,
    redis: Option<&gateway_redis::Redis>,
) -> Option<Arc<dyn gateway_auth::NonceStore>> {
    if let Some(redis) = redis {
        let nonces = gateway_redis::RedisNonceStore::new(redis.clone());
        let now_millis = gateway_core::Clock::now_unix_millis(&SystemClock);
        match nonces.begin(now_millis).await {
            Ok(epoch) => {
                let wait = (epoch * 1000).saturating_sub(now_millis).min(1000);
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            Err(err) => tracing::warn!("request nonces: {err}; the marker is set once Redis answers"),
        }
        return Some(Arc::new(nonces));
    }
    store.shared_nonces().map(|shared| {
        tracing::info!("request-signature nonces are shared through PostgreSQL (no --redis)");
        Arc::new(crate::nonces::DatabaseNonces::new(shared)) as Arc<dyn gateway_auth::NonceStore>
    })
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
    // HTTP/1.1 only: the one accept loop (and its deadlines) speaks HTTP/1.1 over TLS as over TCP.
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(server)
}
