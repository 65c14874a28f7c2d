#![allow(unreachable_pub)]

//! The gateway's integration tests: one binary, modules named by behaviour. Real HTTP on
//! 127.0.0.1:0, real SQLite in temp dirs, a manual clock instead of sleeps.

#[path = "../support/plugin_build.rs"]
mod plugin_build;
mod support;
#[path = "../support/tls.rs"]
mod tls;
#[path = "../support/webdriver.rs"]
mod webdriver;

mod auth;
mod backpressure;
mod backup;
mod bad_input;
mod binary;
mod channels;
mod cluster;
mod connections;
mod console;
mod content_filters;
mod crash_recovery;
mod dead_letter;
mod destinations;
mod disk_faults;
mod ed25519_signatures;
mod endpoints_api;
mod endpoints_at_scale;
mod event_types;
mod health;
mod idempotency;
mod in_flight;
mod ingest;
mod js_transforms;
mod late_rounds;
mod metrics;
mod ops;
mod ops_cli;
mod ordering;
mod ordering_keys;
mod outbound_auth;
mod outbound_tls;
mod overview;
mod plugin_bindings;
mod plugin_new;
mod plugins_e2e;
mod policies;
mod readiness;
mod recovery;
mod reload;
mod replay;
mod retention;
mod retry_schedule;
mod serve_listen;
mod slow_clients;
mod ssrf;
mod svix_api;
mod svix_fidelity;
mod svix_sdk;
mod tenants;
mod traces;
