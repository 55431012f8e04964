//! Cooperative routes: create, list, details, members (list, add, remove, role, credit
//! limit), settings and the public statistics. A token reaches only its own coop's details and
//! members; the gateway enforces that, this module does not pre-check it.

use gateway_core::{Amount, CoopId, Currency, Did, Role};
use reqwest::Method;
use serde::{Deserialize, Serialize};

use crate::client::{Call, Client};
use crate::common::{PageRequest, Pagination};
use crate::error::Result;

/// Creating a coop; the caller becomes its first admin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewCoop {
    /// The id; the token's coop when `None` (and it must be the token's coop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Display name.
    pub name: String,
    /// Kind, e.g. `worker`.
    pub coop_type: String,
    /// Free text.
    pub description: String,
}

/// A coop's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoopSettings {
    /// Currency of payments that name none.
    pub default_currency: String,
    /// Default lowest balance (zero or negative).
    pub credit_limit: Amount,
    /// Payments of at least this amount need trust 0.5.
    pub high_value_threshold: Amount,
    /// Conversion fee, percent.
    pub conversion_fee_percent: Amount,
    /// Governance quorum, percent.
    pub quorum_percent: u32,
    /// Whether critical operations need a request signature (the client signs them anyway).
    #[serde(default)]
    pub require_signed_requests: bool,
}

/// A coop record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coop {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Kind.
    pub coop_type: String,
    /// Free text.
    pub description: String,
    /// Unix seconds.
    pub created_at: u64,
    /// The creator's DID.
    pub created_by: String,
    /// Settings.
    pub settings: CoopSettings,
    /// Members.
    pub member_count: u64,
}

/// A page of coops.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoopPage {
    /// The coops the caller belongs to.
    pub coops: Vec<Coop>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// A member record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// DID.
    pub did: String,
    /// `admin` or `member`.
    pub role: String,
    /// Unix seconds.
    pub joined_at: u64,
    /// Override of the coop's credit limit.
    #[serde(default)]
    pub credit_limit: Option<Amount>,
}

/// A page of members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberPage {
    /// The members.
    pub members: Vec<Member>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// A settings change; `None` fields keep their value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SettingsPatch {
    /// Currency of payments that name none.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "currency")]
    pub default_currency: Option<Currency>,
    /// Default lowest balance (zero or negative).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credit_limit: Option<Amount>,
    /// High-value threshold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub high_value_threshold: Option<Amount>,
    /// Conversion fee, percent (at most 4 decimals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversion_fee_percent: Option<Amount>,
    /// Governance quorum, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quorum_percent: Option<u32>,
    /// Require request signatures on critical operations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_signed_requests: Option<bool>,
}

fn currency<S: serde::Serializer>(value: &Option<Currency>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(currency) => serializer.serialize_str(currency.as_str()),
        None => serializer.serialize_none(),
    }
}

/// Public statistics of a coop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoopStats {
    /// Id.
    pub coop_id: String,
    /// Members.
    pub member_count: u64,
    /// Ledger transactions.
    pub transaction_count: u64,
    /// Currencies in use.
    pub currencies: Vec<String>,
    /// Proposals.
    pub proposal_count: u64,
    /// Open proposals.
    pub open_proposal_count: u64,
    /// Unix seconds.
    pub created_at: u64,
}

impl Client {
    /// `POST /v1/coops`.
    pub async fn create_coop(&self, coop: &NewCoop) -> Result<Coop> {
        self.call_json(Call::new(Method::POST, &["v1", "coops"]).json(coop)?).await
    }

    /// `GET /v1/coops`: the coops the caller is a member of.
    pub async fn coops(&self, page: PageRequest) -> Result<CoopPage> {
        let call = Call::new(Method::GET, &["v1", "coops"]).query("limit", page.limit).query("offset", page.offset);
        self.call_json(call).await
    }

    /// `GET /v1/coops/{id}`.
    pub async fn coop(&self, coop: &CoopId) -> Result<Coop> {
        self.call_json(Call::new(Method::GET, &["v1", "coops", coop.as_str()])).await
    }

    /// `GET /v1/coops/{id}/members`.
    pub async fn members(&self, coop: &CoopId, page: PageRequest) -> Result<MemberPage> {
        let call = Call::new(Method::GET, &["v1", "coops", coop.as_str(), "members"])
            .query("limit", page.limit)
            .query("offset", page.offset);
        self.call_json(call).await
    }

    /// `POST /v1/coops/{id}/members` (role `member` when `None`).
    pub async fn add_member(&self, coop: &CoopId, did: &Did, role: Option<Role>) -> Result<Member> {
        let mut body = serde_json::json!({ "did": did.as_str() });
        if let Some(role) = role {
            body["role"] = role.as_str().into();
        }
        self.call_json(Call::new(Method::POST, &["v1", "coops", coop.as_str(), "members"]).json(&body)?).await
    }

    /// `DELETE /v1/coops/{id}/members/{did}` (not the last admin).
    pub async fn remove_member(&self, coop: &CoopId, did: &Did) -> Result<()> {
        self.call_empty(Call::new(Method::DELETE, &["v1", "coops", coop.as_str(), "members", did.as_str()])).await
    }

    /// `PUT /v1/coops/{id}/members/{did}/role`.
    pub async fn set_role(&self, coop: &CoopId, did: &Did, role: Role) -> Result<Member> {
        let call = Call::new(Method::PUT, &["v1", "coops", coop.as_str(), "members", did.as_str(), "role"])
            .json(&serde_json::json!({ "role": role.as_str() }))?;
        self.call_json(call).await
    }

    /// `PUT /v1/coops/{id}/members/{did}/credit-limit`; `None` returns the member to the
    /// coop's limit.
    pub async fn set_credit_limit(&self, coop: &CoopId, did: &Did, credit_limit: Option<Amount>) -> Result<Member> {
        let call = Call::new(Method::PUT, &["v1", "coops", coop.as_str(), "members", did.as_str(), "credit-limit"])
            .json(&serde_json::json!({ "credit_limit": credit_limit }))?;
        self.call_json(call).await
    }

    /// `PUT /v1/coops/{id}/settings`.
    pub async fn update_settings(&self, coop: &CoopId, patch: &SettingsPatch) -> Result<Coop> {
        self.call_json(Call::new(Method::PUT, &["v1", "coops", coop.as_str(), "settings"]).json(patch)?).await
    }

    /// `GET /v1/coops/{id}/stats` (public).
    pub async fn coop_stats(&self, coop: &CoopId) -> Result<CoopStats> {
        self.call_json(Call::new(Method::GET, &["v1", "coops", coop.as_str(), "stats"]).public()).await
    }
}
