//! `Retry-After` parsing on arbitrary header values and clocks: a receiver controls the value,
//! so it must never panic, and what it yields must lie between now and now + 24 h.

#![no_main]

use hookgate::delivery::{RETRY_AFTER_CAP, parse_retry_after};
use hookgate::model::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (i64, &str)| {
    let (now_ms, value) = input;
    // Gateway clocks run from 1970 to far beyond today; keep `now + 24 h` representable.
    let now = Timestamp::from_millis(now_ms.rem_euclid(1 << 50));
    if let Some(at) = parse_retry_after(value, now) {
        assert!(at >= now, "{value:?}: {at:?} is before {now:?}");
        assert!(at <= now.plus(RETRY_AFTER_CAP), "{value:?}: {at:?} is past the cap");
    }
});
