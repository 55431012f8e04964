//! Coop event kinds and the outbox write every state change makes.
//!
//! Events are written by the same transaction as the change they describe (the outbox), so a
//! client of the stream sees exactly the committed changes, numbered without gaps. Delivery is
//! `gateway-ws`'s business, not this module's.

use gateway_core::{Amount, CoopId, Currency, Did, Error, JsonText, Role};
use serde::Serialize;

use crate::coops::fee_percent;
use crate::governance::Outcome;
use crate::ports::{
    CoopSettings, DelegationRecord, DomainRecord, EventTx, MemberRecord, ProposalRecord, SigningKeyRecord, TaskRecord,
    TaskResult, TransactionRecord,
};

/// The detailed event kinds of the specification (`CoopEventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoopEventType {
    /// A payment or conversion was recorded.
    PaymentCreated,
    /// A member joined.
    MemberAdded,
    /// A member left or was removed.
    MemberRemoved,
    /// A member's role or credit limit changed.
    RoleUpdated,
    /// The coop's settings changed.
    SettingsUpdated,
    /// A governance domain was created.
    GovernanceDomainCreated,
    /// A governance domain's name, members, quorum or rule changed.
    GovernanceDomainUpdated,
    /// A member delegated their vote.
    DelegationCreated,
    /// A delegation was revoked.
    DelegationRevoked,
    /// The coop's receipt (and log) signing key changed: a rotation approved by the coop, or a
    /// new keystore master (not the coop's first key).
    SigningKeyRotated,
    /// A proposal was created (as a draft).
    GovernanceProposalCreated,
    /// A proposal opened for voting.
    GovernanceProposalOpened,
    /// A proposal was closed and tallied.
    GovernanceProposalClosed,
    /// A vote was cast.
    GovernanceVoteCast,
    /// A compute task was submitted.
    ComputeTaskSubmitted,
    /// An executor claimed a task.
    ComputeTaskClaimed,
    /// A task finished (success or failure).
    ComputeTaskCompleted,
    /// A task was cancelled.
    ComputeTaskCancelled,
    /// The gateway is stopping.
    Shutdown,
}

impl CoopEventType {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            CoopEventType::PaymentCreated => "PaymentCreated",
            CoopEventType::MemberAdded => "MemberAdded",
            CoopEventType::MemberRemoved => "MemberRemoved",
            CoopEventType::RoleUpdated => "RoleUpdated",
            CoopEventType::SettingsUpdated => "SettingsUpdated",
            CoopEventType::GovernanceDomainCreated => "GovernanceDomainCreated",
            CoopEventType::GovernanceDomainUpdated => "GovernanceDomainUpdated",
            CoopEventType::DelegationCreated => "DelegationCreated",
            CoopEventType::DelegationRevoked => "DelegationRevoked",
            CoopEventType::SigningKeyRotated => "SigningKeyRotated",
            CoopEventType::GovernanceProposalCreated => "GovernanceProposalCreated",
            CoopEventType::GovernanceProposalOpened => "GovernanceProposalOpened",
            CoopEventType::GovernanceProposalClosed => "GovernanceProposalClosed",
            CoopEventType::GovernanceVoteCast => "GovernanceVoteCast",
            CoopEventType::ComputeTaskSubmitted => "ComputeTaskSubmitted",
            CoopEventType::ComputeTaskClaimed => "ComputeTaskClaimed",
            CoopEventType::ComputeTaskCompleted => "ComputeTaskCompleted",
            CoopEventType::ComputeTaskCancelled => "ComputeTaskCancelled",
            CoopEventType::Shutdown => "Shutdown",
        }
    }
}

