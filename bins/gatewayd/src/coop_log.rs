//! The coops' logs on the server side: the HTTP transport to the witnesses a gateway sends its
//! checkpoints to, and `gatewayd log fsck`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use gateway_core::{CoopId, Error, SystemClock};
use gateway_domain::log::{Log, LogConfig, WitnessAnswer, WitnessTransport};
use gateway_store::Store;

/// How long a witness has to answer one checkpoint.
const WITNESS_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest answer read from a witness (a few cosignature lines are a few hundred bytes).
const MAX_ANSWER_BYTES: u64 = 64 * 1024;

/// `POST <url>/add-checkpoint` over HTTP(S), rustls with the platform's trust store.
#[derive(Debug)]
pub struct HttpWitnesses {
    http: reqwest::Client,
}

impl HttpWitnesses {
    /// A transport with its own connection pool.
    pub fn new() -> anyhow::Result<Self> {
        use rustls_platform_verifier::BuilderVerifierExt;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|builder| builder.with_platform_verifier())
            .context("cannot set up TLS for the witnesses")?
            .with_no_client_auth();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(WITNESS_TIMEOUT)
            .user_agent(concat!("gatewayd/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot build the witnesses' HTTP client")?;
        Ok(Self { http })
    }
}

#[async_trait::async_trait]
impl WitnessTransport for HttpWitnesses {
    async fn add_checkpoint(&self, url: &str, body: String) -> Result<WitnessAnswer, Error> {
        let unavailable = |e: reqwest::Error| Error::ServiceUnavailable(format!("witness {url}: {e}"));
        let response = self
            .http
            .post(format!("{url}/add-checkpoint"))
            .header(reqwest::header::CONTENT_TYPE, "text/plain")
            .body(body)
            .send()
            .await
            .map_err(unavailable)?;
        let status = response.status().as_u16();
        if response.content_length().is_some_and(|length| length > MAX_ANSWER_BYTES) {
            return Err(Error::ServiceUnavailable(format!("witness {url}: an answer over {MAX_ANSWER_BYTES} bytes")));
        }
        let bytes = response.bytes().await.map_err(unavailable)?;
        if bytes.len() as u64 > MAX_ANSWER_BYTES {
            return Err(Error::ServiceUnavailable(format!("witness {url}: an answer over {MAX_ANSWER_BYTES} bytes")));
        }
        match status {
            200 => Ok(WitnessAnswer::Cosigned(bytes.to_vec())),
            409 => gateway_tlog::witness::parse_conflict_size(&bytes)
                .map(WitnessAnswer::Conflict)
                .ok_or_else(|| Error::ServiceUnavailable(format!("witness {url}: 409 without a size"))),
            422 => {
                Ok(WitnessAnswer::Inconsistent(String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned()))
            }
            other => Err(Error::ServiceUnavailable(format!(
                "witness {url} answered {other}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ))),
        }
    }
}

/// `gatewayd log fsck [--coop <id>]`: checks every coop's log (or one) against its latest signed
/// checkpoint and prints what is wrong; `Ok(false)` when anything is.
pub async fn fsck(config: &crate::GatewayConfig, coop: Option<&str>) -> anyhow::Result<bool> {
    // Checking must not create what it checks: a mistyped path would otherwise be a new, empty
    // database whose zero logs are all sound.
    match &config.store {
        gateway_store::StoreSpec::Memory => anyhow::bail!("an in-memory store has no logs to check: give --store"),
        gateway_store::StoreSpec::SqliteFile(path) if !std::path::Path::new(path).exists() => {
            anyhow::bail!("there is no database at {path}: give the store the gateway serves (--store or --config)")
        }
        _ => {}
    }
    let store = Arc::new(
        Store::open_with(&config.store, config.store_options)
            .await
            .with_context(|| format!("opening the store {}", config.store))?,
    );
    // Checking needs no key: the checkpoints carry their signatures.
    let keys = Arc::new(gateway_domain::governance::MemoryReceiptKeys::unavailable("no_keystore"));
    let log = Log::new(
        store.clone(),
        store.clone(),
        store.clone(),
        keys,
        Arc::new(SystemClock),
        LogConfig { origin: config.log_origin.clone(), ..LogConfig::default() },
    );
    let coops = match coop {
        Some(id) => vec![CoopId::parse(id).map_err(|e| anyhow::anyhow!("invalid coop id '{id}': {e}"))?],
        None => log.coops().await?,
    };
    let mut clean = true;
    for coop in &coops {
        let problems = log.fsck(coop).await?;
        if problems.is_empty() {
            println!("{coop}: ok");
        } else {
            clean = false;
            for problem in problems {
                println!("{coop}: {problem}");
            }
        }
    }
    println!("{} log(s) checked, {}", coops.len(), if clean { "no problem found" } else { "PROBLEMS FOUND" });
    Ok(clean)
}
