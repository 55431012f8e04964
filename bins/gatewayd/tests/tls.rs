//! TLS through the real binary: with `--tls-cert`/`--tls-key` the gateway speaks TLS 1.3 only;
//! a TLS 1.3 client is served, a TLS 1.2-only client is refused at the handshake, and answers
//! carry `Strict-Transport-Security`.

mod support;

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

fn client(versions: &[&'static rustls::SupportedProtocolVersion], cert: &CertificateDer<'static>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

#[tokio::test]
async fn tls_1_3_only() {
    let dir = tempfile::tempdir().unwrap();
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, generated.cert.pem()).unwrap();
    std::fs::write(&key_path, generated.signing_key.serialize_pem()).unwrap();
    let cert = CertificateDer::from(generated.cert.der().to_vec());

    let gateway = support::start_tls(
        dir.path(),
        &["--tls-cert", cert_path.to_str().unwrap(), "--tls-key", key_path.to_str().unwrap()],
    );
    let name = ServerName::try_from("localhost").unwrap();

    let tcp = tokio::net::TcpStream::connect(&gateway.api).await.unwrap();
    let mut tls = client(&[&rustls::version::TLS13], &cert).connect(name.clone(), tcp).await.unwrap();
    tls.write_all(b"GET /v1/health HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    tls.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("strict-transport-security: max-age="), "{answer}");
    assert_eq!(tls.get_ref().1.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));

    let tcp = tokio::net::TcpStream::connect(&gateway.api).await.unwrap();
    let refused = client(&[&rustls::version::TLS12], &cert).connect(name, tcp).await;
    assert!(refused.is_err(), "a TLS 1.2-only client must be refused");
}
