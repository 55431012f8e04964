//! Issuing and verifying the gateway's JSON Web Tokens.
//!
//! HS256 only: the verifier pins the algorithm, so `none` and every other `alg` are refused.
//! `iss` and `aud` are set and checked; `exp` is checked here against the injected [`Clock`]
//! (not the library's own clock) with a leeway, so expiry is testable without sleeping.
//! This module decides nothing about which scopes a subject deserves.

use std::fmt;
use std::sync::Arc;

use gateway_core::{Claims, Clock, CoopId, Did, ScopeSet};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rand::RngCore;

use crate::AuthError;
use crate::cache::Bounded;

/// Secrets shorter than this many bytes get a start-up warning.
pub const RECOMMENDED_SECRET_LEN: usize = 32;

/// Token settings, from the gateway's configuration.
#[derive(Clone)]
pub struct TokenConfig {
    /// The HMAC secret.
    pub secret: Vec<u8>,
    /// `iss` claim written and required.
    pub issuer: String,
    /// `aud` claim written and required.
    pub audience: String,
    /// Lifetime of issued tokens, seconds.
    pub ttl_secs: u64,
    /// Tolerance for clock skew when checking `exp`, seconds.
    pub leeway_secs: u64,
}

impl fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenConfig")
            .field("secret", &format_args!("<{} bytes>", self.secret.len()))
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .field("ttl_secs", &self.ttl_secs)
            .field("leeway_secs", &self.leeway_secs)
            .finish()
    }
}

impl TokenConfig {
    /// The interface's defaults (one hour, 30 s leeway) around a secret.
    pub fn with_secret(secret: impl Into<Vec<u8>>) -> Self {
        Self {
            secret: secret.into(),
            issuer: "icn-gateway".into(),
            audience: "icn-gateway".into(),
            ttl_secs: 3600,
            leeway_secs: 30,
        }
    }

    /// Whether the secret is shorter than recommended (start-up should warn).
    pub fn secret_is_short(&self) -> bool {
        self.secret.len() < RECOMMENDED_SECRET_LEN
    }
}

/// A freshly issued token. Its `Debug` form leaves the token out: a bearer token is a secret.
#[derive(Clone)]
pub struct IssuedToken {
    /// The compact JWT.
    pub token: String,
    /// Seconds until expiry.
    pub expires_in: u64,
    /// Expiry, Unix seconds.
    pub expires_at: u64,
    /// Granted scopes.
    pub scopes: ScopeSet,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("expires_in", &self.expires_in)
            .field("expires_at", &self.expires_at)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// What a valid token says, already parsed into domain types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    /// The subject.
    pub did: Did,
    /// The cooperative context; `None` for identity-only tokens.
    pub coop_id: Option<CoopId>,
    /// Granted scopes.
    pub scopes: ScopeSet,
    /// Expiry, Unix seconds.
    pub expires_at: u64,
    /// Issue time, Unix seconds.
    pub issued_at: u64,
    /// Token id.
    pub jti: std::sync::Arc<str>,
}

/// Issues and verifies tokens.
pub struct TokenService {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    header: Header,
    config: TokenConfig,
    clock: Arc<dyn Clock>,
    /// Tokens whose signature and claims were already checked, by their exact text: a client
    /// sends the same token on every request for an hour, and the HMAC, the base64 and the
    /// claims' parsing need not be done again. Only tokens that passed every check enter it; a
    /// hit still checks the expiry against the clock, so a cached token expires exactly when a
    /// fresh check would say so.
    verified: Bounded<Box<str>, VerifiedToken>,
}

/// Most tokens the verified cache remembers (a few MB at most).
pub const VERIFIED_CACHE_ENTRIES: usize = 8192;

impl fmt::Debug for TokenService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenService").field("config", &self.config).finish_non_exhaustive()
    }
}

impl TokenService {
    /// Builds the service; an empty secret is refused.
    pub fn new(config: TokenConfig, clock: Arc<dyn Clock>) -> Result<Self, AuthError> {
        if config.secret.is_empty() {
            return Err(AuthError::EmptySecret);
        }
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        // Expiry is checked against our clock in `verify`.
        validation.validate_exp = false;
        validation.leeway = 0;
        Ok(Self {
            encoding: EncodingKey::from_secret(&config.secret),
            decoding: DecodingKey::from_secret(&config.secret),
            validation,
            header: Header::new(Algorithm::HS256),
            config,
            clock,
            verified: Bounded::new(VERIFIED_CACHE_ENTRIES),
        })
    }

