//! `Retry-After` (RFC 9110 §10.2.3) as an absolute time, the way the retry policy needs it.

use std::time::Duration;

use crate::model::Timestamp;

/// The fixed upper bound on how long a receiver may push the next attempt out (README "How delivery
/// works").
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(24 * 60 * 60);

/// Parses `Retry-After: 120` (delta-seconds) or an HTTP-date into the absolute time the
/// receiver asked for.
///
/// The result is never earlier than `now` (a date in the past means "now") and never later
/// than `now + 24 h`: a receiver may slow retries down, but not stall a delivery past the cap.
/// `now` is the gateway clock (maybe simulated), so delta-seconds are simulated seconds.
/// Anything else — empty, negative, fractional, signed, unparseable — is `None`, and the
/// policy's own schedule applies. Total: never panics, whatever the input.
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Timestamp> {
    let value = value.trim_matches(|c| c == ' ' || c == '\t');
    if value.is_empty() {
        return None;
    }
    let cap = now.plus(RETRY_AFTER_CAP);
    let at = if value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only: delta-seconds. More digits than a u64 holds is still "very long".
        let seconds = value.parse::<u64>().unwrap_or(u64::MAX);
        let wait = Duration::from_secs(seconds.min(RETRY_AFTER_CAP.as_secs()));
        now.plus(wait)
    } else {
        let date = httpdate::parse_http_date(value).ok()?;
        Timestamp::from_system_time(date)
    };
    Some(at.clamp(now, cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2021-02-25T15:02:10Z
    const NOW: Timestamp = Timestamp::from_millis(1_614_265_330_000);

    #[test]
    fn delta_seconds_are_added_to_now() {
        assert_eq!(
            parse_retry_after("120", NOW),
            Some(NOW.plus(Duration::from_secs(120)))
        );
        assert_eq!(parse_retry_after("0", NOW), Some(NOW));
        assert_eq!(
            parse_retry_after(" 7 ", NOW),
            Some(NOW.plus(Duration::from_secs(7)))
        );
    }

    #[test]
    fn http_dates_in_all_three_formats_are_absolute() {
        let in_an_hour = Timestamp::from_millis(1_614_268_930_000); // 16:02:10Z
        for value in [
            "Thu, 25 Feb 2021 16:02:10 GMT",
            "Thursday, 25-Feb-21 16:02:10 GMT",
            "Thu Feb 25 16:02:10 2021",
        ] {
            assert_eq!(parse_retry_after(value, NOW), Some(in_an_hour), "{value}");
        }
    }

    #[test]
    fn a_past_date_means_now() {
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", NOW), Some(NOW));
    }

    #[test]
    fn waits_beyond_24_hours_are_capped() {
        let cap = Some(NOW.plus(RETRY_AFTER_CAP));
        assert_eq!(parse_retry_after("86401", NOW), cap);
        assert_eq!(parse_retry_after("86400", NOW), cap);
        assert_eq!(parse_retry_after("99999999999999999999999999999", NOW), cap);
        assert_eq!(parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", NOW), cap);
        assert_eq!(
            parse_retry_after("86399", NOW),
            Some(NOW.plus(Duration::from_secs(86399)))
        );
    }

    #[test]
    fn garbage_is_none() {
        for value in [
            "",
            "   ",
            "-5",
            "+5",
            "1.5",
            "1e3",
            "soon",
            "120s",
            "0x10",
            "Thu, 25 Feb 2021 16:02:10",
            "Thu, 32 Feb 2021 16:02:10 GMT",
            "Thu, 25 Feb 2021 25:02:10 GMT",
            "\u{0}",
            "٣",
            "１２",
        ] {
            assert_eq!(parse_retry_after(value, NOW), None, "{value:?}");
        }
    }

    #[test]
    fn extreme_clocks_do_not_overflow() {
        let late = Timestamp::from_millis(i64::MAX - 5);
        assert_eq!(
            parse_retry_after("100", late),
            Some(Timestamp::from_millis(i64::MAX))
        );
        let early = Timestamp::from_millis(i64::MIN + 5);
        assert_eq!(
            parse_retry_after("Thu, 25 Feb 2021 16:02:10 GMT", early),
            Some(early.plus(RETRY_AFTER_CAP))
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_stays_within_now_and_the_cap(
            value in proptest::string::string_regex("(?s).{0,64}").unwrap(),
            now_ms in proptest::num::i64::ANY,
        ) {
            let now = Timestamp::from_millis(now_ms);
            if let Some(at) = parse_retry_after(&value, now) {
                proptest::prop_assert!(at >= now);
                proptest::prop_assert!(at <= now.plus(RETRY_AFTER_CAP));
            }
        }

        #[test]
        fn any_digit_string_is_accepted(digits in "[0-9]{1,40}") {
            let at = parse_retry_after(&digits, NOW);
            proptest::prop_assert!(at.is_some());
        }
    }
}
