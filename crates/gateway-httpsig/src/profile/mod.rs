//! INTERFACE.md §11's profile: which signature is read, which parameters and components it must
//! have, and what a failure is called.

use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use gateway_core::{Did, DidResolver, KeyDidResolver, RequestSignature};
use sfv::{BareItem, Dictionary, InnerList, Item, ListEntry, Parameters, Parser};

use crate::base::{Message, serialize_inner_list, signature_base};
use crate::digest::{check_content_digest, content_digest};
use crate::{ALG, TAG};

/// The `Accept-Signature` field sent with a refusal: what a signature of this profile covers and
/// carries.
pub const ACCEPT_SIGNATURE: &str = r#"sig1=("@method" "@authority" "@path" "content-digest");created;expires;nonce;keyid;alg="ed25519";tag="icn-gateway""#;

/// Why a signed request was refused (`details.reason` of the 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// Malformed, of another algorithm, a key that is not the DID's, a bad signature, a nonce
    /// too short, too long or not of the base64url alphabet, a lifetime too long.
    #[error("the request signature is invalid")]
    SignatureInvalid,
    /// `expires` has passed, or `created` is more than the allowed skew in the past.
    #[error("the request signature has expired")]
    SignatureExpired,
    /// `created` is before the time from which the receiver remembers every nonce (it
    /// restarted, or its shared nonce memory lost its data): the nonce may have been accepted
    /// already and forgotten since, so the signature is refused, as expired. Signing again
    /// (a new `created`, a new nonce) succeeds.
    #[error(
        "the request signature was created before the gateway's memory of used nonces begins (a restart, or its Redis lost its data): sign the request again"
    )]
    PredatesNonceMemory,
    /// The nonce was already accepted.
    #[error("the request signature's nonce was already used")]
    NonceReplayed,
    /// `Content-Digest` does not match the body received.
    #[error("Content-Digest does not match the body")]
    DigestMismatch,
    /// `keyid` is not the token's DID.
    #[error("the request signature's keyid is not the token's DID")]
    KeyidMismatch,
    /// A component the profile requires is not covered (or not present).
    #[error("the request signature does not cover what this request must cover")]
    ComponentsMissing,
    /// The operation is critical and the coop requires signed requests.
    #[error("this cooperative requires a request signature on this operation")]
    SignatureRequired,
}

impl Failure {
    /// Every failure, in declaration order (metrics register each reason up front; two
    /// failures share `signature_expired`).
    pub const ALL: [Failure; 8] = [
        Failure::SignatureInvalid,
        Failure::SignatureExpired,
        Failure::PredatesNonceMemory,
        Failure::NonceReplayed,
        Failure::DigestMismatch,
        Failure::KeyidMismatch,
        Failure::ComponentsMissing,
        Failure::SignatureRequired,
    ];

    /// The `details.reason` value.
    pub const fn reason(self) -> &'static str {
        match self {
            Failure::SignatureInvalid => "signature_invalid",
            Failure::SignatureExpired | Failure::PredatesNonceMemory => "signature_expired",
            Failure::NonceReplayed => "nonce_replayed",
            Failure::DigestMismatch => "digest_mismatch",
            Failure::KeyidMismatch => "keyid_mismatch",
            Failure::ComponentsMissing => "components_missing",
            Failure::SignatureRequired => "signature_required",
        }
    }
}

/// The profile's bounds on time and nonces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How far `created` may be from the receiver's clock, seconds.
    pub clock_skew_secs: u64,
    /// The longest `expires - created`, seconds.
    pub max_lifetime_secs: u64,
    /// The shortest nonce, characters.
    pub min_nonce_len: usize,
    /// The longest nonce, characters: the receiver remembers every nonce for the signature's
    /// lifetime, so its size is the client's to choose only within this bound.
    pub max_nonce_len: usize,
}

impl Default for Limits {
    /// INTERFACE.md §11: `created` within 60 s, a lifetime of at most 300 s, nonces of 16 to 64
    /// characters (of the base64url alphabet, [`is_nonce_char`]).
    fn default() -> Self {
        Self { clock_skew_secs: 60, max_lifetime_secs: 300, min_nonce_len: 16, max_nonce_len: 64 }
    }
}

/// Whether `byte` is of the base64url alphabet (`A-Z a-z 0-9 - _`), the only characters a
/// nonce may have (INTERFACE.md §11).
pub const fn is_nonce_char(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'
}

