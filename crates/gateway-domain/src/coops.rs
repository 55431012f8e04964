//! Cooperatives and their members: creation, membership, roles, settings, statistics.
//!
//! Every change writes its event (`MemberAdded`, `MemberRemoved`, `RoleUpdated`,
//! `SettingsUpdated`) and notifications in the same transaction. Authorization by scope and
//! cooperative is the caller's job (the HTTP layer's extractors); the rules that depend on the
//! coop's state (last admin, duplicates) are here.

use std::sync::Arc;

use gateway_core::{Amount, Clock, CoopId, Currency, Did, Error, PageRequest, Role};

use crate::events::{CoopEvent, emit};
use crate::governance::COOP_DOMAIN;
use crate::notifications::{Note, NoteData, notify};
use crate::ports::{
    CoopReads, CoopRecord, CoopSettings, CoopTx, DomainRecord, EventTx, GovTx, LedgerReads, MemberRecord,
    MembershipObserver, NotificationTx, Transactor, transaction, unsigned,
};

/// A request to create a coop.
#[derive(Debug, Clone)]
pub struct NewCoop {
    /// The id; `None` means the token's coop.
    pub id: Option<CoopId>,
    /// Display name.
    pub name: String,
    /// Kind, e.g. `worker`.
    pub coop_type: String,
    /// Free text.
    pub description: String,
}

/// A partial settings update: `None` keeps the current value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettingsPatch {
    /// New default currency.
    pub default_currency: Option<Currency>,
    /// New default credit limit (zero or negative).
    pub credit_limit: Option<Amount>,
    /// New high-value threshold.
    pub high_value_threshold: Option<Amount>,
    /// New conversion fee in ppm.
    pub conversion_fee_ppm: Option<u32>,
    /// New quorum percent.
    pub quorum_percent: Option<u32>,
    /// Whether critical operations need a request signature from now on.
    pub require_signed_requests: Option<bool>,
}

impl SettingsPatch {
    /// The wire names of the settings, as `PUT /v1/coops/{id}/settings` takes them.
    pub const KEYS: [&'static str; 6] = [
        "default_currency",
        "credit_limit",
        "high_value_threshold",
        "conversion_fee_percent",
        "quorum_percent",
        "require_signed_requests",
    ];

    /// Parses and validates the wire form: the body of `PUT /v1/coops/{id}/settings` and the
    /// `settings` of a settings proposal go through this one function. Absent and `null` fields
    /// keep their value; other keys are ignored (the proposal path refuses them itself); a bad
    /// value is 400 naming its field.
    pub fn from_wire(map: &serde_json::Map<String, serde_json::Value>) -> Result<Self, Error> {
        let field = |name: &str| map.get(name).filter(|v| !v.is_null());
        let amount = |name: &str| -> Result<Option<Amount>, Error> {
            field(name)
                .map(|v| {
                    if !v.is_number() {
                        return Err(Error::bad_request_field(name, format!("{name} must be a JSON number")));
                    }
                    Amount::parse_decimal(&v.to_string())
                        .map_err(|e| Error::bad_request_field(name, format!("{name}: {e}")))
                })
                .transpose()
        };
        let default_currency = field("default_currency")
            .map(|v| {
                let text = v
                    .as_str()
                    .ok_or_else(|| Error::bad_request_field("default_currency", "default_currency must be a string"))?;
                Currency::parse(text)
                    .map_err(|e| Error::bad_request_field("default_currency", format!("default_currency: {e}")))
            })
            .transpose()?;
        let conversion_fee_ppm = amount("conversion_fee_percent")?
            .map(|percent| {
                // percent × 10^4 = ppm; Amount micros = percent × 10^6, so ppm = micros / 100.
                let micros = percent.micros();
                if micros < 0 || micros % 100 != 0 || micros > 100_000_000 {
                    return Err(Error::bad_request_field(
                        "conversion_fee_percent",
                        "conversion_fee_percent is 0 to 100 with at most 4 decimals",
                    ));
                }
                Ok(u32::try_from(micros / 100).unwrap_or(u32::MAX))
            })
            .transpose()?;
        let quorum_percent = field("quorum_percent")
            .map(|v| {
                v.as_u64()
                    .and_then(|q| u32::try_from(q).ok())
                    .ok_or_else(|| Error::bad_request_field("quorum_percent", "quorum_percent is 0 to 100"))
            })
            .transpose()?;
        let require_signed_requests = field("require_signed_requests")
            .map(|v| {
                v.as_bool().ok_or_else(|| {
                    Error::bad_request_field("require_signed_requests", "require_signed_requests must be true or false")
                })
            })
            .transpose()?;
        let patch = SettingsPatch {
            default_currency,
            credit_limit: amount("credit_limit")?,
            high_value_threshold: amount("high_value_threshold")?,
            conversion_fee_ppm,
            quorum_percent,
            require_signed_requests,
        };
        patch.validate()?;
        Ok(patch)
    }

