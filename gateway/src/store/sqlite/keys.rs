//! The SQLite store's key: found, checked and, for a new database, made before anything is
//! written; and the passes that seal what an older database kept in the clear and that seal
//! everything again under a new key.
//!
//! The key is `storage.encryption_key`, else the key file beside the database (`hookgate.db`
//! → `hookgate.key`, mode 0600, the key's base64 on one line), made on the first start of a
//! database that has no encrypted rows. A database with encrypted rows and no key is refused:
//! a new key would make every secret in it unreadable.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use super::{DatabaseFile, SqliteOptions};
use crate::store::seal::{Column, EncryptionKey, Sealer};
use crate::store::{StoreError, StoreResult};

/// The key file of a database: its name with `.key` (`data/hookgate.db` → `data/hookgate.key`).
pub fn key_file_of(database: &Path) -> PathBuf {
    database.with_extension("key")
}

/// The keys the store at `options.path` opens with. Reads the database only (read-only), and
/// writes nothing but a new key file for a database that has no encrypted rows.
pub(super) fn sealer_for(options: &SqliteOptions) -> StoreResult<Sealer> {
    let check = stored_check(&options.database())?;
    let key_file = key_file_of(&options.path);
    let (current, source) = match &options.encryption_key {
        Some(key) => (key.clone(), "storage.encryption_key".to_owned()),
        None => {
            let key = match read_key_file(&key_file)? {
                Some(key) => key,
                None => match &check {
                    Some(check) => return Err(missing_key(&options.path, &key_file, check)),
                    None => write_key_file(&key_file)?,
                },
            };
            (key, format!("the key file {}", key_file.display()))
        }
    };
    let sealer = Sealer::new(current, options.previous_encryption_keys.clone());
    if let Some(check) = check {
        sealer.verify_check(&check).map_err(|mismatch| {
            StoreError::Internal(format!(
                "the database {} does not open with the key of {source}: {mismatch}. Nothing was \
                 written. Give the key it was encrypted with as storage.encryption_key (or \
                 restore its key file {}); while rotating, list the old key in \
                 storage.previous_encryption_keys",
                options.path.display(),
                key_file.display(),
            ))
        })?;
    }
    Ok(sealer)
}

fn missing_key(database: &Path, key_file: &Path, check: &str) -> StoreError {
    let id = crate::store::seal::sealed_key_id(check).map_or_else(|| "?".to_owned(), |id| id.to_string());
    StoreError::Internal(format!(
        "the database {} holds secrets encrypted under key {id}, and its key file {} is missing. \
         Nothing was written. Restore the key file (every copy of the database needs it), or \
         give the key as storage.encryption_key",
        database.display(),
        key_file.display(),
    ))
}

/// The database's check value, read on a read-only connection: None for a database that does
/// not exist yet, predates encryption, or has never sealed anything.
fn stored_check(database: &DatabaseFile) -> StoreResult<Option<String>> {
    if !database.path.exists() {
        return Ok(None);
    }
    let conn = database.open_without_writing()?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    check_value(&conn)
}

/// The check value of the database `conn` reads (None: it predates encryption, or has never
/// sealed anything).
pub(super) fn check_value(conn: &Connection) -> StoreResult<Option<String>> {
    let has_table: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'encryption')",
        [],
        |r| r.get(0),
    )?;
    if !has_table {
        return Ok(None);
    }
    Ok(conn
        .query_row("SELECT check_value FROM encryption WHERE id = 1", [], |r| {
            r.get(0)
        })
        .optional()?)
}

fn read_key_file(path: &Path) -> StoreResult<Option<EncryptionKey>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(StoreError::Internal(format!(
                "cannot read the key file {}: {e}",
                path.display()
            )));
        }
    };
    let key = EncryptionKey::from_base64(&text)
        .map_err(|e| StoreError::Internal(format!("the key file {} {e}", path.display())))?;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            key_file = %path.display(),
            "the key file can be read by other users; `chmod 600` it"
        );
    }
    Ok(Some(key))
}