/// Whether `nonce` is of the profile: `limits`' length, the base64url alphabet.
fn nonce_allowed(nonce: &str, limits: &Limits) -> bool {
    // ASCII only, so bytes are characters.
    (limits.min_nonce_len..=limits.max_nonce_len).contains(&nonce.len()) && nonce.bytes().all(is_nonce_char)
}

/// A signature that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The signer.
    pub keyid: Did,
    /// Its nonce, which the receiver must accept only once while `expires` has not passed.
    pub nonce: String,
    /// When the signature was made, Unix seconds (the signer's word; within the skew of now).
    pub created: u64,
    /// When the signature expires, Unix seconds.
    pub expires: u64,
    /// What the request leaves as evidence.
    pub evidence: RequestSignature,
}

/// The selected signature of a request: its label, covered components with parameters, and
/// bytes.
struct Selected {
    label: String,
    input: InnerList,
    signature: [u8; 64],
}

/// Finds the one signature tagged `icn-gateway` in the received fields.
fn select(signature_input: &str, signature: &str) -> Result<Selected, Failure> {
    let inputs: Dictionary = Parser::new(signature_input).parse().map_err(|_| Failure::SignatureInvalid)?;
    let mut ours = inputs.iter().filter_map(|(label, entry)| match entry {
        ListEntry::InnerList(list)
            if list.params.get("tag").and_then(BareItem::as_string).is_some_and(|t| t.as_str() == TAG) =>
        {
            Some((label, list))
        }
        _ => None,
    });
    let (label, input) = ours.next().ok_or(Failure::SignatureInvalid)?;
    if ours.next().is_some() {
        return Err(Failure::SignatureInvalid);
    }
    let signatures: Dictionary = Parser::new(signature).parse().map_err(|_| Failure::SignatureInvalid)?;
    let bytes = match signatures.get(label.as_str()) {
        Some(ListEntry::Item(item)) => item.bare_item.as_byte_sequence().ok_or(Failure::SignatureInvalid)?,
        _ => return Err(Failure::SignatureInvalid),
    };
    let signature = <[u8; 64]>::try_from(bytes).map_err(|_| Failure::SignatureInvalid)?;
    Ok(Selected { label: label.as_str().to_owned(), input: input.clone(), signature })
}

fn integer(params: &Parameters, name: &str) -> Result<u64, Failure> {
    params
        .get(name)
        .and_then(BareItem::as_integer)
        .and_then(|i| u64::try_from(i64::from(i)).ok())
        .ok_or(Failure::SignatureInvalid)
}

fn string<'p>(params: &'p Parameters, name: &str) -> Option<&'p str> {
    params.get(name).and_then(BareItem::as_string).map(|s| s.as_str())
}

fn covers(input: &InnerList, component: &str) -> bool {
    input.items.iter().any(|item| item.bare_item.as_string().is_some_and(|s| s.as_str() == component))
}

/// Verifies the request's signature of this profile: the one tagged `icn-gateway` among
/// `signature_input` and `signature` (the received fields, several lines joined with `, `),
/// signed by `expected_signer` (the token's DID), at `now` (Unix seconds), over `message` and,
/// when the request has one, `body` (checked against `Content-Digest`).
///
/// The nonce is not remembered here: the caller accepts [`Verified::nonce`] once.
pub fn verify(
    message: &Message<'_>,
    body: &[u8],
    signature_input: &str,
    signature: &str,
    expected_signer: &Did,
    now: u64,
    limits: Limits,
) -> Result<Verified, Failure> {
    let selected = select(signature_input, signature)?;
    let params = &selected.input.params;
    // The usual case, the token's DID verbatim, needs no parsing; anything else is either not a
    // DID or another signer.
    let keyid = string(params, "keyid").ok_or(Failure::SignatureInvalid)?;
    if keyid != expected_signer.as_str() {
        Did::parse(keyid).map_err(|_| Failure::SignatureInvalid)?;
        return Err(Failure::KeyidMismatch);
    }
    let keyid = expected_signer.clone();
    if string(params, "alg").is_some_and(|alg| alg != ALG) {
        return Err(Failure::SignatureInvalid);
    }
    let created = integer(params, "created")?;
    let expires = integer(params, "expires")?;
    let nonce = string(params, "nonce").ok_or(Failure::SignatureInvalid)?;
    if !nonce_allowed(nonce, &limits)
        || expires < created
        || expires - created > limits.max_lifetime_secs
        || created > now + limits.clock_skew_secs
    {
        return Err(Failure::SignatureInvalid);
    }
    if expires <= now || created + limits.clock_skew_secs < now {
        return Err(Failure::SignatureExpired);
    }
    let required = ["@method", "@authority", "@path"];
    if required.iter().any(|c| !covers(&selected.input, c))
        || (message.query.is_some() && !covers(&selected.input, "@query"))
        || (!body.is_empty() && !covers(&selected.input, "content-digest"))
    {
        return Err(Failure::ComponentsMissing);
    }
    let digest_field = header(message, "content-digest");
    if !body.is_empty() || digest_field.is_some() {
        check_content_digest(digest_field.as_deref().ok_or(Failure::ComponentsMissing)?, body)?;
    }
    check(message, &selected, &keyid)?;
    let evidence = RequestSignature {
        signature_input: member(&selected)?,
        signature: format!(
            "{}=:{}:",
            selected.label,
            base64::engine::general_purpose::STANDARD.encode(selected.signature)
        ),
        content_digest: digest_field,
        method: message.method.to_owned(),
        authority: message.authority.to_owned(),
        path: message.path.to_owned(),
        query: message.query.map(str::to_owned),
        body: Some(base64::engine::general_purpose::STANDARD.encode(body).into()),
    };
    Ok(Verified { keyid, nonce: nonce.to_owned(), created, expires, evidence })
}

