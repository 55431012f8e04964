//! The login flow: challenge issuance and the verify steps in the specification's order.

use std::sync::Arc;

use gateway_core::{Clock, CoopId, Did, DidResolver, Error, ScopeSet};
use rand::RngCore;

use crate::AuthError;
use crate::challenge::{Challenge, ChallengeStore};
use crate::policy::ScopePolicy;
use crate::signature::{VerifyingKeys, decode_signature_hex, verify_nonce_signature};
use crate::token::{IssuedToken, TokenService};

/// A challenge as returned to the client.
#[derive(Debug, Clone)]
pub struct IssuedChallenge {
    /// Opaque id of this challenge.
    pub challenge_id: String,
    /// 32 random bytes, hex: the message to sign.
    pub nonce: String,
    /// Seconds until it expires.
    pub expires_in: u64,
}

/// The fields of a verify request, unparsed, so that validation happens here in order.
#[derive(Debug, Clone, Default)]
pub struct LoginRequest {
    /// The DID logging in.
    pub did: String,
    /// Hex Ed25519 signature over the nonce.
    pub signature: String,
    /// The cooperative context; absent for an identity-only token.
    pub coop_id: Option<String>,
    /// Requested scopes; absent for an identity-only token.
    pub scopes: Option<Vec<String>>,
    /// Which challenge was signed (consumed, success or not); without it the DID's outstanding
    /// challenges are tried and only the one the signature verifies is consumed.
    pub challenge_id: Option<String>,
}

/// A refused login: INTERFACE.md error the client sees and, for a refusal of the signature or
/// the challenge itself, which one it was (the client is told the same message either way, so
/// that it cannot tell them apart; the gateway counts them as misbehaviour).
#[derive(Debug, Clone)]
pub struct LoginError {
    /// What the client is answered.
    pub error: Error,
    /// [`AuthError::BadSignature`] or [`AuthError::UnknownChallenge`] when that was the refusal.
    pub refusal: Option<AuthError>,
}

impl From<Error> for LoginError {
    fn from(error: Error) -> Self {
        Self { error, refusal: None }
    }
}

impl From<LoginError> for Error {
    fn from(err: LoginError) -> Self {
        err.error
    }
}

/// A successful login.
#[derive(Debug, Clone)]
pub struct LoginResult {
    /// Who logged in.
    pub did: Did,
    /// For which cooperative, if any.
    pub coop_id: Option<CoopId>,
    /// The token.
    pub token: IssuedToken,
}

/// Runs challenge issuance and verification.
#[derive(Debug, Clone)]
pub struct Authenticator {
    resolver: Arc<dyn DidResolver>,
    challenges: Arc<dyn ChallengeStore>,
    tokens: Arc<TokenService>,
    policy: ScopePolicy,
    clock: Arc<dyn Clock>,
    challenge_ttl_secs: u64,
    /// The members' keys, decoded once (shared by the clones).
    keys: Arc<VerifyingKeys>,
}

impl Authenticator {
    /// Assembles the flow from its parts.
    pub fn new(
        resolver: Arc<dyn DidResolver>,
        challenges: Arc<dyn ChallengeStore>,
        tokens: Arc<TokenService>,
        policy: ScopePolicy,
        clock: Arc<dyn Clock>,
        challenge_ttl_secs: u64,
    ) -> Self {
        Self { resolver, challenges, tokens, policy, clock, challenge_ttl_secs, keys: Arc::default() }
    }

    /// The token service, for verifying tokens on protected routes.
    pub fn tokens(&self) -> &Arc<TokenService> {
        &self.tokens
    }

    /// The scope policy, whose membership lookup also serves per-request checks.
    pub fn policy(&self) -> &ScopePolicy {
        &self.policy
    }

    /// Parses a DID and checks that its method is resolvable (INTERFACE.md §3: "the DID must parse").
    pub fn parse_did(&self, text: &str) -> Result<(Did, gateway_core::Ed25519PublicKey), Error> {
        let did = Did::parse(text).map_err(|e| Error::bad_request_field("did", format!("invalid DID: {e}")))?;
        let key = self.resolver.resolve(&did)?;
        Ok((did, key))
    }

    /// Issues a challenge for a DID.
    pub async fn challenge(&self, did: &str) -> Result<IssuedChallenge, Error> {
        let (did, _) = self.parse_did(did)?;
        // `ThreadRng` is not `Send`: use it before any await point.
        let (nonce, id) = {
            let mut rng = rand::thread_rng();
            let mut nonce = [0u8; 32];
            rng.fill_bytes(&mut nonce);
            let mut id = [0u8; 16];
            rng.fill_bytes(&mut id);
            (nonce, id)
        };
        let now = self.clock.now_unix_millis();
        let challenge = Challenge {
            id: hex::encode(id),
            did: did.to_string(),
            nonce: hex::encode(nonce),
            expires_at_millis: now + self.challenge_ttl_secs * 1000,
        };
        let issued = IssuedChallenge {
            challenge_id: challenge.id.clone(),
            nonce: challenge.nonce.clone(),
            expires_in: self.challenge_ttl_secs,
        };
        self.challenges.insert(challenge, now).await?;
        metrics::counter!("icn_gateway_auth_challenges_total").increment(1);
        Ok(issued)
    }

