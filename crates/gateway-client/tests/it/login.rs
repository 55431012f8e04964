//! Login and automatic renewal against the real router, with the wall clock under test control.

use gateway_client::{Error, Identity, Session};
use gateway_core::{CoopId, Scope};

use crate::support::{Gateway, START};

#[tokio::test]
async fn login_yields_a_session_and_identity_routes_answer() {
    let gateway = Gateway::start().await;
    let (admin, _) = gateway.coop("bakery", 0).await;
    let session = admin.client.session().await.unwrap();
    assert_eq!(session.did, admin.identity.did().to_string());
    assert_eq!(session.coop_id.as_deref(), Some("bakery"));
    assert_eq!(session.scopes.len(), Scope::ALL.len());
    assert_eq!(session.expires_at, START + 3600);
    assert_eq!(admin.client.own_did().await.unwrap(), admin.identity.did().to_string());
    let key = admin.client.own_public_key().await.unwrap();
    assert_eq!(key.public_key, admin.identity.public_key().to_hex());
    let document = admin.client.resolve_did(admin.identity.did()).await.unwrap();
    assert_eq!(document.id, admin.identity.did().to_string());
    assert_eq!(document.verification_method[0].kind, "Ed25519VerificationKey2020");
}

#[tokio::test]
async fn identity_only_tokens_open_the_identity_routes_only() {
    let gateway = Gateway::start().await;
    let client = gateway.client();
    let identity = Identity::generate();
    let session = client.login_identity_only(identity.clone()).await.unwrap();
    assert_eq!((session.coop_id, session.scopes.len()), (None, 0));
    assert_eq!(client.own_did().await.unwrap(), identity.did().to_string());
    let refused = client.coop(&CoopId::parse("bakery").unwrap()).await.unwrap_err();
    assert!(matches!(refused, Error::Authorization { .. }), "{refused:?}");
}

#[tokio::test]
async fn the_token_is_renewed_when_less_than_the_margin_remains() {
    let gateway = Gateway::start().await;
    let (admin, _) = gateway.coop("renew", 0).await;
    let first = admin.client.session().await.unwrap();

    // 100 s left: more than the 60 s margin, the token is kept.
    gateway.clock.advance_secs(3500);
    admin.client.own_did().await.unwrap();
    assert_eq!(admin.client.session().await.unwrap().token, first.token);

    // 59 s left: the next request logs in again first.
    gateway.clock.advance_secs(41);
    admin.client.own_did().await.unwrap();
    let second = admin.client.session().await.unwrap();
    assert_ne!(second.token, first.token);
    assert_eq!(second.expires_at, START + 3541 + 3600);
    assert_eq!(second.scopes, first.scopes, "renewal asks for the same scopes");
}

#[tokio::test]
async fn an_expired_token_is_replaced_before_it_is_used() {
    let gateway = Gateway::start().await;
    let (admin, _) = gateway.coop("expired", 0).await;
    gateway.clock.advance_secs(10_000);
    // Without renewal this would be a 401: the gateway's clock has moved too.
    let coop = admin.client.coop(&admin.coop).await.unwrap();
    assert_eq!(coop.id, "expired");
}

#[tokio::test]
async fn a_rejected_token_triggers_one_fresh_login() {
    let gateway = Gateway::start().await;
    let (admin, _) = gateway.coop("rejected", 0).await;
    let mut bogus = admin.client.session().await.unwrap();
    bogus.token = "not-a-jwt".into();
    admin.client.set_session(bogus).await;
    assert_eq!(admin.client.coop(&admin.coop).await.unwrap().id, "rejected");
}

#[tokio::test]
async fn without_credentials_an_invalid_token_is_an_authentication_error() {
    let gateway = Gateway::start().await;
    let client = gateway.client();
    let session =
        Session { token: "garbage".into(), expires_at: START + 100, scopes: vec![], coop_id: None, did: String::new() };
    client.set_session(session).await;
    assert!(matches!(client.own_did().await, Err(Error::Authentication { .. })));
    client.logout().await;
    assert!(matches!(client.own_did().await, Err(Error::Usage(_))));
}

#[tokio::test]
async fn a_bad_signature_is_refused_with_401() {
    let gateway = Gateway::start().await;
    let client = gateway.client();
    let identity = Identity::generate();
    let challenge = client.challenge(identity.did()).await.unwrap();
    assert_eq!((challenge.nonce.len(), challenge.expires_in), (64, 300));
    let impostor = Identity::generate();
    let request = gateway_client::VerifyRequest::Scoped {
        did: identity.did().to_string(),
        signature: impostor.sign_nonce(&challenge.nonce),
        coop_id: "any".into(),
        scopes: vec!["coop:read".into()],
        challenge_id: Some(challenge.challenge_id),
    };
    assert!(matches!(client.verify(&request).await, Err(Error::Authentication { .. })));
    // The original network's signature form is accepted as well.
    let challenge = client.challenge(identity.did()).await.unwrap();
    let request = gateway_client::VerifyRequest::IdentityOnly {
        did: identity.did().to_string(),
        challenge_id: challenge.challenge_id,
        signature: identity.sign_nonce_decoded(&challenge.nonce).unwrap(),
    };
    assert_eq!(client.verify(&request).await.unwrap().token_type, "Bearer");
}
