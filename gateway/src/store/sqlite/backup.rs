//! `hookgate backup`: a consistent copy of a SQLite store, made while the gateway runs.
//!
//! `VACUUM INTO` rather than SQLite's online backup API: it copies from one read transaction,
//! so the copy is the database as of one commit, and in WAL mode that read never blocks the
//! writer (ingestion goes on; the WAL only grows until the copy ends). The backup API instead
//! restarts its copy each time another connection writes between its steps, which under steady
//! ingestion may never finish, unless done in one step, which is what `VACUUM INTO` does
//! anyway, with a compacted copy as a bonus. The copy is written under a temporary name, synced,
//! and renamed: a file with the backup's name is always a whole backup.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, params};

use crate::store::seal::{KeyId, sealed_key_id};
use crate::store::{StoreError, StoreResult};

/// What a backup made.
#[derive(Debug, Clone)]
pub struct SqliteBackup {
    pub bytes: u64,
    /// The key the copy's secrets are sealed under (None: the copy holds no sealed secrets).
    pub key_id: Option<KeyId>,
}

/// Copies the database at `database` to `to`, which must not exist.
pub fn backup_sqlite(database: &Path, to: &Path) -> StoreResult<SqliteBackup> {
    if !database.exists() {
        return Err(StoreError::NotFound(format!(
            "the database {}",
            database.display()
        )));
    }
    if to.exists() {
        return Err(StoreError::Conflict(format!(
            "{} exists; a backup never overwrites a file",
            to.display()
        )));
    }
    let partial = partial_name(to);
    let _ = std::fs::remove_file(&partial);
    let source = Connection::open_with_flags(
        database,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    source.busy_timeout(std::time::Duration::from_secs(30))?;
    let target = partial
        .to_str()
        .ok_or_else(|| StoreError::Internal(format!("{} is not UTF-8", partial.display())))?;
    source.execute("VACUUM INTO ?1", params![target])?;
    drop(source);
    let key_id = copied_key_id(&partial)?;
    let synced = std::fs::File::open(&partial)
        .and_then(|f| f.sync_all())
        .and_then(|()| std::fs::rename(&partial, to))
        .and_then(|()| sync_folder(to));
    if let Err(e) = synced {
        let _ = std::fs::remove_file(&partial);
        return Err(StoreError::Unavailable(format!(
            "cannot finish the backup {}: {e}",
            to.display()
        )));
    }
    let bytes = std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    Ok(SqliteBackup { bytes, key_id })
}

fn partial_name(to: &Path) -> PathBuf {
    let mut name = to.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// The key id of the copy's check value, read from the copy itself (so that it is the key of
/// what was copied, whatever a rekey did meanwhile).
fn copied_key_id(copy: &Path) -> StoreResult<Option<KeyId>> {
    let conn = Connection::open_with_flags(copy, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let check = super::keys::check_value(&conn)?;
    Ok(check.as_deref().and_then(sealed_key_id))
}

fn sync_folder(file: &Path) -> std::io::Result<()> {
    let folder = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::File::open(folder)?.sync_all()
}
