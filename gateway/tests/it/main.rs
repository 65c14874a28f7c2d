#![allow(unreachable_pub)]

//! The gateway's integration tests: one binary, modules named by behaviour. Real HTTP on
//! 127.0.0.1:0, real SQLite in temp dirs, a manual clock instead of sleeps.

mod support;

mod auth;
mod bad_input;
mod crash_recovery;
mod idempotency;
mod ingest;
mod retry_schedule;
mod scheduler_metrics;
