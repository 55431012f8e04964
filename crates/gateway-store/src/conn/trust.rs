//! The trust graph: [`TrustTx`] (edge upserts and deletes).

use async_trait::async_trait;
use gateway_core::{Did, Error};
use gateway_domain::ports::{TrustEdge, TrustTx};

use super::{Conn, to_i64};

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
            "INSERT INTO trust_edges (source, target, score, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (source, target) DO UPDATE SET score = excluded.score, updated_at = excluded.updated_at",
            args![e.source.as_str(), e.target.as_str(), e.score, to_i64(e.updated_at)?],
        )
        .await
        .map(|_| ())?;
        Ok(existed)
    }

    async fn delete_edge(&mut self, source: &Did, target: &Did) -> Result<bool, Error> {
        let done = self
            .execute(
                "DELETE FROM trust_edges WHERE source = $1 AND target = $2",
                args![source.as_str(), target.as_str()],
            )
            .await?;
        Ok(done > 0)
    }
}
