//! The cooperatives' ports: coops, their members and their settings.

use std::fmt;

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Currency, Did, Error, PageRequest, Role};

/// Settings of a cooperative.
#[derive(Debug, Clone, PartialEq)]
pub struct CoopSettings {
    /// Currency used when a payment names none.
    pub default_currency: Currency,
    /// Lowest balance a member may reach (zero or negative).
    pub credit_limit: Amount,
    /// Payments of at least this amount need trust 0.5.
    pub high_value_threshold: Amount,
    /// Conversion fee in parts per million of the gross target amount (1% = 10 000).
    pub conversion_fee_ppm: u32,
    /// Quorum for governance, percent of a domain's members.
    pub quorum_percent: u32,
    /// Whether critical operations need a valid request signature (INTERFACE.md §11).
    pub require_signed_requests: bool,
}

impl Default for CoopSettings {
    fn default() -> Self {
        Self {
            default_currency: Currency::parse("hours").expect("valid"),
            credit_limit: Amount::from_units(-1000),
            high_value_threshold: Amount::from_units(1000),
            conversion_fee_ppm: 0,
            quorum_percent: 50,
            require_signed_requests: false,
        }
    }
}

/// A cooperative.
#[derive(Debug, Clone, PartialEq)]
pub struct CoopRecord {
    /// Its id.
    pub id: CoopId,
    /// Display name.
    pub name: String,
    /// Kind of cooperative, e.g. `worker`.
    pub coop_type: String,
    /// Free text.
    pub description: String,
    /// Creation time, Unix seconds.
    pub created_at: u64,
    /// Its creator, the first admin.
    pub created_by: Did,
    /// Settings.
    pub settings: CoopSettings,
    /// Number of members.
    pub member_count: u64,
}

/// A member of a cooperative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    /// The member.
    pub did: Did,
    /// Role.
    pub role: Role,
    /// When they joined, Unix seconds.
    pub joined_at: u64,
    /// Per-member credit limit override.
    pub credit_limit: Option<Amount>,
}

/// Cooperative and member writes (and reads that must see the transaction).
#[async_trait]
pub trait CoopTx: Send {
    /// The coop, if it exists.
    async fn coop(&mut self, id: &CoopId) -> Result<Option<CoopRecord>, Error>;
    /// The coop, if it exists, holding its row (`FOR UPDATE` on PostgreSQL; SQLite's single
    /// writer already serialises every write) until the transaction ends. Taken by membership
    /// changes before they count admins, so that two of them on one coop are serialised; never
    /// by payments, which must not queue behind each other on the coop row.
    async fn lock_coop(&mut self, id: &CoopId) -> Result<Option<CoopRecord>, Error>;
    /// The member, if it is one.
    async fn member(&mut self, coop: &CoopId, did: &Did) -> Result<Option<MemberRecord>, Error>;
    /// Which of these DIDs are members, in one query (order not kept).
    async fn members_among(&mut self, coop: &CoopId, dids: &[&Did]) -> Result<Vec<MemberRecord>, Error>;
    /// Creates a coop (the caller checked it does not exist).
    async fn insert_coop(&mut self, coop: &CoopRecord) -> Result<(), Error>;
    /// Replaces a coop's settings.
    async fn update_settings(&mut self, coop: &CoopId, settings: &CoopSettings) -> Result<(), Error>;
    /// Adds a member.
    async fn insert_member(&mut self, coop: &CoopId, member: &MemberRecord) -> Result<(), Error>;
    /// Changes a member's role and credit-limit override.
    async fn update_member(&mut self, coop: &CoopId, member: &MemberRecord) -> Result<(), Error>;
    /// Removes a member.
    async fn delete_member(&mut self, coop: &CoopId, did: &Did) -> Result<(), Error>;
    /// Number of admins.
    async fn count_admins(&mut self, coop: &CoopId) -> Result<u64, Error>;
    /// The DIDs of every member of the coop, in DID order.
    async fn member_dids(&mut self, coop: &CoopId) -> Result<Vec<Did>, Error>;
}

/// Cooperative reads.
#[async_trait]
pub trait CoopReads: Send + Sync + fmt::Debug {
    /// A coop.
    async fn coop(&self, id: &CoopId) -> Result<Option<CoopRecord>, Error>;
    /// Coops the DID is a member of, a page and the total.
    async fn coops_of(&self, did: &Did, page: PageRequest) -> Result<(Vec<CoopRecord>, u64), Error>;
    /// Members of a coop, a page and the total.
    async fn members(&self, coop: &CoopId, page: PageRequest) -> Result<(Vec<MemberRecord>, u64), Error>;
    /// One member.
    async fn member(&self, coop: &CoopId, did: &Did) -> Result<Option<MemberRecord>, Error>;
}
