//! The operator interface: flags, `ICN_GATEWAY_*` variables and an optional TOML file, merged
//! into one validated [`GatewayConfig`].
//!
//! Precedence, highest first: flag, environment variable, config file, `--dev` profile default,
//! built-in default. This module reads files and the environment but starts nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use axum::http::HeaderValue;
use clap::{Args, Parser, Subcommand};
use gateway_core::Did;
use gateway_store::StoreSpec;
use serde::Deserialize;

/// Command line of `gatewayd`.
#[derive(Debug, Parser)]
#[command(
    name = "gatewayd",
    version,
    about = "The cooperative gateway: DID login, mutual credit, governance, compute and events over HTTP and WebSocket."
)]
pub struct Cli {
    /// What to do; serving is the default.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Server settings (also accepted before a subcommand).
    #[command(flatten)]
    pub settings: Settings,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the API (the default).
    Serve,
    /// Write a commented gateway.toml (a random JWT secret, mode 0600) and, when a keystore
    /// passphrase is given (--passphrase-file, the icn-passphrase credential, ICN_PASSPHRASE), a
    /// keystore; name the founder's DID as trust anchor so that the founder can
    /// govern and compute from the start.
    Init {
        /// Where to write gateway.toml (and keystore.json, gateway.db later).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The founder's DID (`gatewayctl key show` prints it): the first trust anchor.
        #[arg(long)]
        founder: Option<String>,
        /// Overwrite an existing gateway.toml.
        #[arg(long)]
        force: bool,
    },
    /// Validate the configuration and print it (secrets redacted).
    Config {
        /// What to do with the configuration.
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// Manage the governance signing keystore.
    Keystore {
        /// What to do with the keystore.
        #[command(subcommand)]
        action: KeystoreAction,
    },
    /// Check the coops' logs (INTERFACE.md §12).
    Log {
        /// What to do with the logs.
        #[command(subcommand)]
        action: LogAction,
    },
    /// Run a C2SP tlog-witness that cosigns other gateways' coop logs (`gatewayd witness --key
    /// <file> --state <file> --name <name> --log <origin>=<vkey> …`), or print its verifier key
    /// (`gatewayd witness vkey`).
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Witness {
        /// `vkey`: print the witness's cosigner vkey.
        #[command(subcommand)]
        action: Option<WitnessAction>,
        /// Serve the witness.
        #[command(flatten)]
        serve: Option<crate::witness::WitnessArgs>,
    },
}

/// `gatewayd log …`.
#[derive(Debug, Subcommand)]
pub enum LogAction {
    /// Check every coop's log (or one) against its latest signed checkpoint: each stored entry
    /// hashes to its leaf and the stored hashes give the signed root. Exits non-zero on any
    /// problem, naming it.
    Fsck {
        /// Only this coop.
        #[arg(long)]
        coop: Option<String>,
    },
}

/// `gatewayd witness …`.
#[derive(Debug, Subcommand)]
pub enum WitnessAction {
    /// Print the witness's cosigner verifier key (creating its key file if missing).
    Vkey(crate::witness::WitnessVkeyArgs),
}

/// `gatewayd keystore …`.
#[derive(Debug, Subcommand)]
pub enum KeystoreAction {
    /// Create a new keystore at --keystore holding a new receipt master secret, encrypted with the
    /// passphrase (--passphrase-file, the icn-passphrase credential, or ICN_PASSPHRASE).
    Init,
    /// Retire the keystore's current master secret (kept, encrypted) and add a new one; restart
    /// the gateway to sign with it. Unlocked with the same passphrase sources as Init.
    Rotate,
}

/// `gatewayd config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigAction {
    /// Resolve and validate the configuration without starting.
    Check {
        /// Also do what start-up does with the outside world: open the store (applying its
        /// migrations), ping Redis, unlock the keystore. Without it the check reads only the
        /// configuration and the files it names.
        #[arg(long)]
        connect: bool,
    },
}

impl Settings {
    /// These settings (read from a configuration file) with every relative path in them resolved
    /// against `dir`, the file's directory: the database of a `sqlite:` store, the keystore, the
    /// passphrase file and the TLS files.
    fn anchored(mut self, dir: Option<&Path>) -> Self {
        let Some(dir) = dir else { return self };
        let anchor = |path: &mut Option<PathBuf>| {
            if let Some(p) = path.as_mut()
                && p.is_relative()
            {
                *p = dir.join(&*p);
            }
        };
        anchor(&mut self.keystore);
        anchor(&mut self.passphrase_file);
        anchor(&mut self.tls_cert);
        anchor(&mut self.tls_key);
        if let Some(store) = &mut self.store
            && let Some(path) = store.strip_prefix("sqlite:").map(|p| p.strip_prefix("//").unwrap_or(p))
            && !path.is_empty()
            && path != ":memory:"
            && Path::new(path).is_relative()
        {
            *store = format!("sqlite:{}", dir.join(path).display());
        }
        self
    }
}

