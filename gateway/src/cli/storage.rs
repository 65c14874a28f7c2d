//! The operator's commands on the store itself: `hookgate backup` (a consistent copy of a
//! running SQLite gateway) and `hookgate storage rekey` (every secret encrypted again under
//! the current key).

use std::path::Path;
use std::process::ExitCode;

use crate::config::Config;
use crate::store::{KeyId, backup_sqlite, key_file_of};
use crate::telemetry::Metrics;

/// `hookgate backup --config FILE --to PATH`.
pub(super) fn backup(config: &Config, to: &Path) -> ExitCode {
    let storage = &config.storage;
    if storage.url.is_some() {
        eprintln!(
            "this gateway's store is PostgreSQL (storage.url): back it up with PostgreSQL's own \
             tools, e.g. `pg_dump --format=custom --file {} \"$DATABASE_URL\"` (or the database \
             host's snapshots and point-in-time recovery); restore with `pg_restore`. The dump \
             holds the secrets encrypted under storage.encryption_key: keep that key apart from \
             the dumps, a restored database needs it.",
            to.display()
        );
        return ExitCode::FAILURE;
    }
    match backup_sqlite(&storage.path, to) {
        Ok(made) => {
            say!(
                "backed up {} to {} ({} bytes): the database as of one commit, taken while it ran",
                storage.path.display(),
                to.display(),
                made.bytes
            );
            say!("{}", key_note(made.key_id, config));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: backup of {} failed: {e}", storage.path.display());
            ExitCode::FAILURE
        }
    }
}

/// What the copy needs besides itself: the key its secrets are encrypted under.
fn key_note(key_id: Option<KeyId>, config: &Config) -> String {
    let Some(id) = key_id else {
        return "the copy holds no encrypted secrets".to_owned();
    };
    let source = match &config.storage.encryption_key {
        Some(_) => "this gateway's storage.encryption_key".to_owned(),
        None => format!("the key file {}", key_file_of(&config.storage.path).display()),
    };
    format!(
        "the copy's secrets are encrypted under key {id}: the copy is usable only with that key, \
         {source}. Keep the key apart from the backups (whoever has both can read every secret), \
         and restore it with the copy"
    )
}

/// `hookgate storage rekey --config FILE`.
pub(super) fn rekey(config: Config) -> ExitCode {
    let Some(result) = super::block_on(async {
        let store = crate::supervisor::open_store(&config, None, &Metrics::new(), "rekey").await?;
        let resealed = store.rekey().await;
        store.close().await;
        anyhow::Ok(resealed?)
    }) else {
        return ExitCode::FAILURE;
    };
    match result {
        Ok(resealed) => {
            say!(
                "encrypted {resealed} values again under the current key; every secret and the \
                 check value are under it now, so storage.previous_encryption_keys can go"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