/// A change to a coop, as its event stream tells it: the kind and the data of one outbox row.
///
/// This is the one owner of the events' wire shape. Each variant borrows the record it
/// describes and serialises to the `data` object the specification gives that kind; [`emit`]
/// serialises it once, into the outbox row.
#[derive(Debug, Clone, Copy)]
pub enum CoopEvent<'a> {
    /// `PaymentCreated`: the transaction, as the ledger's history shows it.
    PaymentCreated(&'a TransactionRecord),
    /// `MemberAdded`: `{did, role, joined_at, credit_limit}`.
    MemberAdded(&'a MemberRecord),
    /// `MemberRemoved`: `{did}`.
    MemberRemoved(&'a Did),
    /// `RoleUpdated`: the member after the change.
    RoleUpdated(&'a MemberRecord),
    /// `SettingsUpdated`: the settings after the change.
    SettingsUpdated(&'a CoopSettings),
    /// `GovernanceDomainCreated`: `{domain_id, name, members}`.
    GovernanceDomainCreated(&'a DomainRecord),
    /// `GovernanceDomainUpdated`: `{domain_id, name, members, quorum_percent, rule}` after the
    /// change.
    GovernanceDomainUpdated(&'a DomainRecord),
    /// `DelegationCreated`: `{delegation_id, delegator, delegate, scope, expires_at, created_at}`.
    DelegationCreated(&'a DelegationRecord),
    /// `DelegationRevoked`: `{delegation_id, delegator}`.
    DelegationRevoked {
        /// The delegation.
        id: &'a str,
        /// Who revoked it (its delegator).
        delegator: &'a Did,
    },
    /// `SigningKeyRotated`: `{public_key, did, generation, master, valid_from}` of the new key.
    SigningKeyRotated(&'a SigningKeyRecord),
    /// `GovernanceProposalCreated`: `{proposal_id, domain_id, title, status, author}`.
    GovernanceProposalCreated(&'a ProposalRecord),
    /// `GovernanceProposalOpened`: as created, with the new status.
    GovernanceProposalOpened(&'a ProposalRecord),
    /// `GovernanceProposalClosed`: as opened, plus `outcome`, `tally` and the signed `receipt`
    /// (`null` when none could be signed).
    GovernanceProposalClosed(&'a ProposalRecord, Option<&'a serde_json::Value>),
    /// `GovernanceVoteCast`: `{proposal_id, voter, choice, replaced}`.
    GovernanceVoteCast(VoteCast<'a>),
    /// `ComputeTaskSubmitted`: `{task_id, task_hash, status, submitter, executor, result}`.
    ComputeTaskSubmitted(&'a TaskRecord),
    /// `ComputeTaskClaimed`: the task after the claim.
    ComputeTaskClaimed(&'a TaskRecord),
    /// `ComputeTaskCompleted`: the task with its result.
    ComputeTaskCompleted(&'a TaskRecord),
    /// `ComputeTaskCancelled`: the task after the cancellation.
    ComputeTaskCancelled(&'a TaskRecord),
}

/// A vote, as its event tells it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct VoteCast<'a> {
    /// The proposal voted on.
    pub proposal_id: &'a str,
    /// Who voted.
    pub voter: &'a Did,
    /// `for`, `against` or `abstain`.
    pub choice: &'static str,
    /// Whether it replaced the voter's earlier vote.
    pub replaced: bool,
}

impl CoopEvent<'_> {
    /// The event's kind.
    pub const fn kind(&self) -> CoopEventType {
        match self {
            CoopEvent::PaymentCreated(_) => CoopEventType::PaymentCreated,
            CoopEvent::MemberAdded(_) => CoopEventType::MemberAdded,
            CoopEvent::MemberRemoved(_) => CoopEventType::MemberRemoved,
            CoopEvent::RoleUpdated(_) => CoopEventType::RoleUpdated,
            CoopEvent::SettingsUpdated(_) => CoopEventType::SettingsUpdated,
            CoopEvent::GovernanceDomainCreated(_) => CoopEventType::GovernanceDomainCreated,
            CoopEvent::GovernanceDomainUpdated(_) => CoopEventType::GovernanceDomainUpdated,
            CoopEvent::DelegationCreated(_) => CoopEventType::DelegationCreated,
            CoopEvent::DelegationRevoked { .. } => CoopEventType::DelegationRevoked,
            CoopEvent::SigningKeyRotated(_) => CoopEventType::SigningKeyRotated,
            CoopEvent::GovernanceProposalCreated(_) => CoopEventType::GovernanceProposalCreated,
            CoopEvent::GovernanceProposalOpened(_) => CoopEventType::GovernanceProposalOpened,
            CoopEvent::GovernanceProposalClosed(..) => CoopEventType::GovernanceProposalClosed,
            CoopEvent::GovernanceVoteCast(_) => CoopEventType::GovernanceVoteCast,
            CoopEvent::ComputeTaskSubmitted(_) => CoopEventType::ComputeTaskSubmitted,
            CoopEvent::ComputeTaskClaimed(_) => CoopEventType::ComputeTaskClaimed,
            CoopEvent::ComputeTaskCompleted(_) => CoopEventType::ComputeTaskCompleted,
            CoopEvent::ComputeTaskCancelled(_) => CoopEventType::ComputeTaskCancelled,
        }
    }

    /// The event's `data` object, as its exact text.
    pub fn data(&self) -> Result<JsonText, Error> {
        JsonText::of(self).map_err(|e| Error::Internal(format!("event data: {e}")))
    }
}

impl Serialize for CoopEvent<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match *self {
            CoopEvent::PaymentCreated(t) => PaymentData::from(t).serialize(serializer),
            CoopEvent::MemberAdded(m) | CoopEvent::RoleUpdated(m) => MemberData::from(m).serialize(serializer),
            CoopEvent::MemberRemoved(did) => MemberRemovedData { did }.serialize(serializer),
            CoopEvent::SettingsUpdated(s) => SettingsData::from(s).serialize(serializer),
            CoopEvent::GovernanceDomainCreated(d) => {
                DomainData { domain_id: &d.domain_id, name: &d.name, members: &d.members }.serialize(serializer)
            }
            CoopEvent::GovernanceProposalCreated(p) | CoopEvent::GovernanceProposalOpened(p) => {
                ProposalData::from(p).serialize(serializer)
            }
            CoopEvent::GovernanceProposalClosed(p, receipt) => ClosedProposalData {
                proposal: ProposalData::from(p),
                outcome: p.outcome.map(Outcome::as_str),
                tally: p.tally.map(|(for_, against, abstain)| TallyData { for_, against, abstain }),
                receipt,
            }
            .serialize(serializer),
            CoopEvent::GovernanceDomainUpdated(d) => DomainUpdatedData {
                domain_id: &d.domain_id,
                name: &d.name,
                members: &d.members,
                quorum_percent: d.quorum_percent,
                rule: d.rule.as_deref(),
            }
            .serialize(serializer),
            CoopEvent::DelegationCreated(d) => DelegationData {
                delegation_id: &d.id,
                delegator: &d.delegator,
                delegate: &d.delegate,
                scope: &d.scope,
                expires_at: d.expires_at,
                created_at: d.created_at,
            }
            .serialize(serializer),
            CoopEvent::DelegationRevoked { id, delegator } => {
                DelegationRevokedData { delegation_id: id, delegator }.serialize(serializer)
            }
            CoopEvent::SigningKeyRotated(k) => KeyData {
                public_key: &k.public_key,
                did: &k.did,
                generation: k.generation,
                master: k.master,
                valid_from: k.valid_from,
            }
            .serialize(serializer),
            CoopEvent::GovernanceVoteCast(vote) => vote.serialize(serializer),
            CoopEvent::ComputeTaskSubmitted(t)
            | CoopEvent::ComputeTaskClaimed(t)
            | CoopEvent::ComputeTaskCompleted(t)
            | CoopEvent::ComputeTaskCancelled(t) => TaskData::from(t).serialize(serializer),
        }
    }
}

#[derive(Serialize)]
struct DomainUpdatedData<'a> {
    domain_id: &'a str,
    name: &'a str,
    members: &'a [Did],
    quorum_percent: Option<u32>,
    rule: Option<&'a str>,
}

#[derive(Serialize)]
struct DelegationData<'a> {
    delegation_id: &'a str,
    delegator: &'a Did,
    delegate: &'a Did,
    scope: &'a str,
    expires_at: Option<u64>,
    created_at: u64,
}

#[derive(Serialize)]
struct DelegationRevokedData<'a> {
    delegation_id: &'a str,
    delegator: &'a Did,
}

#[derive(Serialize)]
struct KeyData<'a> {
    public_key: &'a str,
    did: &'a str,
    generation: Option<u32>,
    master: Option<u32>,
    valid_from: u64,
}

/// A transaction: the same fields, in the same spelling, as the ledger's API answers.
#[derive(Serialize)]
struct PaymentData<'a> {
    id: &'a str,
    kind: &'static str,
    from: &'a str,
    to: &'a str,
    amount: Amount,
    currency: &'a Currency,
    memo: Option<&'a str>,
    timestamp: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    to_currency: Option<&'a Currency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<Amount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gross_target_amount: Option<Amount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fee_amount: Option<Amount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    net_target_amount: Option<Amount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    batch_id: Option<&'a str>,
    /// The evidence without its `body`: a signed batch's body would travel once per payment
    /// (up to a mebibyte in each of a thousand frames); the history item serves it.
    #[serde(skip_serializing_if = "Option::is_none")]
    request_signature: Option<gateway_core::EvidenceWithoutBody<'a>>,
}

impl<'a> From<&'a TransactionRecord> for PaymentData<'a> {
    fn from(t: &'a TransactionRecord) -> Self {
        let leg = t.conversion.as_ref();
        Self {
            id: &t.id,
            kind: t.kind.as_str(),
            from: &t.from,
            to: &t.to,
            amount: t.amount,
            currency: &t.currency,
            memo: t.memo.as_deref(),
            timestamp: t.timestamp,
            to_currency: leg.map(|l| &l.to_currency),
            rate: leg.map(|l| l.rate),
            gross_target_amount: leg.map(|l| l.gross_target_amount),
            fee_amount: leg.map(|l| l.fee_amount),
            net_target_amount: leg.map(|l| l.net_target_amount),
            batch_id: t.batch_id.as_deref(),
            request_signature: t.request_signature.as_ref().map(gateway_core::RequestSignature::without_body),
        }
    }
}

#[derive(Serialize)]
struct MemberData<'a> {
    did: &'a Did,
    role: Role,
    joined_at: u64,
    credit_limit: Option<Amount>,
}

impl<'a> From<&'a MemberRecord> for MemberData<'a> {
    fn from(m: &'a MemberRecord) -> Self {
        Self { did: &m.did, role: m.role, joined_at: m.joined_at, credit_limit: m.credit_limit }
    }
}

#[derive(Serialize)]
struct MemberRemovedData<'a> {
    did: &'a Did,
}

/// The settings as events (and the log's `LogOpened`) carry them.
#[derive(Debug, Serialize)]
pub(crate) struct SettingsData<'a> {
    default_currency: &'a Currency,
    credit_limit: Amount,
    high_value_threshold: Amount,
    conversion_fee_percent: Amount,
    quorum_percent: u32,
    require_signed_requests: bool,
}

impl<'a> From<&'a CoopSettings> for SettingsData<'a> {
    fn from(s: &'a CoopSettings) -> Self {
        Self {
            default_currency: &s.default_currency,
            credit_limit: s.credit_limit,
            high_value_threshold: s.high_value_threshold,
            conversion_fee_percent: fee_percent(s.conversion_fee_ppm),
            quorum_percent: s.quorum_percent,
            require_signed_requests: s.require_signed_requests,
        }
    }
}

