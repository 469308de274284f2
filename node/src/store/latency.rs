//! The `recall_latency` table: one row per (recall kind, bucket bound) with
//! its sample count and summed microseconds. Local-only: never replicated,
//! never a fact; it never moves `seq`, a watermark or the digest. What a
//! bucket is and how a histogram reads is `crate::recall::latency`'s.

use rusqlite::params;

use super::{Readable, Tx, sql};
use crate::error::Result;

/// One stored bucket of one kind's samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyBucket {
    pub kind: String,
    /// The bucket's upper bound, in µs.
    pub bound_us: i64,
    pub count: i64,
    pub sum_us: i64,
}

/// Add one sample of `us` microseconds to `kind`'s bucket `bound_us`: one
/// UPSERT, inside the caller's write.
pub fn record(tx: &Tx<'_>, kind: &str, bound_us: i64, us: i64) -> Result<()> {
    sql(tx)
        .prepare_cached(
            "INSERT INTO recall_latency(kind, bucket, count, sum_us) VALUES (?1, ?2, 1, ?3)
             ON CONFLICT(kind, bucket) DO UPDATE
             SET count = count + 1, sum_us = sum_us + excluded.sum_us",
        )?
        .execute(params![kind, bound_us, us])?;
    Ok(())
}

/// Every stored bucket, of every kind.
pub fn buckets(r: &(impl Readable + ?Sized)) -> Result<Vec<LatencyBucket>> {
    let mut stmt =
        sql(r).prepare_cached("SELECT kind, bucket, count, sum_us FROM recall_latency")?;
    let rows = stmt
        .query_map([], |r| {
            Ok(LatencyBucket {
                kind: r.get(0)?,
                bound_us: r.get(1)?,
                count: r.get(2)?,
                sum_us: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}
