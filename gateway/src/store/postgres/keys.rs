//! The PostgreSQL store's key (`storage.encryption_key`, required with `storage.url`): every
//! node of a database must have it. The database keeps a check value sealed under it; a node
//! whose keys do not open the check value refuses to start before it writes anything. The
//! first node with a key seals what an older database kept in the clear.

use deadpool_postgres::Object;
use tokio_postgres::{Client, Transaction};

use crate::store::seal::{Column, Sealer};
use crate::store::{StoreError, StoreResult};

/// Serialises the sealing passes of the nodes sharing a schema: the first start's and a rekey.
const SEAL_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('hookgate-seal:' || current_schema(), 0))";

/// Refuses `sealer` when its keys do not open the database's check value. Reads only.
pub(super) async fn check_key(client: &Client, sealer: &Sealer) -> StoreResult<()> {
    let has_table: bool = client
        .query_one("SELECT to_regclass('encryption') IS NOT NULL", &[])
        .await?
        .get(0);
    if !has_table {
        return Ok(());
    }
    let check: Option<String> = client
        .query_opt("SELECT check_value FROM encryption WHERE id = 1", &[])
        .await?
        .map(|row| row.get(0));
    match check {
        Some(check) => verify(sealer, &check),
        None => Ok(()),
    }
}

fn verify(sealer: &Sealer, check: &str) -> StoreResult<()> {
    sealer.verify_check(check).map_err(|mismatch| {
        StoreError::Internal(format!(
            "the PostgreSQL database does not open with storage.encryption_key: {mismatch}. \
             Nothing was written. Every node of a database needs the same \
             storage.encryption_key; while rotating, list the old key in \
             storage.previous_encryption_keys"
        ))
    })
}

/// On a database that has never sealed anything: seals every secret it holds and writes the
/// check value, in one transaction. A node that finds it done checks its key against it once
/// more (another node may have sealed since `check_key`).
pub(super) async fn seal_plaintext(client: &mut Client, sealer: &Sealer) -> StoreResult<()> {
    let tx = client.transaction().await?;
    tx.execute(SEAL_LOCK, &[]).await?;
    let check: Option<String> = tx
        .query_opt("SELECT check_value FROM encryption WHERE id = 1", &[])
        .await?
        .map(|row| row.get(0));
    if let Some(check) = check {
        return verify(sealer, &check);
    }
    let count = reseal_all(&tx, &|column, stored: &[u8], _row: &str| {
        Ok(Some(sealer.seal_bytes(column, stored)))
    })
    .await?;
    tx.execute(
        "INSERT INTO encryption (id, check_value) VALUES (1, $1)",
        &[&sealer.check_value()],
    )
    .await?;
    tx.commit().await?;
    if count > 0 {
        tracing::info!(values = count, key_id = %sealer.current_id(), "encrypted the secrets the database kept in the clear");
    }
    Ok(())
}

/// Seals every value not under the current key again under it, then the check value, in one
/// transaction; returns how many values changed.
pub(super) async fn rekey(conn: &mut Object, sealer: &Sealer) -> StoreResult<u64> {
    let tx = conn.transaction().await?;
    tx.execute(SEAL_LOCK, &[]).await?;
    let count = reseal_all(&tx, &|column, stored: &[u8], row: &str| {
        sealer.resealed(column, stored, row)
    })
    .await?;
    tx.execute(
        "INSERT INTO encryption (id, check_value) VALUES (1, $1)
         ON CONFLICT (id) DO UPDATE SET check_value = excluded.check_value",
        &[&sealer.check_value()],
    )
    .await?;
    tx.commit().await?;
    Ok(count)
}

/// What a pass makes of one stored value: its new form, or None to leave it.
type Reseal<'a> = dyn Fn(Column, &[u8], &str) -> StoreResult<Option<String>> + Sync + 'a;

/// Runs `reseal` over every sealed column; returns how many values it changed.
async fn reseal_all(tx: &Transaction<'_>, reseal: &Reseal<'_>) -> StoreResult<u64> {
    let mut count = 0;
    let endpoints = tx
        .query(
            "SELECT name, spec, retiring_secret FROM api_endpoints ORDER BY name FOR UPDATE",
            &[],
        )
        .await?;
    for row in endpoints {
        let (name, spec, retiring): (String, String, Option<String>) = (row.get(0), row.get(1), row.get(2));
        let what = format!("endpoint `{name}`");
        if let Some(spec) = reseal(Column::EndpointSpec, spec.as_bytes(), &what)? {
            tx.execute(
                "UPDATE api_endpoints SET spec = $2 WHERE name = $1",
                &[&name, &spec],
            )
            .await?;
            count += 1;
        }
        if let Some(retiring) = retiring
            && let Some(sealed) = reseal(Column::RetiringSecret, retiring.as_bytes(), &what)?
        {
            tx.execute(
                "UPDATE api_endpoints SET retiring_secret = $2 WHERE name = $1",
                &[&name, &sealed],
            )
            .await?;
            count += 1;
        }
    }
    count += reseal_answers(tx, reseal).await?;
    Ok(count)
}

/// The idempotency answers, which may be many (a day of keys): a page at a time.
async fn reseal_answers(tx: &Transaction<'_>, reseal: &Reseal<'_>) -> StoreResult<u64> {
    let mut count = 0;
    let mut after: Option<(String, String)> = None;
    loop {
        let (scope, key) = after.clone().unwrap_or_default();
        let page = tx
            .query(
                "SELECT scope, key, response FROM idempotency
                 WHERE $3 OR (scope, key) > ($1, $2) ORDER BY scope, key LIMIT 1000",
                &[&scope, &key, &after.is_none()],
            )
            .await?;
        let Some(last) = page.last() else { break };
        after = Some((last.get(0), last.get(1)));
        for row in &page {
            let response: Vec<u8> = row.get(2);
            if let Some(sealed) = reseal(Column::IdempotencyAnswer, &response, "an idempotency answer")? {
                let (scope, key): (String, String) = (row.get(0), row.get(1));
                tx.execute(
                    "UPDATE idempotency SET response = $3 WHERE scope = $1 AND key = $2",
                    &[&scope, &key, &sealed.into_bytes()],
                )
                .await?;
                count += 1;
            }
        }
    }
    Ok(count)
}