#[derive(Serialize)]
struct DomainData<'a> {
    domain_id: &'a str,
    name: &'a str,
    members: &'a [Did],
}

#[derive(Serialize)]
struct ProposalData<'a> {
    proposal_id: &'a str,
    domain_id: &'a str,
    title: &'a str,
    status: &'static str,
    author: &'a Did,
}

impl<'a> From<&'a ProposalRecord> for ProposalData<'a> {
    fn from(p: &'a ProposalRecord) -> Self {
        Self {
            proposal_id: &p.id,
            domain_id: &p.domain_id,
            title: &p.title,
            status: p.status.as_str(),
            author: &p.author,
        }
    }
}

#[derive(Serialize)]
struct ClosedProposalData<'a> {
    #[serde(flatten)]
    proposal: ProposalData<'a>,
    outcome: Option<&'static str>,
    tally: Option<TallyData>,
    /// The signed receipt, as `GET …/proof` serves it.
    receipt: Option<&'a serde_json::Value>,
}

#[derive(Serialize)]
struct TallyData {
    #[serde(rename = "for")]
    for_: u64,
    against: u64,
    abstain: u64,
}

#[derive(Serialize)]
struct TaskData<'a> {
    task_id: &'a str,
    task_hash: &'a str,
    status: &'static str,
    submitter: &'a Did,
    executor: Option<&'a str>,
    result: Option<&'a TaskResult>,
}

