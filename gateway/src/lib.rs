//! hookgate: a webhook delivery gateway. See `ARCHITECTURE.md` for the map of this crate.

pub mod clock;
pub mod delivery;
pub mod health;
pub mod model;
pub mod plugins;
pub mod policy;