    /// Verifies a signed challenge and issues a token. Steps, in the specification's order: DID
    /// format; scopes valid; coop_id format; signature hex; signature length; signature against
    /// the stored nonce; then the scope policy; then the token.
    pub async fn login(&self, request: LoginRequest) -> Result<LoginResult, LoginError> {
        let result = self.login_steps(request).await;
        let outcome = if result.is_ok() { "success" } else { "failure" };
        metrics::counter!("icn_gateway_auth_verifications_total", "result" => outcome).increment(1);
        result
    }

    async fn login_steps(&self, request: LoginRequest) -> Result<LoginResult, LoginError> {
        let (did, key) = self.parse_did(&request.did).inspect_err(|_| failure("invalid_did"))?;
        let scopes = match &request.scopes {
            None => ScopeSet::EMPTY,
            Some(scopes) => ScopeSet::parse_all(scopes).map_err(|bad| {
                failure("invalid_scope");
                Error::bad_request_field("scopes", format!("invalid scope '{bad}'"))
            })?,
        };
        let coop_id = match request.coop_id.as_deref() {
            None if request.scopes.as_ref().is_some_and(|s| !s.is_empty()) => {
                failure("missing_coop_id");
                return Err(Error::bad_request_field("coop_id", "coop_id is required when scopes are requested").into());
            }
            None => None,
            Some(text) => Some(CoopId::parse(text).map_err(|why| {
                failure("invalid_coop_id");
                Error::bad_request_field("coop_id", format!("invalid coop_id: {why}"))
            })?),
        };
        let signature =
            decode_signature_hex(&request.signature).inspect_err(|_| failure("invalid_signature_encoding"))?;
        self.consume_challenge(&did, &key, request.challenge_id.as_deref(), &signature).await?;
        let granted = match &coop_id {
            Some(coop) => self.policy.grant(&did, coop, scopes).await.inspect_err(|_| failure("scopes_refused"))?,
            None => ScopeSet::EMPTY,
        };
        let token = self.tokens.issue(&did, coop_id.as_ref(), granted);
        Ok(LoginResult { did, coop_id, token })
    }
}

impl Authenticator {
    /// Finds and consumes the challenge a verify is made against. Named by `challenge_id`: that
    /// challenge is consumed whether or not the signature verifies. Unnamed: the outstanding
    /// challenges of the DID are looked at, and only the one whose nonce the signature verifies
    /// is consumed; when none does, nothing is, so a stranger who knows a DID cannot burn its
    /// challenges with bad signatures.
    async fn consume_challenge(
        &self,
        did: &Did,
        key: &gateway_core::Ed25519PublicKey,
        challenge_id: Option<&str>,
        signature: &[u8; 64],
    ) -> Result<(), LoginError> {
        let now = self.clock.now_unix_millis();
        // A key off the curve verifies nothing: the challenge is still consumed when named.
        let key = self.keys.get(key);
        let verifies = |nonce: &str| key.as_ref().is_some_and(|key| verify_nonce_signature(key, nonce, signature));
        match challenge_id {
            Some(id) => {
                let taken = self.challenges.take(did.as_str(), id, now).await?;
                let challenge = taken.ok_or_else(|| refuse(AuthError::UnknownChallenge))?;
                if !verifies(&challenge.nonce) {
                    return Err(refuse(AuthError::BadSignature));
                }
            }
            None => {
                let outstanding = self.challenges.outstanding(did.as_str(), now).await?;
                if outstanding.is_empty() {
                    return Err(refuse(AuthError::UnknownChallenge));
                }
                let signed = outstanding
                    .into_iter()
                    .find(|c| verifies(&c.nonce))
                    .ok_or_else(|| refuse(AuthError::BadSignature))?;
                // Another verify of the same signature may have consumed it meanwhile: once only.
                self.challenges
                    .take(did.as_str(), &signed.id, now)
                    .await?
                    .ok_or_else(|| refuse(AuthError::UnknownChallenge))?;
            }
        }
        Ok(())
    }
}

/// Counts a refused login and turns it into the one 401 answer.
fn refuse(err: AuthError) -> LoginError {
    failure(err.reason());
    LoginError { error: err.clone().into(), refusal: Some(err) }
}

fn failure(reason: &'static str) {
    metrics::counter!("icn_gateway_auth_failures_total", "reason" => reason).increment(1);
}