/// The combined value of a header field of `message`.
fn header(message: &Message<'_>, name: &str) -> Option<String> {
    let values: Vec<&str> =
        message.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim()).collect();
    (!values.is_empty()).then(|| values.join(", "))
}

/// The `Signature-Input` member of the selected signature, `label=(…);…`.
fn member(selected: &Selected) -> Result<String, Failure> {
    Ok(format!("{}={}", selected.label, serialize_inner_list(&selected.input)?))
}

/// How many signers' keys [`signer_key`] keeps before it starts again from empty.
const KEY_CACHE_CAPACITY: usize = 4096;

/// Signers' decoded and decompressed keys. A DID names its key (`did:key`, `did:icn`), so an
/// entry can never go stale or be planted: caching only spares a member's next request the
/// DID decoding and the Ed25519 point decompression, about a fifth of a verify.
static KEYS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<Did, VerifyingKey>>> =
    std::sync::LazyLock::new(Default::default);

/// `signer`'s verifying key, from the cache or decoded (and then cached).
fn signer_key(signer: &Did) -> Result<VerifyingKey, Failure> {
    let lock = || KEYS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(key) = lock().get(signer) {
        return Ok(*key);
    }
    let key = KeyDidResolver.resolve(signer).map_err(|_| Failure::SignatureInvalid)?;
    let key = VerifyingKey::from_bytes(&key.0).map_err(|_| Failure::SignatureInvalid)?;
    let mut keys = lock();
    if keys.len() >= KEY_CACHE_CAPACITY {
        keys.clear();
    }
    keys.insert(signer.clone(), key);
    Ok(key)
}

/// The Ed25519 check of the selected signature over `message`'s base, with `signer`'s key.
fn check(message: &Message<'_>, selected: &Selected, signer: &Did) -> Result<(), Failure> {
    let key = signer_key(signer)?;
    let base = signature_base(message, &selected.input)?;
    key.verify(base.as_bytes(), &Signature::from_bytes(&selected.signature)).map_err(|_| Failure::SignatureInvalid)
}

/// Verifies stored evidence offline: the signature over the recorded method, authority, path,
/// query and `Content-Digest`, by the key of the DID in its `keyid`, whatever the time now, and
/// the recorded `body` against that `Content-Digest` (a body that is not the signed one is
/// `DigestMismatch`; a non-empty body without a covered digest is `ComponentsMissing`).
/// Returns the signer. Evidence kept without a body (`body: None`, before the gateway stored
/// bodies) verifies on its signature alone; [`evidence_body`] tells the two apart.
pub fn verify_evidence(evidence: &RequestSignature) -> Result<Did, Failure> {
    evidence_body(evidence)?;
    let selected = select(&evidence.signature_input, &evidence.signature)?;
    let keyid = Did::parse(string(&selected.input.params, "keyid").ok_or(Failure::SignatureInvalid)?)
        .map_err(|_| Failure::SignatureInvalid)?;
    let digest = evidence.content_digest.as_deref().map(|d| [("content-digest", d)]);
    let message = Message {
        method: &evidence.method,
        authority: &evidence.authority,
        path: &evidence.path,
        query: evidence.query.as_deref(),
        headers: digest.as_ref().map_or(&[][..], |d| &d[..]),
    };
    check(&message, &selected, &keyid)?;
    Ok(keyid)
}

