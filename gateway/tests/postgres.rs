//! The integration suite (`tests/it`) once more, on PostgreSQL: one test list, two stores.
//!
//! Runs the `it` test binary cargo built beside this one with `HOOKGATE_TEST_BACKEND=postgres`,
//! so that every `TestGateway` gets a schema of its own (see `postgres_url_for` in
//! `tests/it/support.rs`), then drops those schemas. Needs `HOOKGATE_TEST_POSTGRES`, a URL to
//! an existing database where the test user may create schemas, e.g.
//! `postgres://postgres@127.0.0.1/test`; without it the test says that it was skipped.
//! `HOOKGATE_TEST_POSTGRES_REQUIRED=1` (set by CI) turns the skip into a failure.

use std::path::PathBuf;
use std::process::Command;

/// Tests that run the real binary on its own SQLite file, or that are about SQLite itself
/// (the writer queue, `storage.max_size`): the first run of the suite covers them.
const SQLITE_ONLY: &[&str] = &[
    "kill_9",
    "late_rounds",
    "ops_cli",
    "backpressure",
    "disk_faults",
    "real_binary",
    "real_attempts",
    "embedded_default",
];

#[test]
fn the_integration_suite_passes_on_postgresql() {
    let Ok(admin) = std::env::var("HOOKGATE_TEST_POSTGRES") else {
        assert!(
            std::env::var_os("HOOKGATE_TEST_POSTGRES_REQUIRED").is_none(),
            "HOOKGATE_TEST_POSTGRES_REQUIRED is set but HOOKGATE_TEST_POSTGRES is not"
        );
        // Straight to the terminal, past the test harness's output capture: a skip must show.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {}: needs HOOKGATE_TEST_POSTGRES (e.g. postgres://postgres@127.0.0.1/test)",
            std::thread::current().name().unwrap_or("a PostgreSQL test")
        );
        return;
    };
    let it = it_binary();
    let mut command = Command::new(&it);
    command.env("HOOKGATE_TEST_BACKEND", "postgres");
    for name in SQLITE_ONLY {
        command.args(["--skip", name]);
    }
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", it.display()));
    drop_test_schemas(&admin);
    assert!(
        status.success(),
        "the integration suite failed on PostgreSQL (see above)"
    );
}

/// The newest `it-*` test executable in this binary's folder (cargo builds every test target
/// before it runs any).
fn it_binary() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let dir = me.parent().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("it-") && !name.contains('.')
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .expect("the `it` test binary next to this one: run `cargo test -p hookgate`")
}

fn drop_test_schemas(admin: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(admin, tokio_postgres::NoTls)
            .await
            .expect("connect to HOOKGATE_TEST_POSTGRES");
        tokio::spawn(connection);
        let names = client
            .query(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'hg\\_it\\_%'",
                &[],
            )
            .await
            .unwrap();
        for row in names {
            let name: String = row.get(0);
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                .await
                .unwrap_or_else(|e| panic!("dropping {name}: {e}"));
        }
    });
}
