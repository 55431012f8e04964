//! The SDK end to end against a running gateway: found a cooperative, add a second member, pay
//! them, and see the payment arrive on the cooperative's event stream.
//!
//! Start a gateway as in the README (no `--dev` or `--open-enrollment` is needed), then:
//!
//! ```sh
//! cargo run -p gateway-client --example quickstart -- http://127.0.0.1:8080 bakery
//! # or with a founder key you already have (as `gatewayctl key generate` writes it):
//! cargo run -p gateway-client --example quickstart -- http://127.0.0.1:8080 bakery ~/.config/gatewayctl/key.json
//! ```
//!
//! What it does, in the order a new cooperative needs it:
//!
//! 1. logs the founder in with [`BOOTSTRAP_SCOPES`] (`coop:read`, `coop:write`), the only scopes a
//!    login may ask for in a cooperative that does not exist yet;
//! 2. creates the cooperative, which makes the founder its first admin (a `CONFLICT` means it
//!    exists already; then the founder is its admin, or the bootstrap login would have been
//!    refused);
//! 3. logs in again with every scope ([`Scope::ALL`]), as an admin may;
//! 4. generates a second member's key and adds it (a payee must be a member; it need not log in);
//! 5. subscribes to the cooperative's events, pays the member 2.5 with a memo, prints the
//!    `PaymentCreated` event of that payment and exits.
//!
//! No trust is needed: only payments at or above the cooperative's high-value threshold (default
//! 1000) are gated on trust. The founder is a fresh key unless a key file is given, and a fresh
//! key is not a member of a cooperative an earlier run created: use a new cooperative id each
//! run, or pass the founder's key file.

use std::error::Error as StdError;
use std::process::ExitCode;
use std::time::Duration;

use gateway_client::{
    BOOTSTRAP_SCOPES, Client, Error, Identity, KeyFile, NewCoop, PaymentRequest, StreamItem, SubscribeOptions,
    Subscription,
};
use gateway_core::{Amount, CoopId, Scope};
use tokio::time::Instant;

/// How long to wait for the event stream to connect, and then for the payment's event.
const WAIT: Duration = Duration::from_secs(15);

type Failure = Box<dyn StdError>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Failure> {
    let mut args = std::env::args().skip(1);
    let (Some(url), Some(coop_text)) = (args.next(), args.next()) else {
        return Err("usage: quickstart <gateway url> <cooperative id> [founder key file]".into());
    };
    let coop = CoopId::parse(&coop_text).map_err(|why| format!("invalid cooperative id '{coop_text}': {why}"))?;
    let founder = match args.next() {
        Some(path) => load_key(&path)?,
        None => Identity::generate(),
    };
    let client = Client::new(&url)?;
    println!("founder  {}", founder.did());

    // 1. A cooperative that does not exist yet grants only coop:read and coop:write.
    if let Err(error) = client.login(founder.clone(), coop.clone(), &BOOTSTRAP_SCOPES).await {
        if matches!(error, Error::Authorization { .. }) {
            return Err(format!(
                "{error}\n  '{coop}' exists and this key is not its admin: choose a new cooperative id, or pass the founder's key file"
            )
            .into());
        }
        return Err(error.into());
    }

    // 2. Create it; the creator becomes its first admin.
    let new_coop = NewCoop {
        id: Some(coop.to_string()),
        name: format!("Quickstart {coop}"),
        coop_type: "worker".into(),
        description: "created by the gateway-client quickstart example".into(),
    };
    match client.create_coop(&new_coop).await {
        Ok(created) => println!("created cooperative {} ({}); the founder is its admin", created.id, created.name),
        Err(Error::Conflict { code, .. }) if code == "CONFLICT" => {
            println!("cooperative {coop} exists already; the founder is its admin")
        }
        Err(other) => return Err(other.into()),
    }

    // 3. Now an admin: every scope. The client renews this token by itself before it expires.
    let session = client.login(founder.clone(), coop.clone(), &Scope::ALL).await?;
    println!("logged in with {}", session.scopes.join(", "));

    // 4. A second member: a fresh key, added by the admin.
    let member = Identity::generate();
    let added = client.add_member(&coop, member.did(), None).await?;
    println!("added    {} as {}", added.did, added.role);

    // 5. Subscribe first: without `after_seq` the stream starts where it connects, so an event
    //    emitted before the connection would not be delivered.
    let mut events = client.subscribe(&coop, SubscribeOptions::default());
    let deadline = Instant::now() + WAIT;
    loop {
        if let StreamItem::Connected { current_seq, .. } = next_item(&mut events, deadline, "connection").await? {
            println!("following the events of {coop} (at #{current_seq})");
            break;
        }
    }

    let payment = PaymentRequest {
        from: founder.did().clone(),
        to: member.did().clone(),
        amount: Amount::parse_payment("2.5")?,
        currency: None, // the cooperative's default currency
        memo: Some("bread".into()),
    };
    // The same Idempotency-Key within 24 h is paid once, which also makes the call safe to retry.
    let idempotency_key = format!("quickstart-{}", member.did());
    let transaction = client.pay(&coop, &payment, Some(idempotency_key.as_str())).await?;
    println!(
        "paid {} in {} to {} (transaction {})",
        transaction.amount, transaction.currency, transaction.to, transaction.id
    );

    let deadline = Instant::now() + WAIT;
    loop {
        if let StreamItem::Event(event) = next_item(&mut events, deadline, "PaymentCreated event").await? {
            // `data` is the exact text the gateway sent; `to_value` is enough to read the id.
            let id = event.data.to_value().get("id").and_then(|id| id.as_str()).map(str::to_owned);
            if event.event_type == "PaymentCreated" && id.as_deref() == Some(transaction.id.as_str()) {
                println!("event    #{} {} {}", event.seq, event.event_type, event.data);
                break;
            }
        }
    }
    events.close();
    Ok(())
}

/// The next item of the stream before `deadline`; the subscriber's own failure, its end or the
/// deadline are errors.
async fn next_item(events: &mut Subscription, deadline: Instant, waiting_for: &str) -> Result<StreamItem, Failure> {
    match tokio::time::timeout_at(deadline, events.next()).await {
        Ok(Some(StreamItem::Failed(error))) => Err(error.into()),
        Ok(Some(item)) => Ok(item),
        Ok(None) => Err(format!("the event stream ended before the {waiting_for}").into()),
        Err(_) => Err(format!("no {waiting_for} within {} s", WAIT.as_secs()).into()),
    }
}

/// An identity from a key file in the format `gatewayctl key generate` writes.
fn load_key(path: &str) -> Result<Identity, Failure> {
    let text = std::fs::read_to_string(path).map_err(|why| format!("cannot read {path}: {why}"))?;
    let file: KeyFile = serde_json::from_str(&text).map_err(|why| format!("{path} is not a key file: {why}"))?;
    Ok(Identity::from_key_file(&file)?)
}
