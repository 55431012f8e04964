//! Cooperatives and their members: creation, membership, roles, settings, statistics.
//!
//! Every change writes its event (`MemberAdded`, `MemberRemoved`, `RoleUpdated`,
//! `SettingsUpdated`) and notifications in the same transaction. Authorization by scope and
//! cooperative is the caller's job (the HTTP layer's extractors); the rules that depend on the
//! coop's state (last admin, duplicates) are here.

use std::sync::Arc;

use gateway_core::{Amount, Clock, CoopId, Currency, Did, Error, PageRequest, Role};
use serde_json::json;

use crate::events::{CoopEventType, emit};
use crate::notifications::{Note, notify};
use crate::ports::{CoopReads, CoopRecord, CoopSettings, LedgerReads, MemberRecord, Transactor, Tx, transaction};

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
#[derive(Debug, Clone, Default)]
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
}

fn member_json(member: &MemberRecord) -> serde_json::Value {
    json!({
        "did": member.did.as_str(),
        "role": member.role.as_str(),
        "joined_at": member.joined_at,
        "credit_limit": member.credit_limit,
    })
}

/// The coop, or `NOT_FOUND`.
pub async fn require_coop(tx: &mut dyn Tx, id: &CoopId) -> Result<CoopRecord, Error> {
    tx.coop(id).await?.ok_or_else(|| Error::not_found("coop", id.as_str()))
}

impl Coops {
    /// The service over its ports.
    pub fn new(
        transactor: Arc<dyn Transactor>,
        reads: Arc<dyn CoopReads>,
        ledger_reads: Arc<dyn LedgerReads>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { transactor, reads, ledger_reads, clock }
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
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                if tx.coop(&record.id).await?.is_some() {
                    return Err(Error::conflict(format!("cooperative '{}' already exists", record.id)));
                }
                tx.insert_coop(&record).await?;
                tx.insert_member(&record.id, &admin).await?;
                emit(tx, &record.id, CoopEventType::MemberAdded, now, member_json(&admin)).await?;
                Ok(record)
            })
        })
        .await
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
        let coop = coop.clone();
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let record = require_coop(tx, &coop).await?;
                if tx.member(&coop, &member.did).await?.is_some() {
                    return Err(Error::conflict(format!("{} is already a member of '{coop}'", member.did)));
                }
                tx.insert_member(&coop, &member).await?;
                emit(tx, &coop, CoopEventType::MemberAdded, now, member_json(&member)).await?;
                let note = Note {
                    kind: "member_added",
                    title: format!("Welcome to {}", record.name),
                    body: format!("You were added to cooperative '{coop}' as {}.", member.role.as_str()),
                    data: json!({ "coop_id": coop.as_str(), "role": member.role.as_str() }),
                };
                notify(tx, &member.did, &coop, note, now).await?;
                Ok(member)
            })
        })
        .await
    }

    /// Removes a member; the last admin cannot be removed.
    pub async fn remove_member(&self, coop: &CoopId, did: &Did) -> Result<(), Error> {
        let (coop, did, now) = (coop.clone(), did.clone(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                require_coop(tx, &coop).await?;
                let member = tx.member(&coop, &did).await?.ok_or_else(|| Error::not_found("member", did.as_str()))?;
                if member.role == Role::Admin && tx.count_admins(&coop).await? <= 1 {
                    return Err(Error::conflict("the last admin of a cooperative cannot be removed"));
                }
                tx.delete_member(&coop, &did).await?;
                emit(tx, &coop, CoopEventType::MemberRemoved, now, json!({ "did": did.as_str() })).await?;
                Ok(())
            })
        })
        .await
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
        let (coop, did, now) = (coop.clone(), did.clone(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                require_coop(tx, &coop).await?;
                let mut member =
                    tx.member(&coop, &did).await?.ok_or_else(|| Error::not_found("member", did.as_str()))?;
                let was_admin = member.role == Role::Admin;
                change(&mut member);
                if was_admin && member.role != Role::Admin && tx.count_admins(&coop).await? <= 1 {
                    return Err(Error::conflict("the last admin of a cooperative cannot be demoted"));
                }
                tx.update_member(&coop, &member).await?;
                emit(tx, &coop, CoopEventType::RoleUpdated, now, member_json(&member)).await?;
                Ok(member)
            })
        })
        .await
    }

    /// Applies a settings patch and returns the coop.
    pub async fn update_settings(&self, coop: &CoopId, patch: SettingsPatch) -> Result<CoopRecord, Error> {
        if patch.credit_limit.is_some_and(|l| l.micros() > 0) {
            return Err(Error::bad_request_field("credit_limit", "credit_limit is a floor: zero or negative"));
        }
        if patch.high_value_threshold.is_some_and(|t| t.micros() <= 0) {
            return Err(Error::bad_request_field("high_value_threshold", "high_value_threshold must be positive"));
        }
        if patch.quorum_percent.is_some_and(|q| q > 100) {
            return Err(Error::bad_request_field("quorum_percent", "quorum_percent is 0 to 100"));
        }
        if patch.conversion_fee_ppm.is_some_and(|f| f > 1_000_000) {
            return Err(Error::bad_request_field("conversion_fee_percent", "conversion_fee_percent is 0 to 100"));
        }
        let (coop, now) = (coop.clone(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let mut record = require_coop(tx, &coop).await?;
                let s = &mut record.settings;
                if let Some(v) = patch.default_currency {
                    s.default_currency = v;
                }
                if let Some(v) = patch.credit_limit {
                    s.credit_limit = v;
                }
                if let Some(v) = patch.high_value_threshold {
                    s.high_value_threshold = v;
                }
                if let Some(v) = patch.conversion_fee_ppm {
                    s.conversion_fee_ppm = v;
                }
                if let Some(v) = patch.quorum_percent {
                    s.quorum_percent = v;
                }
                tx.update_settings(&coop, &record.settings).await?;
                emit(tx, &coop, CoopEventType::SettingsUpdated, now, settings_json(&record.settings)).await?;
                Ok(record)
            })
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

/// The settings as event data and API output share one shape.
pub fn settings_json(settings: &CoopSettings) -> serde_json::Value {
    json!({
        "default_currency": settings.default_currency.as_str(),
        "credit_limit": settings.credit_limit,
        "high_value_threshold": settings.high_value_threshold,
        "conversion_fee_percent": fee_percent(settings.conversion_fee_ppm),
        "quorum_percent": settings.quorum_percent,
    })
}

/// Parts per million as a percent amount (1% = 10 000 ppm), exact.
pub fn fee_percent(ppm: u32) -> Amount {
    // ppm / 10^4 percent; Amount has 6 decimals, so percent × 10^6 = ppm × 100.
    Amount::from_micros(i64::from(ppm) * 100)
}