/// Every setting, declared once: each field is a flag, an `ICN_GATEWAY_<NAME>` variable and a
/// key of the optional TOML file (the flag's name with `_` for `-`; the repeatable flags take
/// their flag's singular name or the plural as a list). The interface's nested spellings
/// (`[auth] open_enrollment`, `[trust] anchors`, `[trust] default_score`) work in the file too.
#[derive(Debug, Args, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Optional TOML configuration file.
    #[arg(long, env = "ICN_GATEWAY_CONFIG", global = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// API listen address [default: 127.0.0.1:8080].
    #[arg(long, env = "ICN_GATEWAY_LISTEN", global = true)]
    pub listen: Option<SocketAddr>,
    /// Metrics listen address [default: 127.0.0.1:9100].
    #[arg(long, env = "ICN_GATEWAY_METRICS_LISTEN", global = true)]
    pub metrics_listen: Option<SocketAddr>,
    /// Store: memory, sqlite:<path> or postgres://… [default: sqlite:gateway.db].
    #[arg(long, env = "ICN_GATEWAY_STORE", global = true)]
    pub store: Option<String>,
    /// The most PostgreSQL connections this replica opens, the event listener's included
    /// [default: 16; at least 2]; replicas × (this + 1) must fit in the server's max_connections.
    #[arg(long, env = "ICN_GATEWAY_POSTGRES_MAX_CONNECTIONS", global = true)]
    pub postgres_max_connections: Option<u32>,
    /// Redis URL (redis://[user:password@]host[:port][/db]): replicas share rate limits, login
    /// challenges and request-signature nonces through it.
    #[arg(long, env = "ICN_GATEWAY_REDIS", global = true)]
    pub redis: Option<String>,
    /// Prefix of every Redis key [default: icn:gw:].
    #[arg(long, env = "ICN_GATEWAY_REDIS_PREFIX", global = true)]
    pub redis_prefix: Option<String>,
    /// What payments do while Redis is unreachable: deny (503) or local (count on this replica)
    /// [default: deny].
    #[arg(long, env = "ICN_GATEWAY_REDIS_VELOCITY_FALLBACK", global = true)]
    pub redis_velocity_fallback: Option<VelocityFallbackArg>,
    /// HMAC secret of the tokens (at least 32 bytes recommended).
    #[arg(long, env = "ICN_GATEWAY_JWT_SECRET", global = true, hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// Token lifetime in seconds [default: 3600].
    #[arg(long, env = "ICN_GATEWAY_TOKEN_TTL", global = true)]
    pub token_ttl: Option<u64>,
    /// Challenge lifetime in seconds [default: 300].
    #[arg(long, env = "ICN_GATEWAY_CHALLENGE_TTL", global = true)]
    pub challenge_ttl: Option<u64>,
    /// A trust anchor DID (repeatable; the variable takes a comma-separated list).
    #[arg(long = "trust-anchor", env = "ICN_GATEWAY_TRUST_ANCHOR", value_delimiter = ',', global = true)]
    #[serde(default, rename = "trust_anchor", alias = "trust_anchors")]
    pub trust_anchors: Vec<String>,
    /// Trust score of DIDs with no path from an anchor [default: 0.0; --dev: 0.9].
    #[arg(long, env = "ICN_GATEWAY_TRUST_DEFAULT", global = true)]
    pub trust_default: Option<f64>,
    /// A proxy (IP or CIDR) whose X-Forwarded-For is believed (repeatable).
    #[arg(long = "trusted-proxy", env = "ICN_GATEWAY_TRUSTED_PROXY", value_delimiter = ',', global = true)]
    #[serde(default, rename = "trusted_proxy", alias = "trusted_proxies")]
    pub trusted_proxies: Vec<String>,
    /// Keystore file holding the receipt master secrets (unlocked with the passphrase of
    /// --passphrase-file, the systemd credential icn-passphrase, or ICN_PASSPHRASE).
    #[arg(long, env = "ICN_GATEWAY_KEYSTORE", global = true)]
    pub keystore: Option<PathBuf>,
    /// A file holding the keystore passphrase (one trailing newline is ignored). Wins over the
    /// systemd credential icn-passphrase and over ICN_PASSPHRASE, which stays readable in
    /// /proc/<pid>/environ.
    #[arg(long, env = "ICN_GATEWAY_PASSPHRASE_FILE", global = true)]
    pub passphrase_file: Option<PathBuf>,
    /// Serve even when the configured keystore cannot be unlocked (no passphrase, or a wrong
    /// one): proposals then close without signed receipts. Without it, start-up refuses
    /// [default: false].
    #[arg(long, env = "ICN_GATEWAY_ALLOW_UNSIGNED_RECEIPTS", global = true)]
    pub allow_unsigned_receipts: Option<bool>,
    /// TLS certificate chain (PEM); with --tls-key, serves TLS 1.3 only.
    #[arg(long, env = "ICN_GATEWAY_TLS_CERT", global = true)]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, env = "ICN_GATEWAY_TLS_KEY", global = true)]
    pub tls_key: Option<PathBuf>,
    /// The one origin allowed cross-origin access in production mode.
    #[arg(long, env = "ICN_GATEWAY_CORS_ORIGIN", global = true)]
    pub cors_origin: Option<String>,
    /// The coops' logs' origin prefix, a schema-less name such as `gw.example.coop`: a coop's
    /// log is `<log-origin>/coops/<coop_id>` [default: localhost].
    #[arg(long, env = "ICN_GATEWAY_LOG_ORIGIN", global = true)]
    pub log_origin: Option<String>,
    /// A witness each new checkpoint of a coop's log is sent to, `<name>=<vkey>@<url>`
    /// (repeatable; C2SP tlog-witness).
    #[arg(long = "witness", env = "ICN_GATEWAY_WITNESS", global = true)]
    #[serde(default, rename = "witness", alias = "witnesses")]
    pub witnesses: Vec<String>,
    /// How many witnesses must have cosigned a checkpoint before `log/proof?wait=true` answers
    /// [default: 0].
    #[arg(long, env = "ICN_GATEWAY_WITNESS_QUORUM", global = true)]
    pub witness_quorum: Option<usize>,
    /// Grant any requested scopes for any cooperative (development only).
    #[arg(long, env = "ICN_GATEWAY_OPEN_ENROLLMENT", global = true)]
    pub open_enrollment: Option<bool>,
    /// Run CCL tasks with the built-in interpreter [default: true].
    #[arg(long, env = "ICN_GATEWAY_BUILTIN_EXECUTOR", global = true)]
    pub builtin_executor: Option<bool>,
    /// Log lines as text (default) or JSON objects, one a line.
    #[arg(long, env = "ICN_GATEWAY_LOG_FORMAT", global = true)]
    pub log_format: Option<LogFormat>,
    /// Record and serve metrics [default: true]; false records nothing (the metrics listener
    /// still answers, with no families).
    #[arg(long, env = "ICN_GATEWAY_METRICS", global = true)]
    pub metrics: Option<bool>,
    /// Protocol violations by one address within the quarantine window that quarantine it
    /// [default: 50].
    #[arg(long, env = "ICN_GATEWAY_QUARANTINE_VIOLATIONS", global = true)]
    pub quarantine_violations: Option<u32>,
    /// The window violations are counted in, seconds [default: 300].
    #[arg(long, env = "ICN_GATEWAY_QUARANTINE_WINDOW", global = true)]
    pub quarantine_window: Option<u64>,
    /// How long a quarantine lasts, seconds [default: 900].
    #[arg(long, env = "ICN_GATEWAY_QUARANTINE_SECS", global = true)]
    pub quarantine_secs: Option<u64>,
    /// Worker threads serving requests [default: one per core this process may use].
    #[arg(long, env = "ICN_GATEWAY_WORKERS", global = true)]
    pub workers: Option<usize>,
    /// Run worker i on the i-th core this process may use only [default: false]: for a host or
    /// cpuset of the gateway's own (docs/DEPLOYMENT.md).
    #[arg(long, env = "ICN_GATEWAY_PIN_WORKERS", global = true)]
    pub pin_workers: Option<bool>,
    /// The scheduler slice the workers ask Linux (6.12+) for, microseconds, 100 to 100000; 0
    /// keeps the kernel's [default: 0].
    #[arg(long, env = "ICN_GATEWAY_WORKER_SLICE_US", global = true)]
    pub worker_slice_us: Option<u64>,
    /// Local development profile: open enrollment, trust default 0.9, permissive CORS,
    /// in-memory store unless one is given. Never in production.
    #[arg(long, env = "ICN_GATEWAY_DEV", global = true)]
    #[serde(default)]
    pub dev: bool,
    /// The file's `[auth]` section.
    #[arg(skip)]
    #[serde(default)]
    pub auth: AuthSection,
    /// The file's `[trust]` section.
    #[arg(skip)]
    #[serde(default)]
    pub trust: TrustSection,
    /// Resolve for a command that serves nothing and signs nothing (`gatewayd log fsck`): no
    /// JWT secret is required and no keystore passphrase is read. Not a flag or a file key.
    #[arg(skip)]
    #[serde(skip)]
    pub offline: bool,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line.
    Json,
}

