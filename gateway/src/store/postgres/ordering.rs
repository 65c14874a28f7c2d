//! An endpoint's ordering keys on PostgreSQL (see `store::ordering`), and the holds.

use super::*;
use crate::store::ordering::{KeyHead, KeyListing, KeyPage, OrderingKeyRow, key_row};

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

async fn one_key<C: GenericClient>(
    c: &C,
    endpoint: &str,
    key: String,
) -> StoreResult<Option<OrderingKeyRow>> {
    let first = query(
        c,
        &format!(
            "SELECT {HEAD_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq
             WHERE d.endpoint = $1 AND d.ordering_key = $2 AND d.status = 'pending' ORDER BY d.id LIMIT 2"
        ),
        &[&endpoint, &key],
    )
    .await?
    .iter()
    .map(head_from_row)
    .collect::<StoreResult<Vec<_>>>()?;
    let pending: i64 = query(
        c,
        "SELECT COUNT(*) FROM deliveries WHERE endpoint = $1 AND ordering_key = $2 AND status = 'pending'",
        &[&endpoint, &key],
    )
    .await?[0]
        .get(0);
    let hold = query_opt(
        c,
        &format!(
            "SELECT h.held_at, {HEAD_COLUMNS} FROM ordering_holds h
             LEFT JOIN deliveries d ON d.id = h.delivery_id LEFT JOIN events e ON e.seq = d.event_seq
             WHERE h.endpoint = $1 AND h.ordering_key = $2"
        ),
        &[&endpoint, &key],
    )
    .await?;
    let hold = match hold {
        Some(row) => {
            let head = match row.get::<_, Option<i64>>(1) {
                Some(_) => Some(held_head(&row)?),
                None => None,
            };
            Some((head, ts(&row, 0)))
        }
        None => None,
    };
    Ok(key_row(key, first, pending.max(0) as u64, hold))
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
    let mut rows = Vec::with_capacity(keys.len());
    for key in &keys {
        rows.extend(one_key(c, endpoint, key.clone()).await?);
    }
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