impl<'a> From<&'a TaskRecord> for TaskData<'a> {
    fn from(t: &'a TaskRecord) -> Self {
        Self {
            task_id: &t.task_id,
            task_hash: &t.task_hash,
            status: t.status.as_str(),
            submitter: &t.submitter,
            executor: t.executor.as_deref(),
            result: t.result.as_ref(),
        }
    }
}

/// Appends an event to the coop's outbox within the transaction.
pub async fn emit<T: EventTx + ?Sized>(
    tx: &mut T,
    coop: &CoopId,
    timestamp: u64,
    event: CoopEvent<'_>,
) -> Result<(), Error> {
    tx.append_event(coop, event.kind().as_str(), timestamp, &event.data()?).await
}

/// A new 128-bit identifier as 32 hex digits: the creation time in milliseconds (48 bits) and
/// then 80 random bits. Ids made later sort later, so each insert lands at the right edge of
/// the id's index instead of on a random page of it (a payment writes two such ids), and 80
/// random bits keep them unguessable.
pub fn new_id() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    id_at(millis, rand::random())
}

fn id_at(millis: u64, random: [u8; 10]) -> String {
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6..].copy_from_slice(&random);
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::governance::{ProposalPayload, ProposalStatus};
    use crate::ports::{ConversionLeg, TaskOutcome, TaskStatus, TransactionKind};

    const ALICE: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

    /// The event's data, parsed for comparison.
    fn value(event: CoopEvent<'_>) -> Value {
        serde_json::from_str(event.data().unwrap().as_str()).unwrap()
    }

    fn did() -> Did {
        Did::parse(ALICE).unwrap()
    }

    fn amount(text: &str) -> Amount {
        Amount::parse_decimal(text).unwrap()
    }

    fn payment() -> TransactionRecord {
        TransactionRecord {
            id: "t1".into(),
            coop_id: CoopId::parse("c").unwrap(),
            kind: TransactionKind::Payment,
            from: ALICE.into(),
            to: "did:key:bob".into(),
            amount: amount("12.5"),
            currency: Currency::parse("hours").unwrap(),
            memo: None,
            timestamp: 7,
            conversion: None,
            request_signature: None,
            batch_id: None,
        }
    }

    fn proposal() -> ProposalRecord {
        ProposalRecord {
            id: "p1".into(),
            coop_id: CoopId::parse("c").unwrap(),
            domain_id: "coop".into(),
            title: "Paint".into(),
            description: String::new(),
            payload: ProposalPayload::SigningKeyRotation,
            rule: "majority".into(),
            author: did(),
            status: ProposalStatus::Closed,
            voting_duration_secs: 60,
            created_at: 1,
            opened_at: Some(2),
            closes_at: Some(62),
            closed_at: Some(62),
            outcome: Some(Outcome::Approved),
            tally: Some((3, 1, 0)),
            receipt_unavailable: None,
            effect: None,
        }
    }

    #[test]
    fn a_payment_event_is_the_transaction_and_a_conversion_adds_its_leg() {
        let plain = payment();
        let event = CoopEvent::PaymentCreated(&plain);
        assert_eq!(event.kind(), CoopEventType::PaymentCreated);
        assert_eq!(
            value(event),
            json!({"id": "t1", "kind": "payment", "from": ALICE, "to": "did:key:bob", "amount": 12.5,
                   "currency": "hours", "memo": null, "timestamp": 7})
        );
        let converted = TransactionRecord {
            kind: TransactionKind::Conversion,
            conversion: Some(ConversionLeg {
                to_currency: Currency::parse("eur").unwrap(),
                rate: amount("2"),
                gross_target_amount: amount("25"),
                fee_amount: amount("0.25"),
                net_target_amount: amount("24.75"),
            }),
            ..plain
        };
        let data = value(CoopEvent::PaymentCreated(&converted));
        assert_eq!(data["kind"], "conversion");
        assert_eq!(data["to_currency"], "eur");
        assert_eq!(data["net_target_amount"], json!(24.75));
        // Exact decimals: the text of the number is the amount's, not an f64's.
        let text = serde_json::to_string(&CoopEvent::PaymentCreated(&converted)).unwrap();
        assert!(text.contains(r#""fee_amount":0.25"#), "{text}");
        // The largest payment keeps every digit (18 of them; an f64 holds about 16).
        let largest = TransactionRecord { amount: Amount::parse_payment("999999999999.999999").unwrap(), ..payment() };
        let data = CoopEvent::PaymentCreated(&largest).data().unwrap();
        assert!(data.as_str().contains(r#""amount":999999999999.999999"#), "{data}");
    }

    /// A signed payment's event carries its evidence without the signed body (INTERFACE.md §11):
    /// the history item serves the body, a frame never carries it.
    #[test]
    fn a_signed_payment_event_carries_its_evidence_without_the_body() {
        let evidence = gateway_core::RequestSignature {
            signature_input: "sig1=();created=1".into(),
            signature: "sig1=:AAAA:".into(),
            content_digest: Some("sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:".into()),
            method: "POST".into(),
            authority: "gateway.example".into(),
            path: "/v1/ledger/c/payments/batch".into(),
            query: None,
            body: Some("eyJoZWxsbyI6ICJ3b3JsZCJ9".repeat(1000).into()),
        };
        let signed = TransactionRecord { request_signature: Some(evidence.clone()), ..payment() };
        let data = value(CoopEvent::PaymentCreated(&signed));
        assert_eq!(
            data["request_signature"],
            json!({"signature_input": "sig1=();created=1", "signature": "sig1=:AAAA:",
                   "content_digest": "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:",
                   "method": "POST", "authority": "gateway.example", "path": "/v1/ledger/c/payments/batch"})
        );
        let read: gateway_core::RequestSignature = serde_json::from_value(data["request_signature"].clone()).unwrap();
        assert_eq!(read, gateway_core::RequestSignature { body: None, ..evidence });
    }

    #[test]
    fn member_settings_and_removal_events_carry_their_fields() {
        let member = MemberRecord { did: did(), role: Role::Admin, joined_at: 5, credit_limit: Some(amount("-10")) };
        let expected = json!({"did": ALICE, "role": "admin", "joined_at": 5, "credit_limit": -10});
        assert_eq!(value(CoopEvent::MemberAdded(&member)), expected);
        assert_eq!(value(CoopEvent::RoleUpdated(&member)), expected);
        assert_eq!(CoopEvent::RoleUpdated(&member).kind(), CoopEventType::RoleUpdated);
        assert_eq!(value(CoopEvent::MemberRemoved(&member.did)), json!({"did": ALICE}));
        let settings = CoopSettings { conversion_fee_ppm: 12_345, ..CoopSettings::default() };
        let data = value(CoopEvent::SettingsUpdated(&settings));
        assert_eq!(data["conversion_fee_percent"], json!(1.2345));
        assert_eq!(data["default_currency"], "hours");
        let mut keys: Vec<&str> = data.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "conversion_fee_percent",
                "credit_limit",
                "default_currency",
                "high_value_threshold",
                "quorum_percent",
                "require_signed_requests"
            ]
        );
    }

    #[test]
    fn governance_events_carry_their_fields() {
        let domain = DomainRecord {
            coop_id: CoopId::parse("c").unwrap(),
            domain_id: "tech".into(),
            name: "Tech".into(),
            members: vec![did()],
            quorum_percent: None,
            rule: None,
            created_at: 1,
        };
        assert_eq!(
            value(CoopEvent::GovernanceDomainCreated(&domain)),
            json!({"domain_id": "tech", "name": "Tech", "members": [ALICE]})
        );
        let closed = proposal();
        let header =
            json!({"proposal_id": "p1", "domain_id": "coop", "title": "Paint", "status": "closed", "author": ALICE});
        assert_eq!(value(CoopEvent::GovernanceProposalOpened(&closed)), header);
        let mut with_result = header.clone();
        with_result["outcome"] = json!("Approved");
        with_result["tally"] = json!({"for": 3, "against": 1, "abstain": 0});
        with_result["receipt"] = json!(null);
        assert_eq!(value(CoopEvent::GovernanceProposalClosed(&closed, None)), with_result);
        let receipt = json!({"proposal_id": "p1", "signature": "0xab"});
        with_result["receipt"] = receipt.clone();
        assert_eq!(value(CoopEvent::GovernanceProposalClosed(&closed, Some(&receipt))), with_result);
        let updated = DomainRecord { quorum_percent: Some(60), rule: Some("majority".into()), ..domain.clone() };
        assert_eq!(
            value(CoopEvent::GovernanceDomainUpdated(&updated)),
            json!({"domain_id": "tech", "name": "Tech", "members": [ALICE], "quorum_percent": 60, "rule": "majority"})
        );
        let voter = did();
        let vote = VoteCast { proposal_id: "p1", voter: &voter, choice: "for", replaced: true };
        assert_eq!(
            value(CoopEvent::GovernanceVoteCast(vote)),
            json!({"proposal_id": "p1", "voter": ALICE, "choice": "for", "replaced": true})
        );
    }

    #[test]
    fn task_events_carry_the_status_and_result() {
        let task = TaskRecord {
            task_id: "k1".into(),
            coop_id: CoopId::parse("c").unwrap(),
            task_hash: "ab".into(),
            status: TaskStatus::Completed,
            submitter: did(),
            executor: Some("did:key:exec".into()),
            code_type: "ccl".into(),
            code: String::new(),
            inputs: json!({}),
            fuel_limit: 10,
            priority: "normal".into(),
            submitted_at: 1,
            claimed_at: Some(2),
            deadline: None,
            attempts: 1,
            finished_at: Some(3),
            result: Some(TaskResult { outcome: TaskOutcome::Success, output: json!(4), error: None, fuel_used: 2 }),
        };
        let data = value(CoopEvent::ComputeTaskCompleted(&task));
        assert_eq!(data["status"], "completed");
        assert_eq!(data["executor"], "did:key:exec");
        assert_eq!(data["result"]["output"], json!(4));
        let mut keys: Vec<&str> = data.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["executor", "result", "status", "submitter", "task_hash", "task_id"]);
    }

    #[test]
    fn ids_are_32_hex_digits_led_by_the_time() {
        let id = id_at(0x0123_4567_89ab, [0xff; 10]);
        assert_eq!(id, "0123456789abffffffffffffffffffff");
        let fresh = new_id();
        assert_eq!(fresh.len(), 32);
        assert!(fresh.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }

    #[test]
    fn later_ids_sort_after_earlier_ones() {
        assert!(id_at(1_000, [0xff; 10]) < id_at(1_001, [0; 10]));
        let (first, second) = (new_id(), new_id());
        assert_ne!(first, second);
        assert!(first[..12] <= second[..12]);
    }
}
