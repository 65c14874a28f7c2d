//! An endpoint's ordering keys on SQLite (see `store::ordering`), and the holds.

use super::*;
use crate::store::ordering::{KeyHead, KeyListing, KeyPage, OrderingKeyRow, key_row};

/// The candidate keys of a listing, in key order after `after`: the held ones and, for a
/// blocked listing, those with a failed pending head (`deliveries_failed_heads`), else those
/// with any pending delivery (`deliveries_by_key`).
pub(super) fn candidates_sql(listing: KeyListing) -> String {
    let failed = match listing {
        KeyListing::Blocked => "AND attempt_count > 0",
        KeyListing::Waiting | KeyListing::All => "",
    };
    format!(
        "SELECT k FROM (
             SELECT DISTINCT ordering_key AS k FROM deliveries
             WHERE endpoint = ?1 AND status = 'pending' AND ordering_key IS NOT NULL {failed}
               AND ordering_key > ?2
             UNION
             SELECT ordering_key FROM ordering_holds WHERE endpoint = ?1 AND ordering_key > ?2
         ) ORDER BY k LIMIT ?3"
    )
}

/// The head columns `d.id, e.id, d.status, d.round, d.attempt_count, d.next_attempt_at,
/// d.last_error, d.created_at` from `first` on.
const HEAD_COLUMNS: &str =
    "d.id, e.id, d.status, d.round, d.attempt_count, d.next_attempt_at, d.last_error, d.created_at";

fn head_from_row(row: &Row<'_>, first: usize) -> rusqlite::Result<(KeyHead, Timestamp)> {
    Ok((
        KeyHead {
            delivery_id: DeliveryId(row.get(first)?),
            event_id: row.get(first + 1)?,
            status: parse_col(row, first + 2)?,
            round: row.get(first + 3)?,
            attempt_count: row.get(first + 4)?,
            next_attempt_at: opt_ts(row, first + 5)?,
            last_error: row.get(first + 6)?,
        },
        ts(row, first + 7)?,
    ))
}

fn one_key(conn: &Connection, endpoint: &str, key: String) -> StoreResult<Option<OrderingKeyRow>> {
    let first = conn
        .prepare_cached(&format!(
            "SELECT {HEAD_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq
             WHERE d.endpoint = ?1 AND d.ordering_key = ?2 AND d.status = 'pending' ORDER BY d.id LIMIT 2"
        ))?
        .query_map(params![endpoint, key], |r| head_from_row(r, 0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let pending: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM deliveries
             WHERE endpoint = ?1 AND ordering_key = ?2 AND status = 'pending'",
        )?
        .query_row(params![endpoint, key], |r| r.get(0))?;
    let hold = conn
        .prepare_cached(&format!(
            "SELECT h.held_at, {HEAD_COLUMNS} FROM ordering_holds h
             LEFT JOIN deliveries d ON d.id = h.delivery_id LEFT JOIN events e ON e.seq = d.event_seq
             WHERE h.endpoint = ?1 AND h.ordering_key = ?2"
        ))?
        .query_row(params![endpoint, key], |r| {
            let head = match r.get::<_, Option<i64>>(1)? {
                Some(_) => Some(head_from_row(r, 1)?.0),
                None => None,
            };
            Ok((head, ts(r, 0)?))
        })
        .optional()?;
    Ok(key_row(key, first, pending.max(0) as u64, hold))
}

pub(super) fn ordering_keys(
    conn: &Connection,
    endpoint: &str,
    listing: KeyListing,
    after: Option<String>,
    limit: u32,
) -> StoreResult<KeyPage> {
    // One snapshot for the whole page.
    let tx = conn.unchecked_transaction()?;
    let keys = tx
        .prepare_cached(&candidates_sql(listing))?
        .query_map(params![endpoint, after.unwrap_or_default(), limit], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    let mut rows = Vec::with_capacity(keys.len());
    for key in &keys {
        rows.extend(one_key(&tx, endpoint, key.clone())?);
    }
    Ok(KeyPage::of(&keys, rows, listing, limit))
}

pub(super) fn held_keys(conn: &Connection) -> StoreResult<Vec<HeldKey>> {
    let mut stmt = conn.prepare_cached(
        "SELECT endpoint, ordering_key, delivery_id FROM ordering_holds ORDER BY endpoint, ordering_key",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(HeldKey {
            endpoint: Arc::from(r.get::<_, String>(0)?),
            key: r.get(1)?,
            delivery: DeliveryId(r.get(2)?),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub(super) fn hold(
    conn: &Connection,
    endpoint: &str,
    key: &str,
    delivery: DeliveryId,
    at: Timestamp,
) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO ordering_holds (endpoint, ordering_key, delivery_id, held_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (endpoint, ordering_key) DO NOTHING",
    )?
    .execute(params![endpoint, key, delivery.0, at.as_millis()])?;
    Ok(())
}

pub(super) fn release(conn: &Connection, endpoint: &str, key: &str, delivery: DeliveryId) -> StoreResult<()> {
    conn.prepare_cached(
        "DELETE FROM ordering_holds WHERE endpoint = ?1 AND ordering_key = ?2 AND delivery_id = ?3",
    )?
    .execute(params![endpoint, key, delivery.0])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked listing reads the failed heads' index, never the endpoint's whole backlog:
    /// with 20 000 pending deliveries on 20 keys, each behind a failed head, the plan searches
    /// `deliveries_failed_heads`, and each key's head and count use `deliveries_by_key`.
    #[tokio::test]
    async fn listing_blocked_keys_uses_the_failed_heads_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::super::store_with_rows(
            dir.path(),
            "INSERT INTO events (seq, id, topic, event_type, content_type, payload, ordering_key, received_at)
                         VALUES (1, 'e1', 't', 'x', 'application/json', x'7b7d', 'k', 0);
                     WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
                     INSERT INTO deliveries (event_seq, endpoint, status, round, attempt_count, created_at, updated_at,
                         round_started_at, ordering_key)
                     SELECT 1, 'e', 'pending', 1, CASE WHEN i % 1000 = 1 THEN 1 ELSE 0 END, i, i, i,
                            'k' || ((i - 1) / 1000)
                     FROM n;
                     ANALYZE;",
        )
        .await;
        let plans = store
            .read(|conn| {
                let plan = |sql: &str, params: &[&dyn rusqlite::ToSql]| -> StoreResult<String> {
                    let rows = conn
                        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?
                        .query_map(params, |r| r.get::<_, String>(3))?
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    Ok(rows.join("\n"))
                };
                Ok((
                    plan(&candidates_sql(KeyListing::Blocked), &[&"e", &"", &100])?,
                    plan(
                        "SELECT COUNT(*) FROM deliveries
                         WHERE endpoint = ?1 AND ordering_key = ?2 AND status = 'pending'",
                        &[&"e", &"k1"],
                    )?,
                ))
            })
            .await
            .unwrap();
        let (blocked, count) = plans;
        assert!(blocked.contains("deliveries_failed_heads"), "{blocked}");
        assert!(
            !blocked.contains("SCAN d") && !blocked.contains("SCAN deliveries"),
            "{blocked}"
        );
        assert!(count.contains("deliveries_by_key"), "{count}");
        let page = store
            .ordering_keys("e", KeyListing::Blocked, None, 100)
            .await
            .unwrap();
        assert_eq!(page.keys.len(), 20, "keys k0..k19 each have a failed head");
        assert_eq!(page.keys.iter().map(|k| k.waiting).sum::<u64>(), 20_000 - 20);
    }
}
