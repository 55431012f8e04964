//! The interface's errors as the SDK's classes, produced by the real router.

use gateway_client::{Error, NewCoop, PaymentRequest};
use gateway_core::{Amount, CoopId, Scope};

use crate::support::Gateway;

#[tokio::test]
async fn each_error_class_from_the_real_gateway() {
    let gateway = Gateway::start().await;
    let (admin, members) = gateway.coop("errs", 1).await;
    let member = &members[0];

    // 403 with the scope the route needs.
    let err = member.client.update_settings(&member.coop, &Default::default()).await.unwrap_err();
    let Error::Authorization { required_scopes, .. } = &err else { panic!("{err:?}") };
    assert_eq!(required_scopes, &["coop:write"]);

    // 403 at login: the member's role does not allow coop:write.
    let err = member.client.login(member.identity.clone(), member.coop.clone(), &[Scope::CoopWrite]).await.unwrap_err();
    let Error::Authorization { refused_scopes, .. } = &err else { panic!("{err:?}") };
    assert_eq!(refused_scopes, &["coop:write"]);

    // 400 naming the field.
    let payment = PaymentRequest {
        from: admin.identity.did().clone(),
        to: admin.identity.did().clone(),
        amount: Amount::from_units(1),
        currency: None,
        memo: None,
    };
    let err = admin.client.pay(&admin.coop, &payment, None).await.unwrap_err();
    assert!(matches!(err, Error::Validation { .. }), "{err:?}");

    // 404 with resource and id.
    let err = admin.client.proposal("nope").await.unwrap_err();
    let Error::NotFound { resource, id, .. } = &err else { panic!("{err:?}") };
    assert_eq!((resource.as_str(), id.as_str()), ("proposal", "nope"));

    // 409 on a duplicate coop.
    let err = admin
        .client
        .create_coop(&NewCoop {
            id: None,
            name: "again".into(),
            coop_type: "worker".into(),
            description: String::new(),
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { ref code, .. } if code == "CONFLICT"), "{err:?}");

    // 409 insufficient credit, with its details.
    let payment = PaymentRequest {
        from: member.identity.did().clone(),
        to: admin.identity.did().clone(),
        amount: Amount::from_units(5000),
        currency: None,
        memo: None,
    };
    let err = member.client.pay(&member.coop, &payment, None).await.unwrap_err();
    let Error::Conflict { code, details, .. } = &err else { panic!("{err:?}") };
    assert_eq!(code, "INSUFFICIENT_CREDIT");
    assert_eq!(details["currency"], "hours");

    // 403 for another coop's path.
    let err = admin.client.coop(&CoopId::parse("elsewhere").unwrap()).await.unwrap_err();
    assert!(matches!(err, Error::Authorization { .. }), "{err:?}");

    // Transport: nothing listens there.
    let closed = gateway_client::Client::builder("http://127.0.0.1:9")
        .retry(gateway_client::RetryPolicy::none())
        .build()
        .unwrap();
    let err = closed.health().await.unwrap_err();
    assert!(matches!(err, Error::Transport { connect: true, .. }), "{err:?}");
}
