//! `hookgate migrate`: copies a SQLite store into an empty PostgreSQL one, table by table,
//! keeping every id (event sequence numbers, delivery ids) so that `dlv_…` ids, cursors and
//! links stay valid. Each table is copied in one transaction; the target must be empty.

use std::path::Path;

use rusqlite::types::Value as Sql;
use rusqlite::{Connection, OpenFlags};
use tokio_postgres::types::{ToSql, Type};

use super::schema;
use crate::store::{StoreError, StoreResult};

/// One table to copy: its name, its columns (the same in both schemas) and the serial column
/// whose sequence must continue after the copied ids.
struct Table {
    name: &'static str,
    columns: &'static [&'static str],
    serial: Option<&'static str>,
}

const TABLES: &[Table] = &[
    Table {
        name: "events",
        columns: &[
            "seq",
            "id",
            "topic",
            "event_type",
            "content_type",
            "payload",
            "ordering_key",
            "received_at",
            "tenant",
            "trace_id",
            "trace_span_id",
            "labels",
        ],
        serial: Some("seq"),
    },
    Table {
        name: "deliveries",
        columns: &[
            "id",
            "event_seq",
            "endpoint",
            "status",
            "round",
            "attempt_count",
            "next_attempt_at",
            "last_error",
            "created_at",
            "updated_at",
            "round_started_at",
            "tenant",
            "ordering_key",
        ],
        serial: Some("id"),
    },
    Table {
        name: "attempts",
        columns: &[
            "id",
            "delivery_id",
            "round",
            "n",
            "started_at",
            "duration_ms",
            "status_code",
            "error_kind",
            "error",
            "plugin_note",
            "request_headers",
            "response_headers",
            "response_body",
            "trace_id",
        ],
        serial: Some("id"),
    },
    Table {
        name: "endpoint_health",
        columns: &[
            "endpoint",
            "state",
            "consecutive_failures",
            "failing_since",
            "last_success_at",
            "changed_at",
        ],
        serial: None,
    },
    Table {
        name: "endpoint_history",
        columns: &["id", "endpoint", "state", "at", "reason"],
        serial: Some("id"),
    },
    Table {
        name: "idempotency",
        columns: &["scope", "key", "request_hash", "status", "response", "created_at"],
        serial: None,
    },
    Table {
        name: "api_endpoints",
        columns: &[
            "name",
            "tenant",
            "spec",
            "retiring_secret",
            "retiring_until",
            "created_at",
            "updated_at",
            "version",
            "uid",
        ],
        serial: None,
    },
    Table {
        name: "applications",
        columns: &[
            "id",
            "uid",
            "tenant",
            "name",
            "metadata",
            "rate_limit",
            "created_at",
            "updated_at",
        ],
        serial: None,
    },
    Table {
        name: "event_types",
        columns: &[
            "name",
            "description",
            "archived",
            "deprecated",
            "schemas",
            "feature_flags",
            "group_name",
            "created_at",
            "updated_at",
        ],
        serial: None,
    },
    Table {
        name: "ordering_holds",
        columns: &["endpoint", "ordering_key", "delivery_id", "held_at"],
        serial: None,
    },
    // The secrets are copied sealed, with the check value of the key that sealed them: the
    // PostgreSQL gateway's storage.encryption_key is the SQLite store's key.
    Table {
        name: "encryption",
        columns: &["id", "check_value"],
        serial: None,
    },
];

/// Rows per insert statement and per progress report.
const CHUNK: usize = 500;

/// How far a copy has come: the table being copied, rows copied of it, and its row count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyProgress {
    pub table: &'static str,
    pub copied: u64,
    pub total: u64,
}

