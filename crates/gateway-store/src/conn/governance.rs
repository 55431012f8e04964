//! Governance: [`GovTx`] and the rows of proposals, votes, domains, delegations, receipts and
//! signing keys.

use async_trait::async_trait;
use gateway_core::{CoopId, Did, Error};
use gateway_domain::governance::{COOP_DOMAIN, Effect, Outcome, ProposalPayload, ProposalStatus};
use gateway_domain::ports::{DelegationRecord, DomainRecord, GovTx, ProposalRecord, SigningKeyRecord};
use serde_json::Value;

use super::{Conn, Db, from_json_rows, parse_coop, parse_did, parse_json, to_i64, to_u64};

/// Columns of `proposals`, in this order.
pub(crate) const PROPOSAL_COLUMNS: &str = "id, coop_id, domain_id, title, description, payload, rule, \
     author, status, voting_duration_secs, created_at, opened_at, closes_at, closed_at, outcome, tally_for, \
     tally_against, tally_abstain, receipt_unavailable, effect";

/// A `proposals` row: [`PROPOSAL_COLUMNS`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ProposalRow {
    id: String,
    coop_id: String,
    domain_id: String,
    title: String,
    description: String,
    payload: String,
    rule: String,
    author: String,
    status: String,
    voting_duration_secs: i64,
    created_at: i64,
    opened_at: Option<i64>,
    closes_at: Option<i64>,
    closed_at: Option<i64>,
    outcome: Option<String>,
    tally_for: Option<i64>,
    tally_against: Option<i64>,
    tally_abstain: Option<i64>,
    receipt_unavailable: Option<String>,
    effect: Option<String>,
}

named_row!(ProposalRow {
    id,
    coop_id,
    domain_id,
    title,
    description,
    payload,
    rule,
    author,
    status,
    voting_duration_secs,
    created_at,
    opened_at,
    closes_at,
    closed_at,
    outcome,
    tally_for,
    tally_against,
    tally_abstain,
    receipt_unavailable,
    effect
});

pub(crate) fn proposal_from_row(row: ProposalRow) -> Result<ProposalRecord, Error> {
    let tally = match (row.tally_for, row.tally_against, row.tally_abstain) {
        (Some(f), Some(a), Some(ab)) => Some((to_u64(f), to_u64(a), to_u64(ab))),
        _ => None,
    };
    let payload = ProposalPayload::from_json(&parse_json(&row.payload)?)
        .map_err(|e| Error::Internal(format!("stored payload of proposal {}: {e}", row.id)))?;
    Ok(ProposalRecord {
        id: row.id,
        coop_id: parse_coop(&row.coop_id)?,
        domain_id: row.domain_id,
        title: row.title,
        description: row.description,
        payload,
        rule: row.rule,
        author: parse_did(&row.author)?,
        status: ProposalStatus::parse(&row.status)
            .ok_or_else(|| Error::Internal(format!("stored proposal status '{}'", row.status)))?,
        voting_duration_secs: to_u64(row.voting_duration_secs),
        created_at: to_u64(row.created_at),
        opened_at: row.opened_at.map(to_u64),
        closes_at: row.closes_at.map(to_u64),
        closed_at: row.closed_at.map(to_u64),
        outcome: row
            .outcome
            .map(|o| Outcome::parse(&o).ok_or_else(|| Error::Internal(format!("stored proposal outcome '{o}'"))))
            .transpose()?,
        tally,
        receipt_unavailable: row.receipt_unavailable,
        effect: row.effect.as_deref().map(effect_from_json).transpose()?,
    })
}

/// `tally_for`, `tally_against`, `tally_abstain`.
type TallyColumns = (Option<i64>, Option<i64>, Option<i64>);

/// The three tally columns of a proposal: all set once it has closed, all null before.
fn tally_columns(p: &ProposalRecord) -> Result<TallyColumns, Error> {
    Ok(match p.tally {
        Some((f, a, ab)) => (Some(to_i64(f)?), Some(to_i64(a)?), Some(to_i64(ab)?)),
        None => (None, None, None),
    })
}

/// The stored form of an effect: `{"applied", "error"}`.
fn effect_to_json(effect: &Effect) -> String {
    serde_json::json!({ "applied": effect.applied, "error": effect.error }).to_string()
}

fn effect_from_json(text: &str) -> Result<Effect, Error> {
    let value = parse_json(text)?;
    let applied = value["applied"].as_bool().ok_or_else(|| Error::Internal(format!("stored effect: {text}")))?;
    Ok(Effect { applied, error: value["error"].as_str().map(str::to_owned) })
}

