//! hookgate: a webhook delivery gateway. See `ARCHITECTURE.md` for the map of this crate.
//!
//! Tests and embedders start a gateway with [`Gateway::start`]; the binary's command line is
//! [`cli::main`].

pub mod api;
pub mod attempt;
pub mod charts;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod commit;
pub mod config;
pub mod console;
pub mod delivery;
pub mod endpoint_admin;
pub mod endpoints;
pub mod event_types;
pub mod fence;
pub mod filter;
pub mod health;
pub mod ingest;
pub mod model;
pub mod ordering_watch;
pub mod plugins;
pub mod policy;
pub mod recovery;
pub mod reload;
pub mod scheduler;
pub mod server;
pub mod store;
pub mod supervisor;
pub mod telemetry;
pub mod traces;

pub use reload::{ReloadOutcome, Reloader};
pub use supervisor::{Gateway, GatewayOptions, runtime};