/// `--redis-velocity-fallback`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VelocityFallbackArg {
    /// Refuse payments with 503 while the shared velocity limit cannot be checked.
    Deny,
    /// Count payments on each replica's own limiter meanwhile.
    Local,
}

/// Redis, when replicas share state through it.
#[derive(Clone)]
pub struct RedisSettings {
    /// The URL (may hold a password: printed only through [`gateway_store::redact_url`]).
    pub url: String,
    /// Key prefix.
    pub prefix: String,
    /// Payments while Redis is unreachable.
    pub velocity_fallback: gateway_http::limits::VelocityFallback,
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &gateway_store::redact_url(&self.url))
            .field("prefix", &self.prefix)
            .field("velocity_fallback", &self.velocity_fallback)
            .finish()
    }
}

/// The file's `[auth]` section (the interface's spelling).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Same as `open_enrollment`.
    pub open_enrollment: Option<bool>,
}

/// The file's `[trust]` section (the interface's spelling).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustSection {
    /// Same as `trust_anchor`.
    #[serde(default)]
    pub anchors: Vec<String>,
    /// Same as `trust_default`.
    pub default_score: Option<f64>,
}

/// TLS files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain, PEM.
    pub cert: PathBuf,
    /// Private key, PEM.
    pub key: PathBuf,
}

/// The resolved configuration. Its `Debug` form is [`GatewayConfig::summary`], which never
/// holds a secret.
pub struct GatewayConfig {
    /// API address.
    pub listen: SocketAddr,
    /// Metrics address.
    pub metrics_listen: SocketAddr,
    /// Store backend.
    pub store: StoreSpec,
    /// How the store is opened.
    pub store_options: gateway_store::StoreOptions,
    /// Redis shared by the replicas, if any.
    pub redis: Option<RedisSettings>,
    /// Token secret (never printed).
    pub jwt_secret: String,
    /// Token lifetime, seconds.
    pub token_ttl: u64,
    /// Challenge lifetime, seconds.
    pub challenge_ttl: u64,
    /// Trust anchors.
    pub trust_anchors: Vec<Did>,
    /// Default trust score.
    pub trust_default: f64,
    /// Proxies whose X-Forwarded-For is believed.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Keystore path.
    pub keystore: Option<PathBuf>,
    /// The keystore's passphrase (never printed), from [`crate::keys::passphrase`].
    pub keystore_passphrase: Option<zeroize::Zeroizing<String>>,
    /// Where the passphrase came from (printed by `config check`).
    pub passphrase_source: Option<crate::keys::PassphraseSource>,
    /// Whether to serve when the configured keystore cannot be unlocked.
    pub allow_unsigned_receipts: bool,
    /// TLS files, if TLS is on.
    pub tls: Option<TlsFiles>,
    /// Allowed CORS origin in production mode.
    pub cors_origin: Option<HeaderValue>,
    /// The coops' logs' origin prefix.
    pub log_origin: String,
    /// The witnesses of the coops' logs.
    pub witnesses: Vec<gateway_domain::log::WitnessConfig>,
    /// Cosignatures a proof waits for.
    pub witness_quorum: usize,
    /// Open enrollment.
    pub open_enrollment: bool,
    /// Whether the built-in executor runs CCL tasks.
    pub builtin_executor: bool,
    /// The development profile.
    pub dev: bool,
    /// Log line format.
    pub log_format: LogFormat,
    /// Whether metrics are recorded.
    pub metrics: bool,
    /// When misbehaving addresses are quarantined.
    pub quarantine: gateway_limits::QuarantinePolicy,
    /// How the runtime's workers run.
    pub workers: crate::workers::WorkerTuning,
}

