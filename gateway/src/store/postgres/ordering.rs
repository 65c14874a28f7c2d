//! An endpoint's ordering keys on PostgreSQL (see `store::ordering`), and the holds.

use std::collections::HashMap;

use super::*;
use crate::store::ordering::{KeyHead, KeyListing, KeyPage, key_row};

/// The candidate keys of a listing, in key order after `after`: the held ones and, for a
/// blocked listing, those with a failed pending head (`deliveries_failed_heads`), else those
/// with any pending delivery (`deliveries_by_key`).
async fn candidates<C: GenericClient>(
    c: &C,
    endpoint: &str,
    listing: KeyListing,
    after: &str,
    limit: i64,
) -> StoreResult<Vec<String>> {
    let pending = match listing {
        KeyListing::Blocked => "AND attempt_count > 0",
        KeyListing::Waiting | KeyListing::All => "",
    };
    let sql = format!(
        "SELECT k FROM (
             (SELECT DISTINCT ordering_key AS k FROM deliveries
              WHERE endpoint = $1 AND status = 'pending' AND ordering_key IS NOT NULL {pending}
                AND ordering_key > $2 ORDER BY 1 LIMIT $3)
             UNION
             (SELECT ordering_key FROM ordering_holds WHERE endpoint = $1 AND ordering_key > $2
              ORDER BY 1 LIMIT $3)
         ) keys ORDER BY k LIMIT $3"
    );
    let rows = query(c, &sql, &[&endpoint, &after, &limit]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The head columns `d.id, e.id, d.status, d.round, d.attempt_count, d.next_attempt_at,
/// d.last_error` and then `d.created_at`.
const HEAD_COLUMNS: &str =
    "d.id, e.id, d.status, d.round, d.attempt_count, d.next_attempt_at, d.last_error, d.created_at";

fn head_from_row(row: &Row) -> StoreResult<(KeyHead, Timestamp)> {
    Ok((
        KeyHead {
            delivery_id: DeliveryId(row.get(0)),
            event_id: row.get(1),
            status: parse(row, 2)?,
            round: u(row.get(3)),
            attempt_count: u(row.get(4)),
            next_attempt_at: opt_ts(row, 5),
            last_error: row.get(6),
        },
        ts(row, 7),
    ))
}

/// `first_two`'s query: `$1` the endpoint, `$2` the keys.
pub(super) const FIRST_TWO: &str =
    "SELECT h.delivery, h.event, h.status, h.round, h.attempt_count, h.next_attempt_at,
            h.last_error, h.created_at, k.key
     FROM unnest($2::text[]) AS k(key) CROSS JOIN LATERAL (
         SELECT d.id AS delivery, e.id AS event, d.status, d.round, d.attempt_count,
                d.next_attempt_at, d.last_error, d.created_at
         FROM deliveries d JOIN events e ON e.seq = d.event_seq
         WHERE d.endpoint = $1 AND d.ordering_key = k.key AND d.status = 'pending'
         ORDER BY d.id LIMIT 2) h";

/// The first two pending deliveries of each of `keys` (a key's head, and when the oldest
/// waiting one was made), in id order: one lateral search per key on `deliveries_by_key`
/// (on current statistics, see [`statistics_current`]).
async fn first_two<C: GenericClient>(
    c: &C,
    endpoint: &str,
    keys: &[String],
) -> StoreResult<HashMap<String, Vec<(KeyHead, Timestamp)>>> {
    let rows = query(c, FIRST_TWO, &[&endpoint, &keys]).await?;
    let mut heads: HashMap<String, Vec<(KeyHead, Timestamp)>> = HashMap::new();
    for row in &rows {
        heads.entry(row.get(8)).or_default().push(head_from_row(row)?);
    }
    for first in heads.values_mut() {
        first.sort_by_key(|(head, _)| head.delivery_id.0);
    }
    Ok(heads)
}

/// `pending_counts`'s query: `$1` the endpoint, `$2` the keys.
pub(super) const PENDING_COUNTS: &str =
    "SELECT k.key, c.n FROM unnest($2::text[]) AS k(key) CROSS JOIN LATERAL (
         SELECT COUNT(*) AS n FROM deliveries d
         WHERE d.endpoint = $1 AND d.ordering_key = k.key AND d.status = 'pending') c";

/// How many deliveries of each of `keys` are pending: one query for the page, a count per key
/// over `deliveries_by_key` (see [`statistics_current`] for why the planner keeps to it).
async fn pending_counts<C: GenericClient>(
    c: &C,
    endpoint: &str,
    keys: &[String],
) -> StoreResult<HashMap<String, u64>> {
    let rows = query(c, PENDING_COUNTS, &[&endpoint, &keys]).await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get::<_, i64>(1).max(0) as u64))
        .collect())
}

