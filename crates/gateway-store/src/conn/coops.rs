//! Coops and their members: [`CoopTx`], the `coops` and `members` rows, and the member count
//! kept on the coop.

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Did, Error};
use gateway_domain::ports::{CoopRecord, CoopSettings, CoopTx, MemberRecord};

use super::{Arg, Conn, parse_coop, parse_currency, parse_did, parse_role, to_i64, to_u64};
use crate::view::Touched;

/// Columns of `coops` plus the member count, in this order.
pub(crate) const COOP_COLUMNS: &str = "c.id, c.name, c.coop_type, c.description, c.created_at, c.created_by, \
     c.default_currency, c.credit_limit, c.high_value_threshold, c.conversion_fee_ppm, c.quorum_percent, \
     c.require_signed_requests, c.member_count";

/// A `coops` row: [`COOP_COLUMNS`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CoopRow {
    id: String,
    name: String,
    coop_type: String,
    description: String,
    created_at: i64,
    created_by: String,
    default_currency: String,
    credit_limit: i64,
    high_value_threshold: i64,
    conversion_fee_ppm: i64,
    quorum_percent: i64,
    require_signed_requests: i64,
    member_count: i64,
}

named_row!(CoopRow {
    id,
    name,
    coop_type,
    description,
    created_at,
    created_by,
    default_currency,
    credit_limit,
    high_value_threshold,
    conversion_fee_ppm,
    quorum_percent,
    require_signed_requests,
    member_count
});

pub(crate) fn coop_from_row(row: CoopRow) -> Result<CoopRecord, Error> {
    Ok(CoopRecord {
        id: parse_coop(&row.id)?,
        name: row.name,
        coop_type: row.coop_type,
        description: row.description,
        created_at: to_u64(row.created_at),
        created_by: parse_did(&row.created_by)?,
        settings: CoopSettings {
            default_currency: parse_currency(&row.default_currency)?,
            credit_limit: Amount::from_micros(row.credit_limit),
            high_value_threshold: Amount::from_micros(row.high_value_threshold),
            conversion_fee_ppm: u32::try_from(row.conversion_fee_ppm).unwrap_or(0),
            quorum_percent: u32::try_from(row.quorum_percent).unwrap_or(50),
            require_signed_requests: row.require_signed_requests != 0,
        },
        member_count: to_u64(row.member_count),
    })
}

/// A `members` row (`did, role, joined_at, credit_limit`).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct MemberRow {
    did: String,
    role: String,
    joined_at: i64,
    credit_limit: Option<i64>,
}

named_row!(MemberRow { did, role, joined_at, credit_limit });

pub(crate) fn member_from_row(row: MemberRow) -> Result<MemberRecord, Error> {
    Ok(MemberRecord {
        did: parse_did(&row.did)?,
        role: parse_role(&row.role)?,
        joined_at: to_u64(row.joined_at),
        credit_limit: row.credit_limit.map(Amount::from_micros),
    })
}