    /// The rules every settings change obeys, whoever makes it.
    pub fn validate(&self) -> Result<(), Error> {
        if self.credit_limit.is_some_and(|l| l.micros() > 0) {
            return Err(Error::bad_request_field("credit_limit", "credit_limit is a floor: zero or negative"));
        }
        if self.high_value_threshold.is_some_and(|t| t.micros() <= 0) {
            return Err(Error::bad_request_field("high_value_threshold", "high_value_threshold must be positive"));
        }
        if self.quorum_percent.is_some_and(|q| q > 100) {
            return Err(Error::bad_request_field("quorum_percent", "quorum_percent is 0 to 100"));
        }
        if self.conversion_fee_ppm.is_some_and(|f| f > 1_000_000) {
            return Err(Error::bad_request_field("conversion_fee_percent", "conversion_fee_percent is 0 to 100"));
        }
        Ok(())
    }

    /// The wire form of the fields it changes.
    pub fn to_wire(&self) -> serde_json::Map<String, serde_json::Value> {
        /// The fields it changes, in their wire spelling.
        #[derive(serde::Serialize)]
        struct Wire<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            default_currency: Option<&'a Currency>,
            #[serde(skip_serializing_if = "Option::is_none")]
            credit_limit: Option<Amount>,
            #[serde(skip_serializing_if = "Option::is_none")]
            high_value_threshold: Option<Amount>,
            #[serde(skip_serializing_if = "Option::is_none")]
            conversion_fee_percent: Option<Amount>,
            #[serde(skip_serializing_if = "Option::is_none")]
            quorum_percent: Option<u32>,
            #[serde(skip_serializing_if = "Option::is_none")]
            require_signed_requests: Option<bool>,
        }
        let wire = Wire {
            default_currency: self.default_currency.as_ref(),
            credit_limit: self.credit_limit,
            high_value_threshold: self.high_value_threshold,
            conversion_fee_percent: self.conversion_fee_ppm.map(fee_percent),
            quorum_percent: self.quorum_percent,
            require_signed_requests: self.require_signed_requests,
        };
        // A struct of strings, integers and exact decimals always serialises to an object.
        match serde_json::to_value(wire) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        }
    }

    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.default_currency.is_none()
            && self.credit_limit.is_none()
            && self.high_value_threshold.is_none()
            && self.conversion_fee_ppm.is_none()
            && self.quorum_percent.is_none()
            && self.require_signed_requests.is_none()
    }

    /// The settings after the change.
    pub fn apply(&self, mut settings: CoopSettings) -> CoopSettings {
        if let Some(v) = &self.default_currency {
            settings.default_currency = v.clone();
        }
        if let Some(v) = self.credit_limit {
            settings.credit_limit = v;
        }
        if let Some(v) = self.high_value_threshold {
            settings.high_value_threshold = v;
        }
        if let Some(v) = self.conversion_fee_ppm {
            settings.conversion_fee_ppm = v;
        }
        if let Some(v) = self.quorum_percent {
            settings.quorum_percent = v;
        }
        if let Some(v) = self.require_signed_requests {
            settings.require_signed_requests = v;
        }
        settings
    }
}