/// Brings the planner's statistics of `deliveries` up to date when more of it changed since
/// they were taken than half of what it holds (a burst: autovacuum analyses the table too, but
/// only up to a minute later). On statistics from before a burst of a million deliveries on one
/// endpoint, the planner took the endpoint's `deliveries_pending` range for each key's count
/// and its head, not `deliveries_by_key`: two minutes for a page of a thousand keys against
/// 60–100 ms. Checking costs a read of the table's counters; the `ANALYZE` (a sample of the
/// table, a few hundred milliseconds at a million rows) happens once per burst. A failure
/// (e.g. a role that does not own the table) leaves the statistics as they are.
async fn statistics_current<C: GenericClient>(c: &C) -> StoreResult<()> {
    let stale = query_opt(
        c,
        "SELECT n_mod_since_analyze > GREATEST(n_live_tup / 2, 10000) FROM pg_stat_user_tables
         WHERE relid = 'deliveries'::regclass",
        &[],
    )
    .await?
    .is_some_and(|row| row.get::<_, bool>(0));
    if stale && let Err(e) = c.batch_execute("ANALYZE deliveries").await {
        tracing::debug!(error = %e, "could not analyse the deliveries table");
    }
    Ok(())
}

/// The holds among `keys`, with their held head (None once purged) and since when.
async fn holds_of<C: GenericClient>(
    c: &C,
    endpoint: &str,
    keys: &[String],
) -> StoreResult<HashMap<String, (Option<KeyHead>, Timestamp)>> {
    let rows = query(
        c,
        &format!(
            "SELECT h.held_at, {HEAD_COLUMNS}, h.ordering_key FROM ordering_holds h
             LEFT JOIN deliveries d ON d.id = h.delivery_id LEFT JOIN events e ON e.seq = d.event_seq
             WHERE h.endpoint = $1 AND h.ordering_key = ANY($2::text[])"
        ),
        &[&endpoint, &keys],
    )
    .await?;
    let mut holds = HashMap::new();
    for row in &rows {
        let head = match row.get::<_, Option<i64>>(1) {
            Some(_) => Some(held_head(row)?),
            None => None,
        };
        holds.insert(row.get(9), (head, ts(row, 0)));
    }
    Ok(holds)
}

/// The head columns of a hold's row, which start after `held_at`.
fn held_head(row: &Row) -> StoreResult<KeyHead> {
    Ok(KeyHead {
        delivery_id: DeliveryId(row.get(1)),
        event_id: row.get(2),
        status: parse(row, 3)?,
        round: u(row.get(4)),
        attempt_count: u(row.get(5)),
        next_attempt_at: opt_ts(row, 6),
        last_error: row.get(7),
    })
}

pub(super) async fn ordering_keys<C: GenericClient>(
    c: &C,
    endpoint: &str,
    listing: KeyListing,
    after: Option<String>,
    limit: u32,
) -> StoreResult<KeyPage> {
    let keys = candidates(
        c,
        endpoint,
        listing,
        after.as_deref().unwrap_or(""),
        i64::from(limit),
    )
    .await?;
    if keys.is_empty() {
        return Ok(KeyPage::of(&keys, Vec::new(), listing, limit));
    }
    statistics_current(c).await?;
    // Three reads for the whole page, not three per key: a page of a thousand keys (the
    // metrics' gauges read that many) is then a few milliseconds, not thousands of round trips.
    let mut first = first_two(c, endpoint, &keys).await?;
    let mut counts = pending_counts(c, endpoint, &keys).await?;
    let mut holds = holds_of(c, endpoint, &keys).await?;
    let rows = keys
        .iter()
        .filter_map(|key| {
            key_row(
                key.clone(),
                first.remove(key).unwrap_or_default(),
                counts.remove(key).unwrap_or(0),
                holds.remove(key),
            )
        })
        .collect();
    Ok(KeyPage::of(&keys, rows, listing, limit))
}

pub(super) async fn held_keys<C: GenericClient>(c: &C) -> StoreResult<Vec<HeldKey>> {
    let rows = query(
        c,
        "SELECT endpoint, ordering_key, delivery_id FROM ordering_holds ORDER BY endpoint, ordering_key",
        &[],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| HeldKey {
            endpoint: Arc::from(r.get::<_, String>(0)),
            key: r.get(1),
            delivery: DeliveryId(r.get(2)),
        })
        .collect())
}

pub(super) async fn hold<C: GenericClient>(
    c: &C,
    endpoint: &str,
    key: &str,
    delivery: DeliveryId,
    at: Timestamp,
) -> StoreResult<()> {
    execute(
        c,
        "INSERT INTO ordering_holds (endpoint, ordering_key, delivery_id, held_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (endpoint, ordering_key) DO NOTHING",
        &[&endpoint, &key, &delivery.0, &at.as_millis()],
    )
    .await?;
    Ok(())
}

pub(super) async fn release<C: GenericClient>(
    c: &C,
    endpoint: &str,
    key: &str,
    delivery: DeliveryId,
) -> StoreResult<()> {
    execute(
        c,
        "DELETE FROM ordering_holds WHERE endpoint = $1 AND ordering_key = $2 AND delivery_id = $3",
        &[&endpoint, &key, &delivery.0],
    )
    .await?;
    Ok(())
}