#[async_trait]
impl CoopTx for Conn<'_> {
    async fn coop(&mut self, id: &CoopId) -> Result<Option<CoopRecord>, Error> {
        let sql = super::shaped("coop", 0, || format!("SELECT {COOP_COLUMNS} FROM coops c WHERE c.id = $1"));
        let row: Option<CoopRow> = self.fetch_optional(&sql, args![id.as_str()]).await?;
        row.map(coop_from_row).transpose()
    }

    async fn lock_coop(&mut self, id: &CoopId) -> Result<Option<CoopRecord>, Error> {
        let sql = format!("SELECT {COOP_COLUMNS} FROM coops c WHERE c.id = $1{}", self.for_update());
        let row: Option<CoopRow> = self.fetch_optional(&sql, args![id.as_str()]).await?;
        row.map(coop_from_row).transpose()
    }

    async fn members_among(&mut self, coop: &CoopId, dids: &[&Did]) -> Result<Vec<MemberRecord>, Error> {
        // In chunks: a statement takes at most 32,766 parameters on SQLite and 65,535 on
        // PostgreSQL, and a governance domain may list more members than that.
        const CHUNK: usize = 10_000;
        /// Most DIDs looked up one by one.
        const ONE_BY_ONE: usize = 8;
        let mut distinct: Vec<&Did> = dids.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.is_empty() {
            return Ok(Vec::new());
        }
        if distinct.len() <= ONE_BY_ONE {
            // A few DIDs (a payment's two), each its own lookup of the primary key: a plan that
            // any statistics give. With `did IN (…)`, PostgreSQL's plan for the statement
            // (kept for every later call) may take `coop_id = $1` alone to the index and
            // filter the coop's every member, when its statistics say coops are small (they
            // say so until the coop's members are analysed, and for a big coop among many
            // small ones): measured, 640 members read for each payment of one coop.
            let sql = super::shaped("members_among_each", distinct.len(), || {
                (0..distinct.len())
                    .map(|i| {
                        format!(
                            "SELECT did, role, joined_at, credit_limit FROM members WHERE coop_id = $1 AND did = ${}",
                            i + 2
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" UNION ALL ")
            });
            let mut args = vec![Arg::from(coop.as_str())];
            args.extend(distinct.iter().map(|did| Arg::from(did.as_str())));
            let rows: Vec<MemberRow> = self.fetch_all(&sql, &args).await?;
            return rows.into_iter().map(member_from_row).collect();
        }
        let mut members = Vec::with_capacity(distinct.len());
        for chunk in distinct.chunks(CHUNK) {
            let sql = super::shaped("members_among", chunk.len(), || {
                let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 2)).collect();
                format!(
                    "SELECT did, role, joined_at, credit_limit FROM members WHERE coop_id = $1 AND did IN ({})",
                    placeholders.join(", ")
                )
            });
            let mut args = vec![Arg::from(coop.as_str())];
            args.extend(chunk.iter().map(|did| Arg::from(did.as_str())));
            let rows: Vec<MemberRow> = self.fetch_all(&sql, &args).await?;
            for row in rows {
                members.push(member_from_row(row)?);
            }
        }
        Ok(members)
    }

    async fn member(&mut self, coop: &CoopId, did: &Did) -> Result<Option<MemberRecord>, Error> {
        let row: Option<MemberRow> = self
            .fetch_optional(
                "SELECT did, role, joined_at, credit_limit FROM members WHERE coop_id = $1 AND did = $2",
                args![coop.as_str(), did.as_str()],
            )
            .await?;
        row.map(member_from_row).transpose()
    }

    async fn insert_coop(&mut self, r: &CoopRecord) -> Result<(), Error> {
        self.touched.push(Touched::Coop(r.id.clone()));
        let s = &r.settings;
        self.execute(
            "INSERT INTO coops (id, name, coop_type, description, created_at, created_by, default_currency, \
             credit_limit, high_value_threshold, conversion_fee_ppm, quorum_percent, require_signed_requests) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            args![
                r.id.as_str(),
                &r.name,
                &r.coop_type,
                &r.description,
                to_i64(r.created_at)?,
                r.created_by.as_str(),
                s.default_currency.as_str(),
                s.credit_limit.micros(),
                s.high_value_threshold.micros(),
                i64::from(s.conversion_fee_ppm),
                i64::from(s.quorum_percent),
                i64::from(s.require_signed_requests)
            ],
        )
        .await
        .map(|_| ())
    }

    async fn update_settings(&mut self, coop: &CoopId, s: &CoopSettings) -> Result<(), Error> {
        self.touched.push(Touched::Coop(coop.clone()));
        if !self.is_sqlite() && !self.writers_alone.contains(coop) {
            // Until the commit, no unit of work of the coop passes `writer_enters` (migration
            // 0027): each one that did has committed, and each later one then reads the new
            // `require_signed_requests`. SQLite runs one unit of work at a time.
            self.execute("SELECT pg_advisory_xact_lock(coop_lock_key('writers', $1))", args![coop.as_str()]).await?;
            self.writers_alone.push(coop.clone());
        }
        self.execute(
            "UPDATE coops SET default_currency = $2, credit_limit = $3, high_value_threshold = $4, \
             conversion_fee_ppm = $5, quorum_percent = $6, require_signed_requests = $7 WHERE id = $1",
            args![
                coop.as_str(),
                s.default_currency.as_str(),
                s.credit_limit.micros(),
                s.high_value_threshold.micros(),
                i64::from(s.conversion_fee_ppm),
                i64::from(s.quorum_percent),
                i64::from(s.require_signed_requests)
            ],
        )
        .await
        .map(|_| ())
    }

    async fn insert_member(&mut self, coop: &CoopId, m: &MemberRecord) -> Result<(), Error> {
        self.execute(
            "INSERT INTO members (coop_id, did, role, joined_at, credit_limit) VALUES ($1, $2, $3, $4, $5)",
            args![
                coop.as_str(),
                m.did.as_str(),
                m.role.as_str(),
                to_i64(m.joined_at)?,
                m.credit_limit.map(Amount::micros)
            ],
        )
        .await
        .map(|_| ())?;
        self.adjust_member_count(coop, 1).await
    }

    async fn update_member(&mut self, coop: &CoopId, m: &MemberRecord) -> Result<(), Error> {
        self.execute(
            "UPDATE members SET role = $3, credit_limit = $4 WHERE coop_id = $1 AND did = $2",
            args![coop.as_str(), m.did.as_str(), m.role.as_str(), m.credit_limit.map(Amount::micros)],
        )
        .await
        .map(|_| ())
    }

    async fn delete_member(&mut self, coop: &CoopId, did: &Did) -> Result<(), Error> {
        let removed = self
            .execute("DELETE FROM members WHERE coop_id = $1 AND did = $2", args![coop.as_str(), did.as_str()])
            .await?;
        if removed > 0 { self.adjust_member_count(coop, -1).await } else { Ok(()) }
    }

    async fn count_admins(&mut self, coop: &CoopId) -> Result<u64, Error> {
        let count: i64 = self
            .fetch_one("SELECT COUNT(*) FROM members WHERE coop_id = $1 AND role = 'admin'", args![coop.as_str()])
            .await?;
        Ok(to_u64(count))
    }

    async fn member_dids(&mut self, coop: &CoopId) -> Result<Vec<Did>, Error> {
        let dids: Vec<String> =
            self.fetch_all("SELECT did FROM members WHERE coop_id = $1 ORDER BY did", args![coop.as_str()]).await?;
        dids.iter().map(|d| parse_did(d)).collect()
    }
}

impl Conn<'_> {
    /// Keeps `coops.member_count` equal to the number of member rows.
    async fn adjust_member_count(&mut self, coop: &CoopId, delta: i64) -> Result<(), Error> {
        self.execute("UPDATE coops SET member_count = member_count + $2 WHERE id = $1", args![coop.as_str(), delta])
            .await
            .map(|_| ())
    }
}
