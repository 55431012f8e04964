//! Signing critical operations (INTERFACE.md §11): which requests are critical, and their
//! `Content-Digest`, `Signature-Input` and `Signature` in the gateway's profile.
//!
//! The profile itself is `gateway-httpsig`'s, shared with the gateway that verifies it. This
//! module only decides what to sign, with which key, time and nonce.

use gateway_httpsig::{Message, SignOptions, Signed};
use rand::RngCore;
use reqwest::Method;
use reqwest::Url;

use crate::error::{Error, Result};
use crate::identity::Identity;

/// How long a signature stays valid: long enough for a slow network, well under the profile's
/// 300 s, so a captured request is soon worthless.
const LIFETIME_SECS: u64 = 60;

/// Whether a call is one of INTERFACE.md §11's critical operations (the gateway refuses them unsigned
/// in a coop that requires signatures), by method and path segments.
pub(crate) fn is_critical(method: &Method, segments: &[String]) -> bool {
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    matches!(
        (method.as_str(), s.as_slice()),
        ("POST", ["v1", "ledger", _, "payment"])
            | ("POST", ["ledger", "transaction"])
            | ("POST", ["v1", "ledger", _, "payments", "batch"])
            | ("POST", ["v1", "ledger", _, "payment", "convert"])
            | ("POST", ["v1", "gov", "proposals", _, "vote" | "close"])
            | ("POST", ["governance", "proposals", _, "vote"])
            | ("POST", ["v1", "coops", _, "members"] | ["coops", _, "members"])
            | ("DELETE", ["v1", "coops", _, "members", _])
            | ("PUT", ["v1", "coops", _, "members", _, "role" | "credit-limit"])
            | ("PUT", ["v1", "coops", _, "settings"])
            | ("POST", ["v1", "gov", "domains" | "delegations"])
            | ("PUT", ["v1", "gov", "domains", _])
            | ("DELETE", ["v1", "gov", "delegations", _])
            | ("POST", ["trust", "edge"] | ["v1", "trust", "edges"] | ["v1", "oracle", "rate"])
            | ("DELETE", ["v1", "trust", "edges", _])
    )
}

/// Signs a request to `url` with `body`, created now by `clock`, with a random nonce.
pub(crate) fn sign(
    identity: &Identity,
    method: &Method,
    url: &Url,
    body: &[u8],
    clock: &dyn gateway_core::Clock,
) -> Result<Signed> {
    let authority = match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => return Err(Error::Usage(format!("{url} has no host to sign for"))),
    };
    let nonce = {
        let mut bytes = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut bytes);
        hex::encode(bytes)
    };
    let created = clock.now_unix_secs();
    let did = identity.did().to_string();
    let message =
        Message { method: method.as_str(), authority: &authority, path: url.path(), query: url.query(), headers: &[] };
    let options = SignOptions { label: "sig1", created, expires: created + LIFETIME_SECS, nonce: &nonce, keyid: &did };
    gateway_httpsig::sign(&message, body, identity.signing_key(), &options)
        .map_err(|e| Error::Usage(format!("cannot sign the request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(path: &str) -> Vec<String> {
        path.trim_start_matches('/').split('/').map(str::to_owned).collect()
    }

    #[test]
    fn the_critical_operations_are_contract_11s() {
        for (method, path) in [
            (Method::POST, "/v1/ledger/c/payment"),
            (Method::POST, "/ledger/transaction"),
            (Method::POST, "/v1/ledger/c/payments/batch"),
            (Method::POST, "/v1/ledger/c/payment/convert"),
            (Method::POST, "/v1/gov/proposals/p/vote"),
            (Method::POST, "/v1/gov/proposals/p/close"),
            (Method::POST, "/governance/proposals/p/vote"),
            (Method::POST, "/v1/coops/c/members"),
            (Method::POST, "/coops/c/members"),
            (Method::DELETE, "/v1/coops/c/members/d"),
            (Method::PUT, "/v1/coops/c/members/d/role"),
            (Method::PUT, "/v1/coops/c/members/d/credit-limit"),
            (Method::PUT, "/v1/coops/c/settings"),
            (Method::POST, "/v1/gov/domains"),
            (Method::PUT, "/v1/gov/domains/d"),
            (Method::POST, "/v1/gov/delegations"),
            (Method::DELETE, "/v1/gov/delegations/d"),
            (Method::POST, "/trust/edge"),
            (Method::POST, "/v1/trust/edges"),
            (Method::DELETE, "/v1/trust/edges/d"),
            (Method::POST, "/v1/oracle/rate"),
        ] {
            assert!(is_critical(&method, &segments(path)), "{method} {path}");
        }
        for (method, path) in [
            (Method::GET, "/v1/ledger/c/history"),
            (Method::POST, "/v1/ledger/c/payment/convert/quote"),
            (Method::POST, "/v1/gov/proposals"),
            (Method::POST, "/v1/gov/proposals/p/open"),
            (Method::POST, "/v1/coops"),
            (Method::POST, "/v1/compute/submit"),
            (Method::POST, "/v1/notifications/read-all"),
        ] {
            assert!(!is_critical(&method, &segments(path)), "{method} {path}");
        }
    }
}
