//! `gatewayd` as a library: the configuration and [`serve`], which composes every piece of the
//! gateway (store, services, HTTP and WebSocket routers, background tasks, metrics, TLS). The
//! binary only parses its configuration and calls `serve`; tests call `serve` in-process.

mod app;
pub mod config;
pub mod coop_log;
pub mod init;
mod keys;
pub mod metrics;
mod nonces;
mod tasks;
pub mod witness;
pub mod workers;

pub use app::{Listeners, connect_check, serve, tls_server_config};
pub use config::{GatewayConfig, TlsFiles};
pub use keys::{PASSPHRASE_CREDENTIAL, PASSPHRASE_VAR, PassphraseSource, passphrase};

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

/// What a gateway without a trust anchor means, said at start and by `config check`.
pub const NO_TRUST_ANCHOR: &str = "no trust anchor is configured: every DID has the default trust score, so with the default 0.0 nobody can open a governance proposal (needs 0.4) or submit a compute task (needs 0.3); start with --trust-anchor <founder DID> (or run `gatewayd init --founder <DID>`)";

/// Why a JWT secret is weak, if it is: shorter than 32 bytes, or made of few distinct bytes.
pub fn secret_weakness(secret: &str) -> Option<String> {
    let distinct = secret.bytes().collect::<std::collections::BTreeSet<u8>>().len();
    if secret.len() < gateway_auth::token::RECOMMENDED_SECRET_LEN {
        Some(format!(
            "the JWT secret is {} bytes: use at least {} random bytes (`gatewayd init` writes one)",
            secret.len(),
            gateway_auth::token::RECOMMENDED_SECRET_LEN
        ))
    } else if distinct < 8 {
        Some(format!(
            "the JWT secret uses only {distinct} distinct characters: use random bytes (`gatewayd init` writes one)"
        ))
    } else {
        None
    }
}

impl GatewayConfig {
    /// Resolves a configuration from command-line style arguments (without the program name),
    /// the environment and the file they name, as the binary does.
    pub fn from_args<I, T>(args: I) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::Parser;
        let cli =
            config::Cli::try_parse_from(std::iter::once("gatewayd".into()).chain(args.into_iter().map(Into::into)))?;
        Self::resolve(cli.settings)
    }

    /// Everything start-up would refuse beyond [`GatewayConfig::resolve`] (the TLS files load
    /// and make a TLS 1.3 configuration), and the warnings start-up would log: a keystore file
    /// that does not exist leaves proposals closing without signed receipts. `config check`
    /// runs it.
    pub fn check(&self) -> anyhow::Result<Vec<String>> {
        if let Some(files) = &self.tls {
            tls_server_config(files)?;
        }
        if let Some(redis) = &self.redis {
            // The URL as start-up parses it (TLS refused, a malformed host or port); the
            // connection itself is made lazily, so an unreachable Redis is not an error here.
            gateway_redis::Redis::new(gateway_redis::RedisConfig::new(&redis.url)).map_err(anyhow::Error::msg)?;
        }
        let mut warnings = Vec::new();
        if let Some(weakness) = secret_weakness(&self.jwt_secret) {
            warnings.push(weakness);
        }
        if self.trust_anchors.is_empty() && !self.dev {
            warnings.push(NO_TRUST_ANCHOR.to_owned());
        }
        if let Some(path) = &self.keystore
            && !path.is_file()
        {
            warnings.push(format!(
                "keystore {}: no such file; the gateway would run without signed receipts (create it with `gatewayd keystore init`)",
                path.display()
            ));
        }
        if self.keystore.is_some() && self.keystore_passphrase.is_none() {
            warnings.push(format!(
                "no keystore passphrase (--passphrase-file, the systemd credential {} or {}): the keystore would stay locked and receipts would be unavailable",
                crate::keys::PASSPHRASE_CREDENTIAL,
                crate::PASSPHRASE_VAR
            ));
        }
        if self.passphrase_source == Some(crate::keys::PassphraseSource::Environment) {
            warnings.push(format!(
                "the keystore passphrase comes from {}, which stays readable in /proc/<pid>/environ by the same user and root: prefer --passphrase-file or the systemd credential {} (docs/DEPLOYMENT.md)",
                crate::PASSPHRASE_VAR,
                crate::keys::PASSPHRASE_CREDENTIAL
            ));
        } else if self.passphrase_source.is_some() && std::env::var(crate::PASSPHRASE_VAR).is_ok_and(|v| !v.is_empty())
        {
            warnings.push(format!(
                "{} is set but ignored (the passphrase comes from a file or credential): unset it",
                crate::PASSPHRASE_VAR
            ));
        }
        Ok(warnings)
    }
}