/// Columns of `gov_domains`, in the order of [`DomainRow`].
pub(crate) const DOMAIN_COLUMNS: &str = "coop_id, domain_id, name, members, quorum_percent, rule, created_at";

/// A `gov_domains` row: [`DOMAIN_COLUMNS`] (`members` a JSON array of DIDs).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct DomainRow {
    coop_id: String,
    domain_id: String,
    name: String,
    members: String,
    quorum_percent: Option<i64>,
    rule: Option<String>,
    created_at: i64,
}

named_row!(DomainRow { coop_id, domain_id, name, members, quorum_percent, rule, created_at });

pub(crate) fn domain_from_row(row: DomainRow) -> Result<DomainRecord, Error> {
    let members: Vec<String> =
        serde_json::from_str(&row.members).map_err(|e| Error::Internal(format!("stored members: {e}")))?;
    Ok(DomainRecord {
        coop_id: parse_coop(&row.coop_id)?,
        domain_id: row.domain_id,
        name: row.name,
        members: members.iter().map(|m| parse_did(m)).collect::<Result<_, _>>()?,
        quorum_percent: row.quorum_percent.and_then(|q| u32::try_from(q).ok()),
        rule: row.rule,
        created_at: to_u64(row.created_at),
    })
}

/// The stored member list: the coop domain's members are the coop's and are not stored.
fn domain_members_json(d: &DomainRecord) -> String {
    let members: Vec<&str> =
        if d.domain_id == COOP_DOMAIN { Vec::new() } else { d.members.iter().map(Did::as_str).collect() };
    serde_json::to_string(&members).expect("strings")
}

/// A `delegations` row (`id, coop_id, delegator, delegate, scope, expires_at, created_at`). A
/// close reads them aggregated into one JSON array of arrays, which serde decodes by position:
/// the fields are in the order of the aggregate's columns.
#[derive(Debug, sqlx::FromRow, serde::Deserialize)]
struct DelegationRow {
    id: String,
    coop_id: String,
    delegator: String,
    delegate: String,
    scope: String,
    expires_at: Option<i64>,
    created_at: i64,
}

named_row!(DelegationRow { id, coop_id, delegator, delegate, scope, expires_at, created_at });

fn delegation_from_row(row: DelegationRow) -> Result<DelegationRecord, Error> {
    Ok(DelegationRecord {
        id: row.id,
        coop_id: parse_coop(&row.coop_id)?,
        delegator: parse_did(&row.delegator)?,
        delegate: parse_did(&row.delegate)?,
        scope: row.scope,
        expires_at: row.expires_at.map(to_u64),
        created_at: to_u64(row.created_at),
    })
}

/// Columns of `signing_keys`, in the order of [`SigningKeyRow`].
pub(crate) const SIGNING_KEY_COLUMNS: &str = "public_key, did, valid_from, valid_until, coop_id, master, generation";

/// A `signing_keys` row: [`SIGNING_KEY_COLUMNS`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SigningKeyRow {
    public_key: String,
    did: String,
    valid_from: i64,
    valid_until: Option<i64>,
    coop_id: Option<String>,
    master: Option<i64>,
    generation: Option<i64>,
}

named_row!(SigningKeyRow { public_key, did, valid_from, valid_until, coop_id, master, generation });

pub(crate) fn signing_key_from_row(row: SigningKeyRow) -> Result<SigningKeyRecord, Error> {
    Ok(SigningKeyRecord {
        public_key: row.public_key,
        did: row.did,
        valid_from: to_u64(row.valid_from),
        valid_until: row.valid_until.map(to_u64),
        coop_id: row.coop_id.as_deref().map(parse_coop).transpose()?,
        master: row.master.map(to_u32).transpose()?,
        generation: row.generation.map(to_u32).transpose()?,
    })
}

fn to_u32(value: i64) -> Result<u32, Error> {
    u32::try_from(value).map_err(|_| Error::Internal(format!("stored key number {value} is out of range")))
}