impl GatewayConfig {
    /// Merges flags/environment with the optional file and applies defaults and checks.
    pub fn resolve(settings: Settings) -> anyhow::Result<Self> {
        let file = match &settings.config {
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("reading config file {}", path.display()))?;
                toml::from_str::<Settings>(&text).with_context(|| format!("parsing config file {}", path.display()))?
            }
            None => Settings::default(),
        };
        // Relative paths in the file are the file's: resolved against its directory, so the
        // gateway finds its database and keystore whatever directory it is started from.
        let file_dir = match &settings.config {
            Some(path) => Some(
                std::path::absolute(path)
                    .with_context(|| format!("resolving {}", path.display()))?
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default(),
            ),
            None => None,
        };
        let file = file.anchored(file_dir.as_deref());
        let dev = settings.dev || file.dev;
        let default_store = || {
            if dev {
                "memory".to_owned()
            } else {
                let default = Path::new("gateway.db");
                format!(
                    "sqlite:{}",
                    file_dir.as_deref().map_or_else(|| default.to_path_buf(), |dir| dir.join(default)).display()
                )
            }
        };
        let store_text = settings.store.or(file.store).unwrap_or_else(default_store);
        // A SQLite file is named by its absolute path from here on (the start-up line shows it).
        let store = match store_text.parse::<StoreSpec>().map_err(anyhow::Error::msg)? {
            StoreSpec::SqliteFile(path) => StoreSpec::SqliteFile(
                std::path::absolute(&path)
                    .with_context(|| format!("resolving the database path {path}"))?
                    .display()
                    .to_string(),
            ),
            other => other,
        };
        let redis_url = settings.redis.or(file.redis).filter(|url| !url.is_empty());
        let velocity_fallback = match settings.redis_velocity_fallback.or(file.redis_velocity_fallback) {
            Some(VelocityFallbackArg::Local) => gateway_http::limits::VelocityFallback::Local,
            Some(VelocityFallbackArg::Deny) | None => gateway_http::limits::VelocityFallback::Deny,
        };
        let redis = match redis_url {
            Some(url) => {
                if !["redis://", "rediss://", "redis+unix://", "unix://"].iter().any(|scheme| url.starts_with(scheme)) {
                    bail!(
                        "--redis {}: not a Redis URL; use redis://[user:password@]host[:port][/db]",
                        gateway_store::redact_url(&url)
                    );
                }
                let prefix = settings
                    .redis_prefix
                    .or(file.redis_prefix)
                    .unwrap_or_else(|| gateway_redis::DEFAULT_PREFIX.to_owned());
                Some(RedisSettings { url, prefix, velocity_fallback })
            }
            None => {
                if settings.redis_prefix.is_some() || file.redis_prefix.is_some() {
                    bail!("--redis-prefix is set but --redis is not: give the Redis URL, or drop the prefix");
                }
                if settings.redis_velocity_fallback.is_some() || file.redis_velocity_fallback.is_some() {
                    bail!(
                        "--redis-velocity-fallback is set but --redis is not: give the Redis URL, or drop the fallback"
                    );
                }
                None
            }
        };
        let jwt_secret = settings.jwt_secret.or(file.jwt_secret).unwrap_or_default();
        if jwt_secret.is_empty() && !settings.offline {
            bail!(
                "the JWT secret is empty: set ICN_GATEWAY_JWT_SECRET (or --jwt-secret, or jwt_secret in the config file); the gateway refuses to start without one"
            );
        }
        let anchors_text = first_non_empty([settings.trust_anchors, file.trust_anchors, file.trust.anchors]);
        let trust_anchors = anchors_text
            .iter()
            .map(|a| Did::parse(a).map_err(|e| anyhow::anyhow!("trust anchor '{a}': {e}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let trust_default = settings
            .trust_default
            .or(file.trust_default)
            .or(file.trust.default_score)
            .unwrap_or(if dev { 0.9 } else { 0.0 });
        if !(0.0..=1.0).contains(&trust_default) {
            bail!("trust default must be between 0 and 1, got {trust_default}");
        }
        let tls = match (settings.tls_cert.or(file.tls_cert), settings.tls_key.or(file.tls_key)) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            _ => bail!("TLS needs both --tls-cert and --tls-key"),
        };
        let defaults = gateway_limits::QuarantinePolicy::default();
        let quarantine = gateway_limits::QuarantinePolicy {
            threshold: match settings.quarantine_violations.or(file.quarantine_violations) {
                Some(n) => std::num::NonZeroU32::new(n)
                    .ok_or_else(|| anyhow::anyhow!("quarantine violations must be at least 1"))?,
                None => defaults.threshold,
            },
            window: settings
                .quarantine_window
                .or(file.quarantine_window)
                .map_or(defaults.window, std::time::Duration::from_secs),
            quarantine: settings
                .quarantine_secs
                .or(file.quarantine_secs)
                .map_or(defaults.quarantine, std::time::Duration::from_secs),
        };
        if quarantine.window.is_zero() || quarantine.quarantine.is_zero() {
            bail!("the quarantine window and length must be at least one second");
        }
        let store_options = gateway_store::StoreOptions {
            postgres_max_connections: match settings.postgres_max_connections.or(file.postgres_max_connections) {
                // The event listener holds one connection for as long as it runs: requests
                // need another.
                Some(n @ (0 | 1)) => bail!(
                    "--postgres-max-connections {n}: at least 2 (the event listener holds one connection, requests need the others)"
                ),
                Some(n) => n,
                None => gateway_store::StoreOptions::default().postgres_max_connections,
            },
        };
        let workers = crate::workers::WorkerTuning {
            workers: match settings.workers.or(file.workers) {
                Some(0) => bail!("--workers must be at least 1"),
                Some(n) if n > 1024 => bail!("--workers {n}: at most 1024"),
                Some(n) => n,
                None => crate::workers::default_workers(),
            },
            pin: settings.pin_workers.or(file.pin_workers).unwrap_or(false),
            slice: micros(
                settings.worker_slice_us.or(file.worker_slice_us),
                crate::workers::MIN_SLICE..=crate::workers::MAX_SLICE,
                "--worker-slice-us",
                "between 100 and 100000 (Linux's bounds), or 0 for the kernel's",
            )?,
        };
        let passphrase_file = settings.passphrase_file.or(file.passphrase_file);
        let passphrase = if settings.offline { None } else { crate::keys::passphrase(passphrase_file.as_deref())? };
        let token_ttl = settings.token_ttl.or(file.token_ttl).unwrap_or(3600);
        let challenge_ttl = settings.challenge_ttl.or(file.challenge_ttl).unwrap_or(300);
        if token_ttl == 0 || challenge_ttl == 0 {
            bail!("token and challenge lifetimes must be at least one second");
        }
        let trusted_proxies = first_non_empty([settings.trusted_proxies, file.trusted_proxies])
            .iter()
            .map(|p| gateway_http::limits::parse_proxy(p).map_err(|e| anyhow::anyhow!("trusted proxy: {e}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let log_origin =
            settings.log_origin.or(file.log_origin).filter(|o| !o.is_empty()).unwrap_or_else(|| "localhost".to_owned());
        if !is_log_origin(&log_origin) {
            anyhow::bail!(
                "log origin '{log_origin}' is not a schema-less name such as gw.example.coop (no '://', spaces or '+')"
            );
        }
        let witnesses = first_non_empty([settings.witnesses, file.witnesses])
            .iter()
            .map(|text| text.parse::<gateway_domain::log::WitnessConfig>().map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // One witness counts once toward the quorum, however often it is listed.
        let mut names = std::collections::BTreeSet::new();
        if let Some(twice) = witnesses.iter().find(|w| !names.insert(w.name.as_str())) {
            anyhow::bail!("witness {} is listed twice", twice.name);
        }
        let witness_quorum = settings.witness_quorum.or(file.witness_quorum).unwrap_or(0);
        if witness_quorum > witnesses.len() {
            anyhow::bail!(
                "witness quorum {witness_quorum} is more than the {} witness(es) configured",
                witnesses.len()
            );
        }
        // An empty value (a template's unset variable) means no origin; `--dev` allows every
        // origin and ignores this one.
        let cors_origin = settings
            .cors_origin
            .or(file.cors_origin)
            .filter(|origin| !origin.is_empty() && !dev)
            .map(|origin| {
                HeaderValue::from_str(&origin).ok().filter(|_| is_origin(&origin)).ok_or_else(|| {
                    anyhow::anyhow!("cors origin '{origin}' is not an origin such as https://coop.example")
                })
            })
            .transpose()?;
        Ok(Self {
            listen: settings.listen.or(file.listen).unwrap_or_else(|| "127.0.0.1:8080".parse().expect("valid")),
            metrics_listen: settings
                .metrics_listen
                .or(file.metrics_listen)
                .unwrap_or_else(|| "127.0.0.1:9100".parse().expect("valid")),
            store,
            store_options,
            redis,
            jwt_secret,
            token_ttl,
            challenge_ttl,
            trust_anchors,
            trust_default,
            trusted_proxies,
            keystore: settings.keystore.or(file.keystore),
            keystore_passphrase: passphrase.as_ref().map(|(secret, _)| secret.clone()),
            passphrase_source: passphrase.map(|(_, source)| source),
            allow_unsigned_receipts: settings.allow_unsigned_receipts.or(file.allow_unsigned_receipts).unwrap_or(false),
            tls,
            cors_origin,
            log_origin,
            witnesses,
            witness_quorum,
            open_enrollment: settings
                .open_enrollment
                .or(file.open_enrollment)
                .or(file.auth.open_enrollment)
                .unwrap_or(dev),
            builtin_executor: settings.builtin_executor.or(file.builtin_executor).unwrap_or(true),
            dev,
            log_format: settings.log_format.or(file.log_format).unwrap_or_default(),
            metrics: settings.metrics.or(file.metrics).unwrap_or(true),
            quarantine,
            workers,
        })
    }

    /// A human-readable summary with secrets redacted (the JWT secret by its length, a database
    /// password as `***`), for `config check` and start-up logs.
    pub fn summary(&self) -> String {
        format!(
            "listen = {}\nmetrics_listen = {}\nstore = {}\npostgres_max_connections = {}\n{}jwt_secret = <{} bytes>\ntoken_ttl = {}\nchallenge_ttl = {}\ntrust_anchor = {:?}\ntrust_default = {}\ntrusted_proxy = {:?}\nkeystore = {:?}\npassphrase = {}\nallow_unsigned_receipts = {}\ntls = {}\ncors_origin = {:?}\nlog_origin = {}\nwitness = {:?}\nwitness_quorum = {}\nopen_enrollment = {}\nbuiltin_executor = {}\ndev = {}\nlog_format = {}\nmetrics = {}\nquarantine_violations = {}\nquarantine_window = {}\nquarantine_secs = {}\nworkers = {}\npin_workers = {}\nworker_slice_us = {}",
            self.listen,
            self.metrics_listen,
            self.store,
            self.store_options.postgres_max_connections,
            match &self.redis {
                Some(redis) => format!(
                    "redis = {}\nredis_prefix = {:?}\nredis_velocity_fallback = {}\n",
                    gateway_store::redact_url(&redis.url),
                    redis.prefix,
                    match redis.velocity_fallback {
                        gateway_http::limits::VelocityFallback::Deny => "deny",
                        gateway_http::limits::VelocityFallback::Local => "local",
                    }
                ),
                None => String::new(),
            },
            self.jwt_secret.len(),
            self.token_ttl,
            self.challenge_ttl,
            self.trust_anchors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            self.trust_default,
            self.trusted_proxies.iter().map(ToString::to_string).collect::<Vec<_>>(),
            self.keystore,
            self.passphrase_source.as_ref().map_or_else(|| "none".to_owned(), |source| format!("<from {source}>")),
            self.allow_unsigned_receipts,
            self.tls.is_some(),
            self.cors_origin.as_ref().and_then(|o| o.to_str().ok()),
            self.log_origin,
            self.witnesses.iter().map(|w| format!("{}@{}", w.name, w.url)).collect::<Vec<_>>(),
            self.witness_quorum,
            self.open_enrollment,
            self.builtin_executor,
            self.dev,
            match self.log_format {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            },
            self.metrics,
            self.quarantine.threshold,
            self.quarantine.window.as_secs(),
            self.quarantine.quarantine.as_secs(),
            self.workers.workers,
            self.workers.pin,
            self.workers.slice.map_or(0, |slice| slice.as_micros()),
        )
    }
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

/// A setting in microseconds: `None` when not given or 0, otherwise a duration within `bounds`
/// (refused, naming `flag` and what it allows, when outside them).
fn micros(
    value: Option<u64>,
    bounds: std::ops::RangeInclusive<std::time::Duration>,
    flag: &str,
    allowed: &str,
) -> anyhow::Result<Option<std::time::Duration>> {
    match value {
        None | Some(0) => Ok(None),
        Some(us) => {
            let duration = std::time::Duration::from_micros(us);
            if !bounds.contains(&duration) {
                bail!("{flag} {us}: {allowed}");
            }
            Ok(Some(duration))
        }
    }
}

/// `scheme://host[:port]` with nothing after it, as browsers send in `Origin`.
fn is_origin(text: &str) -> bool {
    let Some((scheme, rest)) = text.split_once("://") else { return false };
    matches!(scheme, "http" | "https")
        && !rest.is_empty()
        && !rest.contains(['/', '?', '#', ' ', '*'])
        && rest.chars().all(|c| c.is_ascii_graphic())
}

fn first_non_empty<const N: usize>(lists: [Vec<String>; N]) -> Vec<String> {
    lists.into_iter().find(|l| !l.is_empty()).unwrap_or_default()
}

/// A log origin prefix: a signed-note key name once `/coops/<id>` is added, so printable ASCII
/// without spaces or `+`, and schema-less (C2SP tlog-checkpoint).
fn is_log_origin(origin: &str) -> bool {
    !origin.is_empty()
        && origin.len() <= 200
        && !origin.contains("://")
        && origin.bytes().all(|b| b.is_ascii_graphic() && b != b'+')
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn settings() -> Settings {
        Settings { jwt_secret: Some(SECRET.into()), ..Settings::default() }
    }

    /// A witness counts once toward the quorum: listed twice, it is refused; a quorum above the
    /// witnesses listed is refused; a malformed one names itself.
    #[test]
    fn witnesses_and_their_quorum_are_checked() {
        let vkey = "bakery.example/witness+bd6ff1b7+BOwaO6C/5dQXwUny2jipgBrk4UxOK92Ui1GXX6Q2+VEl";
        let one = format!("bakery.example/witness={vkey}@https://a.example");
        let twice = Settings {
            witnesses: vec![one.clone(), one.replace("a.example", "b.example")],
            witness_quorum: Some(2),
            ..settings()
        };
        let err = GatewayConfig::resolve(twice).unwrap_err().to_string();
        assert!(err.contains("listed twice"), "{err}");
        let short = Settings { witnesses: vec![one.clone()], witness_quorum: Some(2), ..settings() };
        let err = GatewayConfig::resolve(short).unwrap_err().to_string();
        assert!(err.contains("more than the 1 witness"), "{err}");
        let bad = Settings { witnesses: vec![format!("other={vkey}@https://a.example")], ..settings() };
        let err = GatewayConfig::resolve(bad).unwrap_err().to_string();
        assert!(err.contains("its vkey names"), "{err}");
        let good = Settings { witnesses: vec![one], witness_quorum: Some(1), ..settings() };
        let config = GatewayConfig::resolve(good).unwrap();
        assert_eq!((config.witnesses.len(), config.witness_quorum), (1, 1));
        assert_eq!(config.witnesses[0].url, "https://a.example");
    }

    #[test]
    fn empty_secret_refuses_to_start() {
        let err = GatewayConfig::resolve(Settings::default()).unwrap_err();
        assert!(err.to_string().contains("JWT secret is empty"), "{err}");
    }

    #[test]
    fn defaults_and_dev_profile() {
        let config = GatewayConfig::resolve(settings()).unwrap();
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.metrics_listen.port(), 9100);
        let here = std::env::current_dir().unwrap().join("gateway.db");
        assert_eq!(
            config.store,
            StoreSpec::SqliteFile(here.display().to_string()),
            "absolute, in the working directory"
        );
        assert!(!config.open_enrollment);
        assert_eq!(config.trust_default, 0.0);
        let dev = GatewayConfig::resolve(Settings { dev: true, ..settings() }).unwrap();
        assert!(dev.open_enrollment);
        assert_eq!(dev.trust_default, 0.9);
        assert_eq!(dev.store, StoreSpec::Memory);
    }

    /// Started from another directory, a gateway configured by a file finds the file's database,
    /// keystore, passphrase and TLS files: relative paths in the file are the file's; flags stay
    /// relative to the working directory.
    #[test]
    fn relative_paths_in_a_file_are_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "jwt_secret = \"0123456789abcdef0123456789abcdef\"\nstore = \"sqlite:data/gw.db\"\nkeystore = \"keystore.json\"\n\
             tls_cert = \"tls/cert.pem\"\ntls_key = \"/etc/abs/key.pem\"\n",
        )
        .unwrap();
        let config = GatewayConfig::resolve(Settings { config: Some(path.clone()), ..Settings::default() }).unwrap();
        let dir = std::path::absolute(dir.path()).unwrap();
        assert_eq!(config.store, StoreSpec::SqliteFile(dir.join("data/gw.db").display().to_string()));
        assert_eq!(config.keystore, Some(dir.join("keystore.json")));
        let tls = config.tls.expect("tls files");
        assert_eq!((tls.cert, tls.key), (dir.join("tls/cert.pem"), PathBuf::from("/etc/abs/key.pem")));
        // Without a store in the file, the default database is the file's neighbour too.
        std::fs::write(&path, "jwt_secret = \"0123456789abcdef0123456789abcdef\"\n").unwrap();
        let config = GatewayConfig::resolve(Settings { config: Some(path.clone()), ..Settings::default() }).unwrap();
        assert_eq!(config.store, StoreSpec::SqliteFile(dir.join("gateway.db").display().to_string()));
        // A flag is the operator's, relative to where they typed it.
        let flagged = Settings { config: Some(path), store: Some("sqlite:here.db".into()), ..Settings::default() };
        let config = GatewayConfig::resolve(flagged).unwrap();
        let here = std::env::current_dir().unwrap().join("here.db");
        assert_eq!(config.store, StoreSpec::SqliteFile(here.display().to_string()));
    }

    #[test]
    fn file_fills_what_flags_leave_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9999\"\ntoken_ttl = 60\n[auth]\nopen_enrollment = true\n[trust]\ndefault_score = 0.4\n",
        )
        .unwrap();
        let config =
            GatewayConfig::resolve(Settings { config: Some(path.clone()), token_ttl: Some(120), ..settings() })
                .unwrap();
        assert_eq!(config.listen.port(), 9999);
        assert_eq!(config.token_ttl, 120, "the flag wins over the file");
        assert!(config.open_enrollment);
        assert_eq!(config.trust_default, 0.4);
        std::fs::write(&path, "no_such_key = 1\n").unwrap();
        assert!(GatewayConfig::resolve(Settings { config: Some(path), ..settings() }).is_err());
    }

    #[test]
    fn the_file_takes_the_lists_by_either_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw.toml");
        let anchor = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        for text in [
            format!("trust_anchor = [\"{anchor}\"]\ntrusted_proxy = [\"10.0.0.1\"]\n"),
            format!("trust_anchors = [\"{anchor}\"]\ntrusted_proxies = [\"10.0.0.1\"]\n"),
        ] {
            std::fs::write(&path, text).unwrap();
            let config = GatewayConfig::resolve(Settings { config: Some(path.clone()), ..settings() }).unwrap();
            assert_eq!(config.trust_anchors.len(), 1);
            assert_eq!(config.trusted_proxies.len(), 1);
            let summary = config.summary();
            assert!(summary.contains("trust_anchor = [") && summary.contains("trusted_proxy = ["), "{summary}");
        }
    }

    #[test]
    fn redis_settings_resolve_with_their_defaults() {
        let config =
            GatewayConfig::resolve(Settings { redis: Some("redis://127.0.0.1:6379".into()), ..settings() }).unwrap();
        let redis = config.redis.expect("redis configured");
        assert_eq!(redis.prefix, "icn:gw:");
        assert_eq!(redis.velocity_fallback, gateway_http::limits::VelocityFallback::Deny);
        let local = GatewayConfig::resolve(Settings {
            redis: Some("redis://cache".into()),
            redis_prefix: Some("coop-a:".into()),
            redis_velocity_fallback: Some(VelocityFallbackArg::Local),
            ..settings()
        })
        .unwrap();
        let redis = local.redis.unwrap();
        assert_eq!(
            (redis.prefix.as_str(), redis.velocity_fallback),
            ("coop-a:", gateway_http::limits::VelocityFallback::Local)
        );
        let err = GatewayConfig::resolve(Settings { redis: Some("http://cache".into()), ..settings() }).unwrap_err();
        assert!(err.to_string().contains("not a Redis URL"), "{err}");
        assert!(GatewayConfig::resolve(Settings { redis: Some(String::new()), ..settings() }).unwrap().redis.is_none());
        let err =
            GatewayConfig::resolve(Settings { redis_prefix: Some("p:".into()), ..settings() }).unwrap_err().to_string();
        assert!(err.contains("--redis-prefix is set but --redis is not"), "{err}");
        let err = GatewayConfig::resolve(Settings {
            redis_velocity_fallback: Some(VelocityFallbackArg::Local),
            ..settings()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("--redis-velocity-fallback is set but --redis is not"), "{err}");
        let tls = GatewayConfig::resolve(Settings { redis: Some("rediss://:pw@cache".into()), ..settings() }).unwrap();
        let err = tls.check().unwrap_err().to_string();
        assert!(err.contains("TLS to Redis is not supported") && !err.contains("pw@"), "{err}");
        let bad_port = GatewayConfig::resolve(Settings { redis: Some("redis://cache:notaport".into()), ..settings() });
        assert!(bad_port.unwrap().check().is_err(), "config check parses the URL as start-up does");
    }

    #[test]
    fn database_passwords_are_never_printed() {
        let store = "postgres://gw:s3cret-pw@db.example:5432/gateway".to_owned();
        let config = GatewayConfig::resolve(Settings { store: Some(store), ..settings() }).unwrap();
        for printed in [config.summary(), format!("{config:?}")] {
            assert!(printed.contains("store = postgres://gw:***@db.example:5432/gateway"), "{printed}");
            assert!(!printed.contains("s3cret-pw") && !printed.contains(SECRET), "{printed}");
        }
        let config =
            GatewayConfig::resolve(Settings { redis: Some("redis://:r3dis-pw@cache:6379".into()), ..settings() })
                .unwrap();
        for printed in [config.summary(), format!("{config:?}"), format!("{:?}", config.redis)] {
            assert!(!printed.contains("r3dis-pw"), "{printed}");
            assert!(printed.contains("redis://:***@cache:6379"), "{printed}");
        }
        let err = GatewayConfig::resolve(Settings { redis: Some("http://:r3dis-pw@cache".into()), ..settings() })
            .unwrap_err();
        assert!(!err.to_string().contains("r3dis-pw"), "{err}");
    }

    #[test]
    fn config_check_refuses_what_start_up_would() {
        for (settings, expected) in [
            (Settings { trusted_proxies: vec!["10.0.0.0/33".into()], ..settings() }, "trusted proxy"),
            (Settings { trusted_proxies: vec!["proxy.example".into()], ..settings() }, "trusted proxy"),
            (Settings { cors_origin: Some("https://a.example/path".into()), ..settings() }, "cors origin"),
            (Settings { cors_origin: Some("coop.example".into()), ..settings() }, "cors origin"),
            (Settings { cors_origin: Some("https://a.example\n".into()), ..settings() }, "cors origin"),
        ] {
            let err = GatewayConfig::resolve(settings).unwrap_err();
            assert!(err.to_string().contains(expected), "{err}");
        }
        let unset = Settings { cors_origin: Some(String::new()), ..settings() };
        assert!(GatewayConfig::resolve(unset).unwrap().cors_origin.is_none(), "empty is unset");
        let dev = Settings { dev: true, cors_origin: Some("https://a.example/".into()), ..settings() };
        assert!(GatewayConfig::resolve(dev).unwrap().cors_origin.is_none(), "--dev ignores the origin");
        let good = Settings {
            trusted_proxies: vec!["10.0.0.0/8".into(), "::1".into()],
            cors_origin: Some("https://coop.example:8443".into()),
            ..settings()
        };
        let config = GatewayConfig::resolve(good).unwrap();
        assert_eq!(config.trusted_proxies.len(), 2);
        assert_eq!(config.cors_origin.unwrap(), "https://coop.example:8443");
    }

    /// `gateway.example.toml` documents every setting, and the file it becomes with every
    /// example value uncommented is accepted as it is.
    #[test]
    fn the_example_configuration_names_every_setting_and_is_valid() {
        use clap::CommandFactory;
        let example = include_str!("../../../gateway.example.toml");
        for arg in Cli::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if long == "config" {
                continue;
            }
            let key = long.replace('-', "_");
            assert!(
                example.lines().any(|l| l.trim_start_matches("# ").starts_with(&format!("{key} = "))),
                "gateway.example.toml does not document {key}"
            );
        }
        let uncommented: Vec<&str> = example
            .lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(rest)
                    if rest
                        .split_once(" = ")
                        .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '_')) =>
                {
                    rest
                }
                _ => line,
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        // The passphrase file is read when the configuration resolves: put one where it points.
        let passphrase = dir.path().join("passphrase");
        std::fs::write(&passphrase, "example passphrase\n").unwrap();
        let example_passphrase = format!("passphrase_file = {:?}", passphrase.display().to_string());
        let uncommented: Vec<&str> = uncommented
            .into_iter()
            .map(|line| if line.starts_with("passphrase_file = ") { example_passphrase.as_str() } else { line })
            .collect();
        let path = dir.path().join("all.toml");
        std::fs::write(&path, uncommented.join("\n")).unwrap();
        let config = GatewayConfig::resolve(Settings { config: Some(path), ..Settings::default() })
            .expect("every example value is accepted");
        assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.trust_anchors.len(), 1);
        assert!(config.redis.is_some());
        assert_eq!(config.keystore_passphrase.as_deref().map(String::as_str), Some("example passphrase"));
        let warnings = config.check().unwrap_err().to_string();
        assert!(warnings.contains("cert.pem"), "the example TLS files do not exist here: {warnings}");
    }

    #[test]
    fn weak_secrets_and_a_missing_trust_anchor_are_warned_about() {
        let short =
            GatewayConfig::resolve(Settings { jwt_secret: Some("12345".into()), ..Settings::default() }).unwrap();
        let warnings = short.check().unwrap();
        assert!(warnings.iter().any(|w| w.contains("the JWT secret is 5 bytes")), "{warnings:?}");
        assert!(warnings.iter().any(|w| w.contains("no trust anchor")), "{warnings:?}");
        let repeated =
            GatewayConfig::resolve(Settings { jwt_secret: Some("a".repeat(40)), ..Settings::default() }).unwrap();
        assert!(repeated.check().unwrap().iter().any(|w| w.contains("distinct characters")));
        let anchored = GatewayConfig::resolve(Settings {
            trust_anchors: vec!["did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX".into()],
            ..settings()
        })
        .unwrap();
        assert!(anchored.check().unwrap().is_empty(), "{:?}", anchored.check());
    }

    #[test]
    fn tls_needs_both_files() {
        let err = GatewayConfig::resolve(Settings { tls_cert: Some("c.pem".into()), ..settings() }).unwrap_err();
        assert!(err.to_string().contains("both"));
    }
}
