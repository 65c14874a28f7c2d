//! A fault-injection harness for hookgate clusters: real nodes (processes) on a private
//! PostgreSQL server, each behind a TCP proxy the test controls, and a receiver whose record
//! a checker judges.
//!
//! - [`pg::PrivatePostgres`]: `initdb` and `pg_ctl` in a temp dir on a free port (as the
//!   `postgres` user when run as root), restarted or stopped at will.
//! - [`proxy::Proxy`]: between one node and the database; cut (connections reset, new ones
//!   refused), delayed (every round trip slower), or its connections dropped.
//! - [`node::Node`]: a gateway process driven with SIGKILL, SIGSTOP/SIGCONT and restarts.
//! - [`receiver::Receiver`]: the endpoints' server; it records every request (which node sent
//!   it, when it arrived and ended) and how many ran at once.
//! - [`checker::check`]: nothing acknowledged lost, each key in order, at most `max_in_flight`
//!   at once, the rate limit for the whole cluster, and the duplicates counted.
//! - [`rig::Rig`] puts them together; [`scenarios`] are the runs the tests and
//!   `hookgate-bench` repeat.
//!
//! Shared by the `faults` test binary and `hookgate-bench` (which includes these files), so it
//! uses only crates both have, and its own small HTTP client.

#![allow(dead_code, reason = "each includer uses a part of the harness")]

pub(crate) mod checker;
pub(crate) mod http;
pub(crate) mod node;
pub(crate) mod pg;
pub(crate) mod proxy;
pub(crate) mod receiver;
pub(crate) mod rig;
pub(crate) mod scenarios;

/// The PostgreSQL tools' folder, or None after saying why the caller skips: `initdb` and
/// `pg_ctl` on PATH or under `/usr/lib/postgresql/*/bin`. With
/// `HOOKGATE_TEST_POSTGRES_REQUIRED` set (CI), their absence is a failure instead.
pub(crate) fn postgres_tools_or_skip(what: &str) -> Option<std::path::PathBuf> {
    match pg::tools() {
        Some(dir) => Some(dir),
        None => {
            assert!(
                std::env::var_os("HOOKGATE_TEST_POSTGRES_REQUIRED").is_none(),
                "HOOKGATE_TEST_POSTGRES_REQUIRED is set but PostgreSQL's initdb and pg_ctl are not installed"
            );
            // Straight to the terminal, past the test harness's output capture: a skip must show.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {what}: needs PostgreSQL's initdb and pg_ctl (apt-get install postgresql)"
            );
            None
        }
    }
}
