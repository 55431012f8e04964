//! `gatewayd` as a library: the configuration and [`serve`], which composes every piece of the
//! gateway (store, services, HTTP and WebSocket routers, background tasks, metrics, TLS). The
//! binary only parses its configuration and calls `serve`; tests call `serve` in-process.

mod app;
pub mod config;
mod keys;
mod tasks;

pub use app::{Listeners, serve, tls_server_config};
pub use config::{GatewayConfig, TlsFiles};
pub use keys::PASSPHRASE_VAR;

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
        let mut warnings = Vec::new();
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
                "{} is not set: the keystore would stay locked and receipts would be unavailable",
                crate::PASSPHRASE_VAR
            ));
        }
        Ok(warnings)
    }
}
