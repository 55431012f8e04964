//! The TLS client configuration shared by HTTP and WebSocket connections: rustls with the
//! `ring` provider (the one the rest of the workspace uses) and the platform's certificate
//! verifier (the operating system's trust store, so a cooperative's private CA installed on the
//! machine works).
//!
//! The configuration is handed to reqwest and tokio-tungstenite explicitly; no process-wide
//! default provider is installed, so an application embedding the SDK keeps its own choice.
//! Plain `http://` gateways (the loopback default) do not use it at all.

use std::sync::Arc;

use rustls::ClientConfig;
use rustls_platform_verifier::BuilderVerifierExt;

use crate::error::{Error, Result};

/// A client configuration for TLS 1.2 and 1.3 with the platform verifier.
pub(crate) fn client_config() -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_platform_verifier())
        .map_err(|e| Error::Usage(format!("cannot set up TLS: {e}")))?
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tls_configuration_builds_without_a_process_default_provider() {
        let config = super::client_config().unwrap();
        assert!(config.alpn_protocols.is_empty(), "WebSocket upgrades need HTTP/1.1, so no h2 ALPN");
        // reqwest accepts it as its backend (it would panic without a provider otherwise).
        crate::Client::new("https://gateway.example").unwrap();
    }
}
