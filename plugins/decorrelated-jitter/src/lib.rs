//! Decorrelated jitter backoff: each wait is drawn uniformly between `base_ms` and three times
//! the previous wait, capped at `cap_ms`. Waits grow roughly exponentially while retries from
//! many deliveries spread out instead of arriving together.
//!
//! Config: `base_ms` (default 1000), `cap_ms` (default 3600000, one hour). Unknown keys are
//! ignored. A `Retry-After` from the receiver is honoured: the wait is never shorter than it.
//! The randomness is the host's `random` value, so a test can pin it.

wit_bindgen::generate!({ world: "backoff", path: "../../wit" });

use hookgate::plugin::config;

struct DecorrelatedJitter;

impl Guest for DecorrelatedJitter {
    fn next_delay(context: RetryContext) -> Result<Decision, PluginError> {
        let base_ms = number("base_ms", 1_000)?.max(1);
        let cap_ms = number("cap_ms", 3_600_000)?.max(base_ms);
        let previous_ms = context.previous_delay_ms.unwrap_or(base_ms).max(base_ms);
        let upper_ms = previous_ms.saturating_mul(3).min(cap_ms);
        let span = upper_ms - base_ms;
        let drawn_ms = base_ms + context.random % span.saturating_add(1);
        let wait_ms = drawn_ms.max(context.retry_after_ms.unwrap_or(0));
        Ok(Decision::RetryInMs(wait_ms))
    }
}

fn number(key: &str, default: u64) -> Result<u64, PluginError> {
    match config::get(key) {
        None => Ok(default),
        Some(text) => text.trim().parse().map_err(|_| PluginError {
            code: "bad_config".into(),
            message: format!("`{key}` must be a whole number of milliseconds, not `{text}`"),
        }),
    }
}

export!(DecorrelatedJitter);