/// The built-in domain of a coop as stored: its members are not stored, they are the coop's.
pub fn coop_domain(coop: &CoopId, now: u64) -> DomainRecord {
    DomainRecord {
        coop_id: coop.clone(),
        domain_id: COOP_DOMAIN.to_owned(),
        name: "All members".to_owned(),
        members: Vec::new(),
        quorum_percent: None,
        rule: None,
        created_at: now,
    }
}

/// Adds a member in the transaction (409 if already one), emits `MemberAdded` and tells them.
pub async fn add_member_in<T: CoopTx + EventTx + NotificationTx + ?Sized>(
    tx: &mut T,
    coop: &CoopId,
    member: &MemberRecord,
    now: u64,
) -> Result<(), Error> {
    let record = lock_coop(tx, coop).await?;
    if tx.member(coop, &member.did).await?.is_some() {
        return Err(Error::conflict(format!("{} is already a member of '{coop}'", member.did)));
    }
    tx.insert_member(coop, member).await?;
    emit(tx, coop, now, CoopEvent::MemberAdded(member)).await?;
    let note = Note {
        title: format!("Welcome to {}", record.name),
        body: format!("You were added to cooperative '{coop}' as {}.", member.role.as_str()),
        data: NoteData::MemberAdded { coop_id: coop.clone(), role: member.role },
    };
    notify(tx, &member.did, coop, note, now).await
}

/// Removes a member in the transaction, everywhere at once (the coop, its domains, the
/// delegations given or received in it), and emits `MemberRemoved`. 404 for a non-member, 409
/// for the last admin; every check comes before the first write.
pub async fn remove_member_in<T: CoopTx + GovTx + EventTx + ?Sized>(
    tx: &mut T,
    coop: &CoopId,
    did: &Did,
    now: u64,
) -> Result<(), Error> {
    // Held until the transaction ends: a concurrent removal or demotion of another admin waits
    // here, then counts the admins this one left.
    lock_coop(tx, coop).await?;
    let member = tx.member(coop, did).await?.ok_or_else(|| Error::not_found("member", did.as_str()))?;
    if member.role == Role::Admin && tx.count_admins(coop).await? <= 1 {
        return Err(Error::conflict("the last admin of a cooperative cannot be removed"));
    }
    tx.delete_member(coop, did).await?;
    for mut domain in tx.domains(coop).await? {
        if domain.domain_id != COOP_DOMAIN && domain.members.contains(did) {
            domain.members.retain(|m| m != did);
            tx.update_domain(&domain).await?;
        }
    }
    tx.delete_delegations_involving(coop, did).await?;
    emit(tx, coop, now, CoopEvent::MemberRemoved(did)).await.map(drop)
}

/// Applies a validated settings change in the transaction and emits `SettingsUpdated`.
pub async fn update_settings_in<T: CoopTx + EventTx + ?Sized>(
    tx: &mut T,
    coop: &CoopId,
    patch: &SettingsPatch,
    now: u64,
) -> Result<CoopRecord, Error> {
    patch.validate()?;
    // Under the coop's row lock: two changes of its settings apply one after the other, each to
    // the settings the other left, and the rule on signatures it is judged by is the latest.
    let mut record = lock_coop(tx, coop).await?;
    record.settings = patch.apply(record.settings);
    tx.update_settings(coop, &record.settings).await?;
    emit(tx, coop, now, CoopEvent::SettingsUpdated(&record.settings)).await?;
    Ok(record)
}

/// Public statistics of a coop.
#[derive(Debug, Clone)]
pub struct CoopStats {
    /// The coop.
    pub coop: CoopRecord,
    /// Ledger transactions recorded.
    pub transaction_count: u64,
    /// Currencies in use.
    pub currencies: Vec<Currency>,
}

/// The cooperative service.
#[derive(Debug, Clone)]
pub struct Coops {
    transactor: Arc<dyn Transactor>,
    reads: Arc<dyn CoopReads>,
    ledger_reads: Arc<dyn LedgerReads>,
    clock: Arc<dyn Clock>,
    observer: Option<Arc<dyn MembershipObserver>>,
}

