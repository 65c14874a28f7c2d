//! hookgate: a webhook delivery gateway. See `ARCHITECTURE.md` for the map of this crate.

pub mod clock;
pub mod model;
pub mod policy;
