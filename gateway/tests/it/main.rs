#![allow(unreachable_pub)]

//! The gateway's integration tests: one binary, modules named by behaviour. Real HTTP on
//! 127.0.0.1:0, real SQLite in temp dirs, a manual clock instead of sleeps.

mod support;

mod auth;
mod backpressure;
mod bad_input;
mod crash_recovery;
mod disk_faults;
mod idempotency;
mod ingest;
mod ops;
mod ops_cli;
mod reload;
mod retry_schedule;
mod slow_clients;
mod ssrf;