    /// The configured lifetime, seconds.
    pub fn ttl_secs(&self) -> u64 {
        self.config.ttl_secs
    }

    /// Issues a token for a subject, a cooperative context and scopes.
    pub fn issue(&self, did: &Did, coop_id: Option<&CoopId>, scopes: ScopeSet) -> IssuedToken {
        let now = self.clock.now_unix_secs();
        let mut jti = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut jti);
        let claims = Claims {
            sub: did.to_string(),
            coop_id: coop_id.map(ToString::to_string),
            scopes: scopes.to_strings(),
            iat: now,
            exp: now + self.config.ttl_secs,
            iss: self.config.issuer.clone(),
            aud: self.config.audience.clone(),
            jti: hex::encode(jti),
        };
        let token = jsonwebtoken::encode(&self.header, &claims, &self.encoding)
            .expect("HS256 encoding of plain claims cannot fail");
        IssuedToken { token, expires_in: self.config.ttl_secs, expires_at: claims.exp, scopes }
    }

    /// Verifies signature, algorithm, issuer, audience and expiry, and parses the claims.
    ///
    /// A token already verified is answered from a bounded cache of verified tokens (exact text
    /// match), with its expiry checked again.
    pub fn verify(&self, token: &str) -> Result<VerifiedToken, AuthError> {
        if let Some(verified) = self.verified.get(token) {
            self.check_expiry(verified.expires_at)?;
            return Ok(verified);
        }
        let verified = self.verify_uncached(token)?;
        self.verified.insert(token.into(), verified.clone());
        Ok(verified)
    }

    /// Tokens in the verified cache now.
    pub fn cached_tokens(&self) -> usize {
        self.verified.len()
    }

    fn check_expiry(&self, expires_at: u64) -> Result<(), AuthError> {
        if expires_at.saturating_add(self.config.leeway_secs) <= self.clock.now_unix_secs() {
            return Err(AuthError::TokenExpired);
        }
        Ok(())
    }

    /// Every check, from the token's text: signature, algorithm, issuer, audience, expiry and
    /// the claims' syntax.
    fn verify_uncached(&self, token: &str) -> Result<VerifiedToken, AuthError> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|_| AuthError::InvalidToken)?;
        let claims = data.claims;
        self.check_expiry(claims.exp)?;
        let did = Did::parse(&claims.sub).map_err(|_| AuthError::InvalidToken)?;
        let coop_id = match claims.coop_id.as_deref() {
            None => None,
            Some(c) => Some(CoopId::parse(c).map_err(|_| AuthError::InvalidToken)?),
        };
        let scopes = ScopeSet::parse_all(&claims.scopes).map_err(|_| AuthError::InvalidToken)?;
        Ok(VerifiedToken {
            did,
            coop_id,
            scopes,
            expires_at: claims.exp,
            issued_at: claims.iat,
            jti: claims.jti.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::{ManualClock, Scope};
    use proptest::prelude::*;

    fn service(clock: &ManualClock) -> TokenService {
        TokenService::new(TokenConfig::with_secret("s".repeat(32)), Arc::new(clock.clone())).unwrap()
    }

    fn did() -> Did {
        Did::parse("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK").unwrap()
    }

    #[test]
    fn empty_secret_is_refused_short_is_flagged() {
        let clock = Arc::new(ManualClock::at_secs(0));
        assert_eq!(TokenService::new(TokenConfig::with_secret(""), clock).unwrap_err(), AuthError::EmptySecret);
        assert!(TokenConfig::with_secret("short").secret_is_short());
        assert!(!TokenConfig::with_secret("x".repeat(32)).secret_is_short());
    }

    #[test]
    fn expiry_honours_leeway() {
        let clock = ManualClock::at_secs(1_000_000);
        let tokens = service(&clock);
        let issued = tokens.issue(&did(), None, ScopeSet::EMPTY);
        assert_eq!(issued.expires_at, 1_003_600);
        clock.advance_secs(3600 + 29);
        assert!(tokens.verify(&issued.token).is_ok());
        clock.advance_secs(1);
        assert_eq!(tokens.verify(&issued.token).unwrap_err(), AuthError::TokenExpired);
    }

    #[test]
    fn other_secret_issuer_or_audience_is_invalid() {
        let clock = ManualClock::at_secs(1_000_000);
        let tokens = service(&clock);
        let token = tokens.issue(&did(), None, ScopeSet::EMPTY).token;
        let mut other = TokenConfig::with_secret("t".repeat(32));
        assert_eq!(
            TokenService::new(other.clone(), Arc::new(clock.clone())).unwrap().verify(&token).unwrap_err(),
            AuthError::InvalidToken
        );
        other.secret = "s".repeat(32).into_bytes();
        other.audience = "someone-else".into();
        assert_eq!(
            TokenService::new(other, Arc::new(clock.clone())).unwrap().verify(&token).unwrap_err(),
            AuthError::InvalidToken
        );
    }

    #[test]
    fn a_cached_token_expires_on_time() {
        let clock = ManualClock::at_secs(1_000_000);
        let tokens = service(&clock);
        let issued = tokens.issue(&did(), None, ScopeSet::EMPTY);
        assert!(tokens.verify(&issued.token).is_ok());
        assert_eq!(tokens.cached_tokens(), 1);
        // Answered from the cache from here on; the expiry still holds to the second.
        clock.advance_secs(3600 + 29);
        assert!(tokens.verify(&issued.token).is_ok());
        clock.advance_secs(1);
        assert_eq!(tokens.verify(&issued.token).unwrap_err(), AuthError::TokenExpired);
    }

    #[test]
    fn the_cache_never_answers_for_other_text() {
        let clock = ManualClock::at_secs(1_000_000);
        let tokens = service(&clock);
        let token = tokens.issue(&did(), None, ScopeSet::EMPTY).token;
        tokens.verify(&token).unwrap();
        // Every one-byte change of a cached token, and the token with bytes around it, is
        // checked from its text and refused.
        for i in 0..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let Ok(changed) = String::from_utf8(bytes) else { continue };
            if changed != token {
                assert!(tokens.verify(&changed).is_err(), "byte {i} changed was accepted");
            }
        }
        assert!(tokens.verify(&format!("{token} ")).is_err());
        assert!(tokens.verify(&token[..token.len() - 1]).is_err());
        // Refused tokens are not remembered.
        assert_eq!(tokens.cached_tokens(), 1);
        // A service with another secret has its own cache: the token is refused there.
        let other = TokenService::new(TokenConfig::with_secret("t".repeat(32)), Arc::new(clock.clone())).unwrap();
        assert_eq!(other.verify(&token).unwrap_err(), AuthError::InvalidToken);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let clock = ManualClock::at_secs(1_000_000);
        let tokens = service(&clock);
        for _ in 0..VERIFIED_CACHE_ENTRIES + 2_000 {
            let token = tokens.issue(&did(), None, ScopeSet::EMPTY).token;
            tokens.verify(&token).unwrap();
            assert!(tokens.cached_tokens() <= VERIFIED_CACHE_ENTRIES);
        }
        assert!(tokens.cached_tokens() > 0);
    }

    proptest! {
        #[test]
        fn issue_then_verify_round_trips(
            scope_bits in proptest::collection::vec(any::<bool>(), Scope::ALL.len()),
            coop in "[A-Za-z0-9_-]{1,64}",
            with_coop in any::<bool>(),
        ) {
            let clock = ManualClock::at_secs(1_700_000_000);
            let tokens = service(&clock);
            let scopes: ScopeSet = Scope::ALL.iter().zip(&scope_bits).filter(|(_, b)| **b).map(|(s, _)| *s).collect();
            let coop = with_coop.then(|| CoopId::parse(&coop).unwrap());
            let issued = tokens.issue(&did(), coop.as_ref(), scopes);
            let verified = tokens.verify(&issued.token).unwrap();
            prop_assert_eq!(verified.did, did());
            prop_assert_eq!(verified.coop_id, coop);
            prop_assert_eq!(verified.scopes, scopes);
            prop_assert_eq!(verified.expires_at, issued.expires_at);
        }
    }
}