/// A new key in a new file (mode 0600 from its creation, never over an existing file), synced
/// with its folder before anything is sealed under it.
fn write_key_file(path: &Path) -> StoreResult<EncryptionKey> {
    let key = EncryptionKey::generate();
    let failed = |e: std::io::Error| {
        StoreError::Internal(format!("cannot write the key file {}: {e}", path.display()))
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(failed)?;
    writeln!(file, "{}", key.to_base64()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    let folder = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::File::open(folder)
        .and_then(|dir| dir.sync_all())
        .map_err(failed)?;
    tracing::info!(
        key_file = %path.display(),
        key_id = %key.id(),
        "made the storage encryption key; keep it with every backup of the database"
    );
    Ok(key)
}

/// On a database that has never sealed anything: seals every secret it holds and writes the
/// check value, in one transaction. A database that has is left as it is.
///
/// The plaintext must not stay behind in the files: `secure_delete` zeroes the space the old
/// values leave in their pages, and a truncating checkpoint empties the log, which may still
/// hold pages written before (by a gateway that stopped without checkpointing).
pub(super) fn seal_plaintext(conn: &mut Connection, sealer: &Sealer) -> StoreResult<()> {
    conn.pragma_update(None, "secure_delete", true)?;
    let count = seal_plaintext_rows(conn, sealer);
    conn.pragma_update(None, "secure_delete", false)?;
    if count? > 0 {
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    }
    Ok(())
}

fn seal_plaintext_rows(conn: &mut Connection, sealer: &Sealer) -> StoreResult<u64> {
    let tx = conn.transaction()?;
    let sealed_before: bool = tx.query_row("SELECT EXISTS (SELECT 1 FROM encryption)", [], |r| r.get(0))?;
    if sealed_before {
        return Ok(0);
    }
    let count = reseal_all(&tx, &|column, stored: &[u8], _row: &str| {
        Ok(Some(sealer.seal_bytes(column, stored)))
    })?;
    tx.execute(
        "INSERT INTO encryption (id, check_value) VALUES (1, ?1)",
        params![sealer.check_value()],
    )?;
    tx.commit()?;
    if count > 0 {
        tracing::info!(values = count, key_id = %sealer.current_id(), "encrypted the secrets the database kept in the clear");
    }
    Ok(count)
}

/// Seals every value not under the current key again under it, then the check value; returns
/// how many values changed. Runs inside the writer's transaction.
pub(super) fn rekey(conn: &Connection, sealer: &Sealer) -> StoreResult<u64> {
    let count = reseal_all(conn, &|column, stored: &[u8], row: &str| {
        sealer.resealed(column, stored, row)
    })?;
    conn.execute(
        "INSERT INTO encryption (id, check_value) VALUES (1, ?1)
         ON CONFLICT (id) DO UPDATE SET check_value = excluded.check_value",
        params![sealer.check_value()],
    )?;
    Ok(count)
}

/// What a pass makes of one stored value: its new form, or None to leave it.
type Reseal<'a> = dyn Fn(Column, &[u8], &str) -> StoreResult<Option<String>> + 'a;

/// Runs `reseal` over every sealed column; returns how many values it changed.
fn reseal_all(conn: &Connection, reseal: &Reseal<'_>) -> StoreResult<u64> {
    let mut count = 0;
    let endpoints: Vec<(String, String, Option<String>)> = conn
        .prepare("SELECT name, spec, retiring_secret FROM api_endpoints")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (name, spec, retiring) in endpoints {
        let row = format!("endpoint `{name}`");
        if let Some(spec) = reseal(Column::EndpointSpec, spec.as_bytes(), &row)? {
            conn.execute(
                "UPDATE api_endpoints SET spec = ?2 WHERE name = ?1",
                params![name, spec],
            )?;
            count += 1;
        }
        if let Some(retiring) = retiring
            && let Some(sealed) = reseal(Column::RetiringSecret, retiring.as_bytes(), &row)?
        {
            conn.execute(
                "UPDATE api_endpoints SET retiring_secret = ?2 WHERE name = ?1",
                params![name, sealed],
            )?;
            count += 1;
        }
    }
    // Idempotency answers may be many (a day of keys): a page at a time.
    let mut after = 0i64;
    loop {
        let page: Vec<(i64, Vec<u8>)> = conn
            .prepare_cached(
                "SELECT rowid, response FROM idempotency WHERE rowid > ?1 ORDER BY rowid LIMIT 1000",
            )?
            .query_map(params![after], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let Some(&(last, _)) = page.last() else { break };
        for (rowid, response) in page {
            if let Some(sealed) = reseal(Column::IdempotencyAnswer, &response, "an idempotency answer")? {
                conn.prepare_cached("UPDATE idempotency SET response = ?2 WHERE rowid = ?1")?
                    .execute(params![rowid, sealed.into_bytes()])?;
                count += 1;
            }
        }
        after = last;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use bytes::Bytes;

    use super::*;
    use crate::model::Timestamp;
    use crate::store::{ApiEndpointRow, IdempotencyRecord, SqliteStore, Store};

    const SPEC: &str = r#"{"url":"https://example.com/hook","secret":"whsec_dG9wIHNlY3JldA==","headers":{"authorization":"Bearer sk_live_1234"}}"#;

    fn endpoint() -> ApiEndpointRow {
        ApiEndpointRow {
            name: "billing".into(),
            tenant: None,
            spec: SPEC.into(),
            uid: None,
            retiring: Some(("whsec_b2xkIHNlY3JldA==".into(), Timestamp::from_millis(5))),
            version: 1,
            created_at: Timestamp::from_millis(1),
            updated_at: Timestamp::from_millis(1),
        }
    }

    fn answer() -> IdempotencyRecord {
        IdempotencyRecord {
            scope: "s".into(),
            key: "k".into(),
            request_hash: vec![1; 32],
            status: 200,
            response: Bytes::from_static(br#"{"key":"whsec_cm90YXRlZA=="}"#),
            created_at: Timestamp::from_millis(2),
        }
    }

    /// Every byte of the database's files, for finding plaintext in them.
    fn file_bytes(db: &Path) -> Vec<u8> {
        ["", "-wal"]
            .iter()
            .flat_map(|suffix| {
                let mut name = db.as_os_str().to_owned();
                name.push(suffix);
                std::fs::read(PathBuf::from(name)).unwrap_or_default()
            })
            .collect()
    }

    fn contains(haystack: &[u8], needle: &str) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    /// The SHA-256 of every file in `dir` (the database, its `-wal` and `-shm` if any, the key
    /// file), by name.
    fn folder_hash(dir: &Path) -> Vec<(String, String)> {
        let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let path = entry.unwrap().path();
                let digest = ring::digest::digest(&ring::digest::SHA256, &std::fs::read(&path).unwrap());
                (path.display().to_string(), hex::encode(digest.as_ref()))
            })
            .collect();
        files.sort();
        files
    }

    async fn store_with_secrets(db: &Path) -> SqliteStore {
        let store = SqliteStore::open(SqliteOptions::new(db)).unwrap();
        store.save_api_endpoint(endpoint(), None).await.unwrap();
        store.save_idempotency(answer()).await.unwrap();
        store
    }

    #[tokio::test]
    async fn a_new_database_gets_a_private_key_file_and_keeps_no_secret_in_the_clear() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("hookgate.db");
        let store = store_with_secrets(&db).await;
        let key_file = dir.path().join("hookgate.key");
        let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the key file is the owner's alone");
        EncryptionKey::from_base64(&std::fs::read_to_string(&key_file).unwrap()).unwrap();

        let raw = file_bytes(&db);
        for secret in [
            "dG9wIHNlY3JldA",
            "sk_live_1234",
            "b2xkIHNlY3JldA",
            "cm90YXRlZA",
            "example.com",
        ] {
            assert!(!contains(&raw, secret), "`{secret}` is in the database files");
        }
        // The rows come out as they went in.
        assert_eq!(crate::store::every_api_endpoint(&store).await, vec![endpoint()]);
        assert_eq!(store.idempotency_record("s", "k").await.unwrap(), Some(answer()));
        store.close().await;
    }

    #[tokio::test]
    async fn a_database_that_kept_secrets_in_the_clear_is_encrypted_on_its_first_start_with_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("hookgate.db");
        store_with_secrets(&db).await.close().await;
        // As a gateway before encryption left it: plaintext rows, schema version 7, no key.
        {
            let conn = Connection::open(&db).unwrap();
            // (and before the migrations that came after it)
            conn.execute_batch(
                "DROP TABLE encryption; DROP TABLE write_probe; DROP INDEX attempts_failed_by_time;
                 DROP INDEX deliveries_dead; DROP INDEX deliveries_settled;
                 DROP INDEX deliveries_pending;
                 CREATE INDEX deliveries_pending ON deliveries (endpoint, next_attempt_at) WHERE status = 'pending';
                 CREATE INDEX deliveries_by_status ON deliveries (status, id);
                 CREATE INDEX deliveries_by_update ON deliveries (updated_at);
                 DROP INDEX api_endpoints_by_uid; DROP INDEX api_endpoints_by_tenant;
                 ALTER TABLE api_endpoints DROP COLUMN uid; ALTER TABLE api_endpoints DROP COLUMN version;
                 PRAGMA user_version = 7;",
            )
            .unwrap();
            conn.execute(
                "UPDATE api_endpoints SET spec = ?1, retiring_secret = 'whsec_b2xkIHNlY3JldA=='",
                params![SPEC],
            )
            .unwrap();
            conn.execute(
                "UPDATE idempotency SET response = ?1",
                params![&answer().response[..]],
            )
            .unwrap();
        }
        std::fs::remove_file(dir.path().join("hookgate.key")).unwrap();

        let store = SqliteStore::open(SqliteOptions::new(&db)).unwrap();
        assert!(dir.path().join("hookgate.key").exists(), "a key was made");
        assert_eq!(crate::store::every_api_endpoint(&store).await, vec![endpoint()]);
        assert_eq!(store.idempotency_record("s", "k").await.unwrap(), Some(answer()));
        store.close().await;
        let raw = file_bytes(&db);
        assert!(!contains(&raw, "sk_live_1234") && !contains(&raw, "cm90YXRlZA"));
    }

    #[tokio::test]
    async fn a_missing_or_wrong_key_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("hookgate.db");
        store_with_secrets(&db).await.close().await;
        let key_file = dir.path().join("hookgate.key");
        let key = std::fs::read_to_string(&key_file).unwrap();
        std::fs::remove_file(&key_file).unwrap();
        let before = folder_hash(dir.path());

        let Err(e) = SqliteStore::open(SqliteOptions::new(&db)) else {
            panic!("opened without its key")
        };
        let e = e.to_string();
        assert!(e.contains("is missing") && e.contains("hookgate.key"), "{e}");
        assert_eq!(
            folder_hash(dir.path()),
            before,
            "nothing written, no new key made for a database with encrypted rows"
        );

        let wrong = EncryptionKey::generate();
        let Err(e) = SqliteStore::open(SqliteOptions {
            encryption_key: Some(wrong.clone()),
            ..SqliteOptions::new(&db)
        }) else {
            panic!("opened with a wrong key")
        };
        let right = EncryptionKey::from_base64(&key).unwrap();
        let e = e.to_string();
        assert!(
            e.contains(&right.id().to_string()) && e.contains(&wrong.id().to_string()),
            "{e}"
        );
        assert_eq!(folder_hash(dir.path()), before, "nothing written");
        assert!(!key_file.exists());

        let store = SqliteStore::open(SqliteOptions {
            encryption_key: Some(right),
            ..SqliteOptions::new(&db)
        })
        .unwrap();
        assert_eq!(crate::store::every_api_endpoint(&store).await, vec![endpoint()]);
        store.close().await;
    }

    /// A gateway that died before a checkpoint leaves its check value in the log only: the
    /// key check reads the log too, and still refuses to make a new key.
    #[tokio::test]
    async fn a_check_value_still_in_the_log_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live.db");
        let store = store_with_secrets(&live).await;
        // The files as a crash would leave them: the database and its log, no key file.
        let crashed = tempfile::tempdir().unwrap();
        let db = crashed.path().join("hookgate.db");
        std::fs::copy(&live, &db).unwrap();
        std::fs::copy(
            dir.path().join("live.db-wal"),
            crashed.path().join("hookgate.db-wal"),
        )
        .unwrap();
        store.close().await;

        let Err(e) = SqliteStore::open(SqliteOptions::new(&db)) else {
            panic!("a new key was made for a database whose log holds encrypted rows")
        };
        assert!(e.to_string().contains("is missing"), "{e}");
        assert!(!crashed.path().join("hookgate.key").exists());
    }

    #[tokio::test]
    async fn a_rekey_moves_every_secret_to_the_new_key_and_the_old_one_can_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("hookgate.db");
        store_with_secrets(&db).await.close().await;
        let old =
            EncryptionKey::from_base64(&std::fs::read_to_string(dir.path().join("hookgate.key")).unwrap())
                .unwrap();
        let new = EncryptionKey::generate();
        let rotating = SqliteStore::open(SqliteOptions {
            encryption_key: Some(new.clone()),
            previous_encryption_keys: vec![old.clone()],
            ..SqliteOptions::new(&db)
        })
        .unwrap();
        assert_eq!(
            crate::store::every_api_endpoint(&rotating).await,
            vec![endpoint()],
            "the old key still opens"
        );
        // The spec, the retiring secret, the answer.
        assert_eq!(rotating.rekey().await.unwrap(), 3);
        assert_eq!(
            rotating.rekey().await.unwrap(),
            0,
            "nothing is left under the old key"
        );
        rotating.close().await;

        let only_new = SqliteStore::open(SqliteOptions {
            encryption_key: Some(new),
            ..SqliteOptions::new(&db)
        })
        .unwrap();
        assert_eq!(
            crate::store::every_api_endpoint(&only_new).await,
            vec![endpoint()]
        );
        assert_eq!(
            only_new.idempotency_record("s", "k").await.unwrap(),
            Some(answer())
        );
        only_new.close().await;
        let Err(e) = SqliteStore::open(SqliteOptions {
            encryption_key: Some(old),
            ..SqliteOptions::new(&db)
        }) else {
            panic!("the old key opened a database rekeyed away from it")
        };
        assert!(e.to_string().contains("does not open with the key"), "{e}");
    }
}