/// Copies the SQLite store at `from` into the PostgreSQL database at `to` (migrated first; it
/// must hold no events). Returns the rows copied per table. The SQLite file is opened read-only:
/// stop the gateway first, so that nothing is written meanwhile.
pub async fn copy_sqlite_to_postgres(
    from: &Path,
    to: &str,
    mut progress: impl FnMut(CopyProgress),
) -> StoreResult<Vec<(&'static str, u64)>> {
    let source = Connection::open_with_flags(from, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let version: u32 = source.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version != crate::store::migrations::current_version() {
        return Err(StoreError::Internal(format!(
            "{} has schema version {version}; start this gateway on it once to upgrade it, then copy",
            from.display()
        )));
    }
    let (mut target, connection) = tokio_postgres::connect(to, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    schema::migrate(&mut target).await?;
    let existing: i64 = target.query_one("SELECT COUNT(*) FROM events", &[]).await?.get(0);
    if existing > 0 {
        return Err(StoreError::Conflict(format!(
            "the PostgreSQL database already holds {existing} events; copy into an empty one"
        )));
    }
    let mut copied = Vec::with_capacity(TABLES.len());
    for table in TABLES {
        let n = copy_table(&source, &mut target, table, &mut progress).await?;
        copied.push((table.name, n));
    }
    Ok(copied)
}

async fn copy_table(
    source: &Connection,
    target: &mut tokio_postgres::Client,
    table: &Table,
    progress: &mut impl FnMut(CopyProgress),
) -> StoreResult<u64> {
    let total: i64 = source.query_row(&format!("SELECT COUNT(*) FROM {}", table.name), [], |r| r.get(0))?;
    let total = total.max(0) as u64;
    let columns = table.columns.join(", ");
    let mut stmt = source.prepare(&format!("SELECT {columns} FROM {} ORDER BY rowid", table.name))?;
    let mut rows = stmt.query([])?;
    let tx = target.transaction().await?;
    let mut chunk: Vec<Vec<Sql>> = Vec::with_capacity(CHUNK);
    let mut copied = 0u64;
    progress(CopyProgress {
        table: table.name,
        copied,
        total,
    });
    while let Some(row) = rows.next()? {
        chunk.push(
            (0..table.columns.len())
                .map(|i| row.get::<_, Sql>(i))
                .collect::<Result<_, _>>()?,
        );
        if chunk.len() == CHUNK {
            copied += insert_chunk(&tx, table, &mut chunk).await?;
            progress(CopyProgress {
                table: table.name,
                copied,
                total,
            });
        }
    }
    copied += insert_chunk(&tx, table, &mut chunk).await?;
    if let Some(serial) = table.serial {
        tx.execute(
            &format!(
                "SELECT setval(pg_get_serial_sequence('{0}', '{serial}'), COALESCE(MAX({serial}), 0) + 1, false) FROM {0}",
                table.name
            ),
            &[],
        )
        .await?;
    }
    tx.commit().await?;
    progress(CopyProgress {
        table: table.name,
        copied,
        total,
    });
    Ok(copied)
}

/// Inserts the rows of `chunk` with one multi-row statement and empties it.
async fn insert_chunk(
    tx: &tokio_postgres::Transaction<'_>,
    table: &Table,
    chunk: &mut Vec<Vec<Sql>>,
) -> StoreResult<u64> {
    if chunk.is_empty() {
        return Ok(0);
    }
    let width = table.columns.len();
    let values: Vec<String> = (0..chunk.len())
        .map(|r| {
            let row: Vec<String> = (1..=width).map(|c| format!("${}", r * width + c)).collect();
            format!("({})", row.join(", "))
        })
        .collect();
    let sql = format!(
        "INSERT INTO {} ({}) VALUES {}",
        table.name,
        table.columns.join(", "),
        values.join(", ")
    );
    let stmt = tx.prepare(&sql).await?;
    let params: Vec<Box<dyn ToSql + Sync + Send>> = chunk
        .iter()
        .flatten()
        .zip(stmt.params())
        .map(|(value, ty)| to_postgres(value, ty))
        .collect::<StoreResult<_>>()?;
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect();
    let n = tx.execute(&stmt, &refs).await?;
    chunk.clear();
    Ok(n)
}

/// A SQLite value as the PostgreSQL column `ty` wants it (BIGINT, TEXT, BYTEA or BOOLEAN),
/// NULL included.
fn to_postgres(value: &Sql, ty: &Type) -> StoreResult<Box<dyn ToSql + Sync + Send>> {
    let mismatch = || StoreError::Internal(format!("cannot copy {value:?} into a {ty} column"));
    Ok(match *ty {
        Type::INT8 => Box::new(match value {
            Sql::Null => None,
            Sql::Integer(i) => Some(*i),
            _ => return Err(mismatch()),
        }),
        Type::TEXT => Box::new(match value {
            Sql::Null => None,
            Sql::Text(t) => Some(t.clone()),
            _ => return Err(mismatch()),
        }),
        Type::BYTEA => Box::new(match value {
            Sql::Null => None,
            Sql::Blob(b) => Some(b.clone()),
            Sql::Text(t) => Some(t.clone().into_bytes()),
            _ => return Err(mismatch()),
        }),
        Type::BOOL => Box::new(match value {
            Sql::Null => None,
            Sql::Integer(i) => Some(*i != 0),
            _ => return Err(mismatch()),
        }),
        _ => return Err(mismatch()),
    })
}