/// The coop, or `NOT_FOUND`; `signature_required` for an unsigned critical operation in a coop
/// that requires signed requests ([`crate::ports::unsigned`]).
pub async fn require_coop<T: CoopTx + ?Sized>(tx: &mut T, id: &CoopId) -> Result<CoopRecord, Error> {
    unsigned::permit(tx.coop(id).await?.ok_or_else(|| Error::not_found("coop", id.as_str()))?)
}

/// The coop, or `NOT_FOUND`, holding its row until the transaction ends: every change of who
/// belongs to the coop or in which role takes it first, so that the last-admin rule holds
/// under concurrent changes. Payments never take it. Refuses as [`require_coop`] does.
pub async fn lock_coop<T: CoopTx + ?Sized>(tx: &mut T, id: &CoopId) -> Result<CoopRecord, Error> {
    unsigned::permit(tx.lock_coop(id).await?.ok_or_else(|| Error::not_found("coop", id.as_str()))?)
}

/// For a critical operation whose unit of work reads no coop record: refuses it when it is
/// unsigned and the coop requires signed requests, reading the coop only then.
pub async fn require_signature<T: CoopTx + ?Sized>(tx: &mut T, id: &CoopId) -> Result<(), Error> {
    if unsigned::current() {
        require_coop(tx, id).await?;
    }
    Ok(())
}

impl Coops {
    /// The service over its ports.
    pub fn new(
        transactor: Arc<dyn Transactor>,
        reads: Arc<dyn CoopReads>,
        ledger_reads: Arc<dyn LedgerReads>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { transactor, reads, ledger_reads, clock, observer: None }
    }