#[async_trait]
impl GovTx for Conn<'_> {
    async fn domain(&mut self, coop: &CoopId, domain_id: &str) -> Result<Option<DomainRecord>, Error> {
        let row: Option<DomainRow> = self
            .fetch_optional(
                &format!("SELECT {DOMAIN_COLUMNS} FROM gov_domains WHERE coop_id = $1 AND domain_id = $2"),
                args![coop.as_str(), domain_id],
            )
            .await?;
        row.map(domain_from_row).transpose()
    }

    async fn domains(&mut self, coop: &CoopId) -> Result<Vec<DomainRecord>, Error> {
        let rows: Vec<DomainRow> = self
            .fetch_all(
                &format!("SELECT {DOMAIN_COLUMNS} FROM gov_domains WHERE coop_id = $1 ORDER BY domain_id"),
                args![coop.as_str()],
            )
            .await?;
        rows.into_iter().map(domain_from_row).collect()
    }

    async fn update_domain(&mut self, d: &DomainRecord) -> Result<(), Error> {
        let members = domain_members_json(d);
        self.execute(
            "UPDATE gov_domains SET name = $3, members = $4, quorum_percent = $5, rule = $6 \
             WHERE coop_id = $1 AND domain_id = $2",
            args![
                d.coop_id.as_str(),
                &d.domain_id,
                &d.name,
                &members,
                d.quorum_percent.map(i64::from),
                d.rule.as_deref()
            ],
        )
        .await
        .map(|_| ())
    }

    async fn delete_delegations_involving(&mut self, coop: &CoopId, did: &Did) -> Result<u64, Error> {
        self.execute(
            "DELETE FROM delegations WHERE coop_id = $1 AND (delegator = $2 OR delegate = $2)",
            args![coop.as_str(), did.as_str()],
        )
        .await
    }

    async fn insert_domain(&mut self, d: &DomainRecord) -> Result<(), Error> {
        let members = domain_members_json(d);
        self.execute(
            "INSERT INTO gov_domains (coop_id, domain_id, name, members, quorum_percent, rule, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            args![
                d.coop_id.as_str(),
                &d.domain_id,
                &d.name,
                &members,
                d.quorum_percent.map(i64::from),
                d.rule.as_deref(),
                to_i64(d.created_at)?
            ],
        )
        .await
        .map(|_| ())
    }

    async fn proposal(&mut self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error> {
        let sql = format!("SELECT {PROPOSAL_COLUMNS} FROM proposals WHERE coop_id = $1 AND id = $2");
        let row: Option<ProposalRow> = self.fetch_optional(&sql, args![coop.as_str(), id]).await?;
        row.map(proposal_from_row).transpose()
    }

    async fn lock_proposal(&mut self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error> {
        let sql = format!(
            "SELECT {PROPOSAL_COLUMNS} FROM proposals \
             WHERE coop_id = $1 AND id = $2{}",
            self.for_update()
        );
        let row: Option<ProposalRow> = self.fetch_optional(&sql, args![coop.as_str(), id]).await?;
        row.map(proposal_from_row).transpose()
    }

    async fn proposal_times_by_author(&mut self, coop: &CoopId, author: &Did, since: u64) -> Result<Vec<u64>, Error> {
        let times: Vec<i64> = self
            .fetch_all(
                "SELECT created_at FROM proposals WHERE coop_id = $1 AND author = $2 AND created_at >= $3",
                args![coop.as_str(), author.as_str(), to_i64(since)?],
            )
            .await?;
        Ok(times.into_iter().map(to_u64).collect())
    }

    async fn insert_proposal(&mut self, p: &ProposalRecord) -> Result<(), Error> {
        let sql = format!(
            "INSERT INTO proposals ({PROPOSAL_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
                     $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
        );
        let payload = p.payload.to_json().to_string();
        let (f, a, ab) = tally_columns(p)?;
        self.execute(
            &sql,
            args![
                &p.id,
                p.coop_id.as_str(),
                &p.domain_id,
                &p.title,
                &p.description,
                &payload,
                &p.rule,
                p.author.as_str(),
                p.status.as_str(),
                to_i64(p.voting_duration_secs)?,
                to_i64(p.created_at)?,
                p.opened_at.map(to_i64).transpose()?,
                p.closes_at.map(to_i64).transpose()?,
                p.closed_at.map(to_i64).transpose()?,
                p.outcome.map(Outcome::as_str),
                f,
                a,
                ab,
                p.receipt_unavailable.as_deref(),
                p.effect.as_ref().map(effect_to_json)
            ],
        )
        .await
        .map(|_| ())
    }

    async fn update_proposal(&mut self, p: &ProposalRecord) -> Result<(), Error> {
        let (f, a, ab) = tally_columns(p)?;
        self.execute(
            "UPDATE proposals \
             SET status = $3, opened_at = $4, closes_at = $5, closed_at = $6, outcome = $7, tally_for = $8, \
                 tally_against = $9, tally_abstain = $10, receipt_unavailable = $11, effect = $12, rule = $13 \
             WHERE coop_id = $1 AND id = $2",
            args![
                p.coop_id.as_str(),
                &p.id,
                p.status.as_str(),
                p.opened_at.map(to_i64).transpose()?,
                p.closes_at.map(to_i64).transpose()?,
                p.closed_at.map(to_i64).transpose()?,
                p.outcome.map(Outcome::as_str),
                f,
                a,
                ab,
                p.receipt_unavailable.as_deref(),
                p.effect.as_ref().map(effect_to_json),
                &p.rule
            ],
        )
        .await
        .map(|_| ())
    }

    async fn upsert_vote(
        &mut self,
        proposal_id: &str,
        voter: &Did,
        choice: &str,
        at: u64,
        signature: Option<&gateway_core::RequestSignature>,
    ) -> Result<bool, Error> {
        let existed: bool = self
            .fetch_one(
                "SELECT EXISTS (SELECT 1 FROM votes WHERE proposal_id = $1 AND voter = $2)",
                args![proposal_id, voter.as_str()],
            )
            .await?;
        let evidence = match signature {
            Some(signature) => Some(self.evidence_json(signature).await?),
            None => None,
        };
        self.execute(
            "INSERT INTO votes (proposal_id, voter, choice, cast_at, request_signature) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (proposal_id, voter) \
             DO UPDATE SET choice = excluded.choice, cast_at = excluded.cast_at, \
             request_signature = excluded.request_signature",
            args![proposal_id, voter.as_str(), choice, to_i64(at)?, evidence],
        )
        .await
        .map(|_| ())?;
        Ok(existed)
    }

    async fn vote_signatures(
        &mut self,
        proposal_id: &str,
    ) -> Result<Vec<(Did, gateway_core::RequestSignature)>, Error> {
        let rows: Vec<(String, String)> = self
            .fetch_all(
                "SELECT voter, request_signature FROM votes \
                 WHERE proposal_id = $1 AND request_signature IS NOT NULL \
                 ORDER BY voter",
                args![proposal_id],
            )
            .await?;
        let mut voters = Vec::with_capacity(rows.len());
        let mut pending = Vec::with_capacity(rows.len());
        for (voter, signature) in rows {
            voters.push(parse_did(&voter)?);
            pending.push(super::parse_evidence(&signature)?);
        }
        // The bodies kept apart, in one lookup (per few hundred distinct bodies).
        Ok(voters.into_iter().zip(self.fill_signed_bodies(pending).await?).collect())
    }

    async fn votes(&mut self, proposal_id: &str) -> Result<Vec<(Did, String)>, Error> {
        // A close reads every vote of a proposal, thousands of rows: aggregated into one JSON
        // array by the database, they cross from the driver in one value instead of row by row.
        let sql = match self.db {
            Db::Sqlite(_) => {
                "SELECT json_group_array(json_array(voter, choice)) \
                 FROM votes \
                 WHERE proposal_id = $1"
            }
            Db::Postgres(_) => {
                "SELECT COALESCE(json_agg(json_build_array(voter, choice)), '[]')::text \
                 FROM votes \
                 WHERE proposal_id = $1"
            }
        };
        let json: String = self.fetch_one(sql, args![proposal_id]).await?;
        let rows: Vec<(String, String)> = from_json_rows(&json)?;
        rows.into_iter().map(|(v, ch)| Ok((parse_did(&v)?, ch))).collect()
    }

    async fn insert_delegation(&mut self, d: &DelegationRecord) -> Result<(), Error> {
        self.execute(
            "INSERT INTO delegations (id, coop_id, delegator, delegate, scope, expires_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            args![
                &d.id,
                d.coop_id.as_str(),
                d.delegator.as_str(),
                d.delegate.as_str(),
                &d.scope,
                d.expires_at.map(to_i64).transpose()?,
                to_i64(d.created_at)?
            ],
        )
        .await
        .map(|_| ())
    }

    async fn delegations(&mut self, coop: &CoopId) -> Result<Vec<DelegationRecord>, Error> {
        // Read in full by every close: one JSON array rather than a row at a time, as for votes.
        let sql = match self.db {
            Db::Sqlite(_) => {
                "SELECT json_group_array(\
                     json_array(id, coop_id, delegator, delegate, scope, expires_at, created_at) \
                     ORDER BY created_at, id) \
                 FROM delegations \
                 WHERE coop_id = $1"
            }
            Db::Postgres(_) => {
                "SELECT COALESCE(json_agg(\
                     json_build_array(id, coop_id, delegator, delegate, scope, expires_at, created_at) \
                     ORDER BY created_at, id), '[]')::text \
                 FROM delegations \
                 WHERE coop_id = $1"
            }
        };
        let json: String = self.fetch_one(sql, args![coop.as_str()]).await?;
        let rows: Vec<DelegationRow> = from_json_rows(&json)?;
        rows.into_iter().map(delegation_from_row).collect()
    }

    async fn delete_delegation(&mut self, coop: &CoopId, delegator: &Did, id: &str) -> Result<bool, Error> {
        let done = self
            .execute(
                "DELETE FROM delegations WHERE coop_id = $1 AND delegator = $2 AND id = $3",
                args![coop.as_str(), delegator.as_str(), id],
            )
            .await?;
        Ok(done > 0)
    }

    async fn insert_receipt(
        &mut self,
        coop: &CoopId,
        proposal_id: &str,
        timestamp: u64,
        body: &Value,
    ) -> Result<(), Error> {
        let body = body.to_string();
        self.execute(
            "INSERT INTO receipts (proposal_id, coop_id, timestamp, body) VALUES ($1, $2, $3, $4)",
            args![proposal_id, coop.as_str(), to_i64(timestamp)?, &body],
        )
        .await
        .map(|_| ())
    }

    async fn receipt_key_generation(&mut self, coop: &CoopId) -> Result<u32, Error> {
        // An upsert rather than a read: it locks the coop's row in PostgreSQL (creating it at 0
        // on first use), which a plain SELECT of a missing row could not.
        let generation: i64 = self
            .fetch_one(
                "INSERT INTO receipt_key_generations (coop_id, generation) VALUES ($1, 0) \
                 ON CONFLICT (coop_id) DO UPDATE SET generation = receipt_key_generations.generation \
                 RETURNING generation",
                args![coop.as_str()],
            )
            .await?;
        to_u32(generation)
    }

    async fn bump_receipt_key_generation(&mut self, coop: &CoopId, at: u64) -> Result<u32, Error> {
        let generation: i64 = self
            .fetch_one(
                "INSERT INTO receipt_key_generations (coop_id, generation) VALUES ($1, 1) \
                 ON CONFLICT (coop_id) DO UPDATE SET generation = receipt_key_generations.generation + 1 \
                 RETURNING generation",
                args![coop.as_str()],
            )
            .await?;
        let generation = to_u32(generation)?;
        self.execute(
            "UPDATE signing_keys SET valid_until = $1 WHERE coop_id = $2 AND valid_until IS NULL",
            args![to_i64(at)?.saturating_add(1), coop.as_str()],
        )
        .await?;
        Ok(generation)
    }

    async fn current_signing_key(&mut self, coop: &CoopId) -> Result<Option<SigningKeyRecord>, Error> {
        let row: Option<SigningKeyRow> = self
            .fetch_optional(
                &format!(
                    "SELECT {SIGNING_KEY_COLUMNS} FROM signing_keys \
                     WHERE coop_id = $1 AND valid_until IS NULL \
                     ORDER BY valid_from DESC \
                     LIMIT 1"
                ),
                args![coop.as_str()],
            )
            .await?;
        row.map(signing_key_from_row).transpose()
    }

    async fn activate_signing_key(&mut self, key: &SigningKeyRecord) -> Result<(), Error> {
        let coop =
            key.coop_id.as_ref().ok_or_else(|| Error::Internal("a signing key to activate names its coop".into()))?;
        let at = to_i64(key.valid_from)?;
        self.execute(
            "UPDATE signing_keys SET valid_until = $1 \
             WHERE coop_id = $2 AND valid_until IS NULL AND public_key <> $3",
            args![at.saturating_add(1), coop.as_str(), &key.public_key],
        )
        .await?;
        self.execute(
            "INSERT INTO signing_keys \
                 (public_key, did, valid_from, valid_until, coop_id, master, generation) \
             VALUES ($1, $2, $3, NULL, $4, $5, $6) \
             ON CONFLICT (public_key) DO UPDATE SET valid_until = NULL",
            args![
                &key.public_key,
                &key.did,
                at,
                coop.as_str(),
                key.master.map(i64::from),
                key.generation.map(i64::from)
            ],
        )
        .await
        .map(|_| ())
    }
}
