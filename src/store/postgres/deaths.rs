//! What a silo's death writes, whoever finds it (a leave, the sweep, a placement or a heartbeat
//! that meets a silo past its TTL): its generation retired for ever, and its directory entries
//! released in chunks. Both run inside the transaction that holds the dead silo's row.

use super::statements::Tx;
use std::collections::HashMap;

use super::error::PgError;
use crate::cluster::SiloId;
use crate::store::StoreError;

/// Records the generations of `cluster`'s silos that just died (in the death's transaction): per
/// address the newest dead generation, which every id not newer than it is refused by, for ever.
pub(super) async fn retire<'a>(
    tx: &mut Tx,
    cluster: &str,
    dead: impl Iterator<Item = &'a str>,
) -> Result<(), PgError> {
    let mut newest: HashMap<String, i64> = HashMap::new();
    for silo in dead {
        let id = SiloId::parse("silo", silo).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let (address, generation) = id.incarnation();
        let entry = newest.entry(address.to_owned()).or_insert(generation);
        *entry = (*entry).max(generation);
    }
    if newest.is_empty() {
        return Ok(());
    }
    let (addresses, generations): (Vec<String>, Vec<i64>) = newest.into_iter().unzip();
    sqlx::query(
        "INSERT INTO retired_generations (cluster, address, generation)
         SELECT $1, address, generation FROM UNNEST($2::text[], $3::int8[]) AS d(address, generation)
         ON CONFLICT (cluster, address)
         DO UPDATE SET generation = GREATEST(retired_generations.generation, EXCLUDED.generation)",
    )
    .bind(cluster)
    .bind(&addresses)
    .bind(&generations)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Deletes up to `limit` of a dead silo's entries, by primary key; when fewer were left, marks the
/// silo released (no entry can appear on it after its death commits). Returns how many it deleted.
pub(super) async fn release_chunk(
    tx: &mut Tx,
    cluster: &str,
    silo: &str,
    limit: u32,
) -> Result<u64, PgError> {
    let released = sqlx::query(
        "DELETE FROM activations WHERE cluster = $1 AND silo = $2 AND grain = ANY (ARRAY(
            SELECT grain FROM activations WHERE cluster = $1 AND silo = $2 LIMIT $3))",
    )
    .bind(cluster)
    .bind(silo)
    .bind(i64::from(limit))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if released < u64::from(limit) {
        sqlx::query(
            "UPDATE silos SET released = true
             WHERE cluster = $1 AND silo = $2 AND status = 'dead'
               AND (SELECT 1 FROM activations WHERE cluster = $1 AND silo = $2 LIMIT 1) IS NULL",
        )
        .bind(cluster)
        .bind(silo)
        .execute(&mut *tx)
        .await?;
    }
    Ok(released)
}
