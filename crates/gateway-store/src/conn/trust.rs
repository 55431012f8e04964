//! The trust graph: [`TrustTx`] (edge upserts and deletes) and the `trust_edges` row.

use async_trait::async_trait;
use gateway_core::{Did, Error};
use gateway_domain::ports::{TrustEdge, TrustTx};

use super::{Conn, parse_did, to_i64, to_u64};

/// A `trust_edges` row (`source, target, score, updated_at`).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EdgeRow {
    source: String,
    target: String,
    score: f64,
    updated_at: i64,
}

named_row!(EdgeRow { source, target, score, updated_at });

pub(crate) fn edge_from_row(row: EdgeRow) -> Result<TrustEdge, Error> {
    Ok(TrustEdge {
        source: parse_did(&row.source)?,
        target: parse_did(&row.target)?,
        score: row.score,
        updated_at: to_u64(row.updated_at),
    })
}

#[async_trait]
impl TrustTx for Conn<'_> {
    async fn upsert_edge(&mut self, e: &TrustEdge) -> Result<bool, Error> {
        let existed: bool = self
            .fetch_one(
                "SELECT EXISTS (SELECT 1 FROM trust_edges WHERE source = $1 AND target = $2)",
                args![e.source.as_str(), e.target.as_str()],
            )
            .await?;
        self.execute(
            "INSERT INTO trust_edges (source, target, score, updated_at) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (source, target) \
             DO UPDATE SET score = excluded.score, updated_at = excluded.updated_at",
            args![e.source.as_str(), e.target.as_str(), e.score, to_i64(e.updated_at)?],
        )
        .await
        .map(|_| ())?;
        self.announce_trust_change().await?;
        Ok(existed)
    }

    async fn delete_edge(&mut self, source: &Did, target: &Did) -> Result<bool, Error> {
        let done = self
            .execute(
                "DELETE FROM trust_edges WHERE source = $1 AND target = $2",
                args![source.as_str(), target.as_str()],
            )
            .await?;
        if done > 0 {
            self.announce_trust_change().await?;
        }
        Ok(done > 0)
    }
}

impl Conn<'_> {
    /// On PostgreSQL, tells every replica (delivered when, and only if, the transaction commits)
    /// that the trust graph changed; SQLite has one process, which updates its graph itself.
    async fn announce_trust_change(&mut self) -> Result<(), Error> {
        if !self.is_sqlite() {
            self.execute("SELECT pg_notify(notify_channel('trust'), '')", &[]).await?;
        }
        Ok(())
    }
}