/// The signed body bytes the evidence keeps, checked against its `Content-Digest`: `None` when
/// the evidence holds no body (kept before bodies were stored), an error when `body` is not
/// base64 (`SignatureInvalid`), is not the digested bytes (`DigestMismatch`), or is not empty
/// while no digest was recorded (`ComponentsMissing`). It does not check the signature:
/// [`verify_evidence`] does both.
pub fn evidence_body(evidence: &RequestSignature) -> Result<Option<Vec<u8>>, Failure> {
    let Some(text) = &evidence.body else { return Ok(None) };
    let body =
        base64::engine::general_purpose::STANDARD.decode(text.as_bytes()).map_err(|_| Failure::SignatureInvalid)?;
    match &evidence.content_digest {
        Some(digest) => check_content_digest(digest, &body)?,
        None if body.is_empty() => {}
        None => return Err(Failure::ComponentsMissing),
    }
    Ok(Some(body))
}

/// What to sign with.
#[derive(Debug, Clone)]
pub struct SignOptions<'a> {
    /// The `Signature-Input` label.
    pub label: &'a str,
    /// Unix seconds.
    pub created: u64,
    /// Unix seconds, after `created` and at most 300 s later.
    pub expires: u64,
    /// A random value of 16 to 64 characters of the base64url alphabet (`A-Z a-z 0-9 - _`).
    pub nonce: &'a str,
    /// The signer's DID (`did:key:…` or `did:icn:…`).
    pub keyid: &'a str,
}

/// The fields to add to a signed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// `Content-Digest`, when the request has a body.
    pub content_digest: Option<String>,
    /// `Signature-Input`.
    pub signature_input: String,
    /// `Signature`.
    pub signature: String,
}

/// Signs a request in this profile: covers `@method`, `@authority`, `@path`, `@query` when the
/// target has a query, and `content-digest` when `body` is not empty, with the parameters in
/// the interface's order (`created`, `expires`, `nonce`, `keyid`, `alg`, `tag`).
/// `message.headers` is ignored: the only header covered is the `Content-Digest` made here.
pub fn sign(
    message: &Message<'_>,
    body: &[u8],
    key: &SigningKey,
    options: &SignOptions<'_>,
) -> Result<Signed, Failure> {
    let digest = (!body.is_empty()).then(|| content_digest(body));
    let mut components = vec!["@method", "@authority", "@path"];
    if message.query.is_some() {
        components.push("@query");
    }
    if digest.is_some() {
        components.push("content-digest");
    }
    let text = |s: &str| -> Result<BareItem, Failure> {
        Ok(BareItem::String(sfv::String::from_string(s.to_owned()).map_err(|_| Failure::SignatureInvalid)?))
    };
    let number = |n: u64| -> Result<BareItem, Failure> {
        Ok(BareItem::Integer(
            i64::try_from(n).ok().and_then(|n| sfv::Integer::try_from(n).ok()).ok_or(Failure::SignatureInvalid)?,
        ))
    };
    let items = components.iter().map(|c| text(c).map(Item::new)).collect::<Result<Vec<_>, _>>()?;
    let mut params = Parameters::new();
    for (name, value) in [
        ("created", number(options.created)?),
        ("expires", number(options.expires)?),
        ("nonce", text(options.nonce)?),
        ("keyid", text(options.keyid)?),
        ("alg", text(ALG)?),
        ("tag", text(TAG)?),
    ] {
        params.insert(sfv::Key::from_string(name.to_owned()).map_err(|_| Failure::SignatureInvalid)?, value);
    }
    let input = InnerList::with_params(items, params);
    let headers = digest.as_deref().map(|d| [("content-digest", d)]);
    let signed_message = Message { headers: headers.as_ref().map_or(&[][..], |h| &h[..]), ..*message };
    let base = signature_base(&signed_message, &input)?;
    let signature = key.sign(base.as_bytes()).to_bytes();
    Ok(Signed {
        content_digest: digest,
        signature_input: format!("{}={}", options.label, serialize_inner_list(&input)?),
        signature: format!("{}=:{}:", options.label, base64::engine::general_purpose::STANDARD.encode(signature)),
    })
}

#[cfg(test)]
mod tests;