    /// Tells `observer` after every committed change of membership or role.
    pub fn with_membership_observer(mut self, observer: Arc<dyn MembershipObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    fn membership_changed(&self, coop: &CoopId) {
        if let Some(observer) = &self.observer {
            observer.membership_changed(coop);
        }
    }

    /// Creates a coop whose first admin is the creator. Only the token's coop may be created.
    pub async fn create(&self, creator: &Did, token_coop: &CoopId, request: NewCoop) -> Result<CoopRecord, Error> {
        let id = request.id.unwrap_or_else(|| token_coop.clone());
        if &id != token_coop {
            return Err(Error::AuthorizationFailed {
                message: format!("the token is for cooperative '{token_coop}', not '{id}'"),
                detail: gateway_core::AuthorizationDetail::CoopId(id.to_string()),
            });
        }
        for (field, value, max) in [
            ("name", &request.name, 200),
            ("coop_type", &request.coop_type, 64),
            ("description", &request.description, 4000),
        ] {
            if value.chars().count() > max {
                return Err(Error::bad_request_field(field, format!("{field} is at most {max} characters")));
            }
        }
        if request.name.trim().is_empty() {
            return Err(Error::bad_request_field("name", "name must not be empty"));
        }
        let now = self.clock.now_unix_secs();
        let record = CoopRecord {
            id,
            name: request.name,
            coop_type: request.coop_type,
            description: request.description,
            created_at: now,
            created_by: creator.clone(),
            settings: CoopSettings::default(),
            member_count: 1,
        };
        let admin = MemberRecord { did: creator.clone(), role: Role::Admin, joined_at: now, credit_limit: None };
        let created = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                if tx.coop(&record.id).await?.is_some() {
                    return Err(Error::conflict(format!("cooperative '{}' already exists", record.id)));
                }
                tx.insert_coop(&record).await?;
                // The log begins before the coop's first event (INTERFACE.md §12).
                crate::log::open_new(tx, &record, now).await?;
                tx.insert_member(&record.id, &admin).await?;
                tx.insert_domain(&coop_domain(&record.id, now)).await?;
                emit(tx, &record.id, now, CoopEvent::MemberAdded(&admin)).await?;
                Ok(record)
            })
        })
        .await?;
        self.membership_changed(&created.id);
        Ok(created)
    }

    /// A coop, or `NOT_FOUND`.
    pub async fn get(&self, id: &CoopId) -> Result<CoopRecord, Error> {
        self.reads.coop(id).await?.ok_or_else(|| Error::not_found("coop", id.as_str()))
    }

    /// The coops a DID belongs to.
    pub async fn list_for(&self, did: &Did, page: PageRequest) -> Result<(Vec<CoopRecord>, u64), Error> {
        self.reads.coops_of(did, page).await
    }

    /// Members of a coop.
    pub async fn members(&self, coop: &CoopId, page: PageRequest) -> Result<(Vec<MemberRecord>, u64), Error> {
        self.get(coop).await?;
        self.reads.members(coop, page).await
    }

    /// Adds a member; an existing member is a conflict.
    pub async fn add_member(&self, coop: &CoopId, did: &Did, role: Role) -> Result<MemberRecord, Error> {
        let now = self.clock.now_unix_secs();
        let member = MemberRecord { did: did.clone(), role, joined_at: now, credit_limit: None };
        let id = coop.clone();
        let added = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                add_member_in(tx, &id, &member, now).await?;
                Ok(member)
            })
        })
        .await?;
        self.membership_changed(coop);
        Ok(added)
    }

    /// Removes a member, everywhere at once: from the coop, from every governance domain of the
    /// coop, and from every delegation given or received in it. The last admin cannot be removed.
    pub async fn remove_member(&self, coop: &CoopId, did: &Did) -> Result<(), Error> {
        let (id, did, now) = (coop.clone(), did.clone(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move { remove_member_in(tx, &id, &did, now).await })
        })
        .await?;
        self.membership_changed(coop);
        Ok(())
    }

    /// Changes a member's role; the last admin cannot be demoted.
    pub async fn set_role(&self, coop: &CoopId, did: &Did, role: Role) -> Result<MemberRecord, Error> {
        self.update_member(coop, did, move |member| {
            member.role = role;
        })
        .await
    }

    /// Sets or clears a member's credit-limit override (zero or negative).
    pub async fn set_member_credit_limit(
        &self,
        coop: &CoopId,
        did: &Did,
        limit: Option<Amount>,
    ) -> Result<MemberRecord, Error> {
        if limit.is_some_and(|l| l.micros() > 0) {
            return Err(Error::bad_request_field("credit_limit", "credit_limit is a floor: zero or negative"));
        }
        self.update_member(coop, did, move |member| member.credit_limit = limit).await
    }

    async fn update_member(
        &self,
        coop: &CoopId,
        did: &Did,
        change: impl FnOnce(&mut MemberRecord) + Send + 'static,
    ) -> Result<MemberRecord, Error> {
        let (id, did, now) = (coop.clone(), did.clone(), self.clock.now_unix_secs());
        let member = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                // Serialises membership changes of the coop before the last-admin count.
                lock_coop(tx, &id).await?;
                let mut member = tx.member(&id, &did).await?.ok_or_else(|| Error::not_found("member", did.as_str()))?;
                let was_admin = member.role == Role::Admin;
                change(&mut member);
                if was_admin && member.role != Role::Admin && tx.count_admins(&id).await? <= 1 {
                    return Err(Error::conflict("the last admin of a cooperative cannot be demoted"));
                }
                tx.update_member(&id, &member).await?;
                emit(tx, &id, now, CoopEvent::RoleUpdated(&member)).await?;
                Ok(member)
            })
        })
        .await?;
        self.membership_changed(coop);
        Ok(member)
    }

    /// Applies a settings patch and returns the coop.
    pub async fn update_settings(&self, coop: &CoopId, patch: SettingsPatch) -> Result<CoopRecord, Error> {
        patch.validate()?;
        let (coop, now) = (coop.clone(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move { update_settings_in(tx, &coop, &patch, now).await })
        })
        .await
    }

    /// Public statistics.
    pub async fn stats(&self, coop: &CoopId) -> Result<CoopStats, Error> {
        let record = self.get(coop).await?;
        let (transaction_count, currencies) = self.ledger_reads.coop_ledger_stats(coop).await?;
        Ok(CoopStats { coop: record, transaction_count, currencies })
    }
}

/// Parts per million as a percent amount (1% = 10 000 ppm), exact.
pub fn fee_percent(ppm: u32) -> Amount {
    // ppm / 10^4 percent; Amount has 6 decimals, so percent × 10^6 = ppm × 100.
    Amount::from_micros(i64::from(ppm) * 100)
}
