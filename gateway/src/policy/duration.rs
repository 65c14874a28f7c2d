//! Durations as people write and read them in configs and previews: `30s`, `2m`, `1h 30m`.

use std::time::Duration;

/// Parses a duration in humantime syntax: `0s`, `500ms`, `30s`, `2m`, `1h 30m`, `1d`.
///
/// The error is one plain sentence for a config message, naming the text and showing how to
/// write it, never the parser's own words.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    use humantime::DurationError as E;
    const EXAMPLES: &str = "e.g. 30s, 2m, 1h 30m or 1d";
    humantime::parse_duration(text.trim()).map_err(|e| match e {
        E::Empty => format!("a duration may not be empty: write one, {EXAMPLES}"),
        E::UnknownUnit { unit, value, .. } if unit.is_empty() => {
            format!("`{text}` has no unit: write {value}s, {value}m, {value}h or {value}d")
        }
        E::UnknownUnit { unit, .. } => {
            format!("`{text}` has an unknown unit `{unit}`: use ms, s, m, h or d, {EXAMPLES}")
        }
        E::NumberOverflow => format!("`{text}` is too long to be a duration"),
        E::InvalidCharacter(_) | E::NumberExpected(_) => {
            format!("`{text}` is not a duration: write a whole number and a unit, {EXAMPLES}")
        }
    })
}

/// The longest wait or deadline a policy may have: far beyond any receiver's outage, and a
/// bound that keeps a typo (`99999d`) from parking a delivery for centuries.
pub const MAX_POLICY_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// A duration for a table or a chart label: days, hours, minutes and seconds, largest first,
/// zero parts left out (`1h 30m`, `1d 6h 47m 30s`); `0s` for zero; milliseconds below one
/// second (`250ms`) and tenths of a second below a minute (`2.5s`), so the slow start of a
/// backoff curve stays visible; whole seconds above, where a wait jittered by ±20 % gains
/// nothing from more digits.
pub fn humanize_duration(duration: Duration) -> String {
    if duration.is_zero() {
        return "0s".to_owned();
    }
    if duration < Duration::from_micros(999_500) {
        let ms = (duration.as_micros() as f64 / 1000.0).round().max(1.0);
        return format!("{ms:.0}ms");
    }
    if duration < Duration::from_millis(59_950) {
        let tenths = (duration.as_secs_f64() * 10.0).round();
        return if tenths % 10.0 == 0.0 {
            format!("{:.0}s", tenths / 10.0)
        } else {
            format!("{:.1}s", tenths / 10.0)
        };
    }
    let total_s = (duration.as_millis() + 500) / 1000;
    let parts = [
        (total_s / 86_400, "d"),
        (total_s % 86_400 / 3600, "h"),
        (total_s % 3600 / 60, "m"),
        (total_s % 60, "s"),
    ];
    parts
        .iter()
        .filter(|(amount, _)| *amount > 0)
        .map(|(amount, unit)| format!("{amount}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spellings_of_the_spec() {
        let cases = [
            ("0s", 0),
            ("0", 0),
            ("30s", 30),
            ("2m", 120),
            ("1h", 3600),
            ("1h 30m", 5400),
            ("1d", 86_400),
            ("72h", 259_200),
        ];
        for (text, seconds) in cases {
            assert_eq!(parse_duration(text), Ok(Duration::from_secs(seconds)), "{text}");
        }
    }

    #[test]
    fn a_bad_duration_is_one_plain_sentence_with_an_example() {
        let cases = [
            (
                "5x",
                "`5x` has an unknown unit `x`: use ms, s, m, h or d, e.g. 30s, 2m, 1h 30m or 1d",
            ),
            ("10", "`10` has no unit: write 10s, 10m, 10h or 10d"),
            (
                "ten seconds",
                "`ten seconds` is not a duration: write a whole number and a unit, e.g. 30s, 2m, 1h 30m or 1d",
            ),
            (
                "1,5h",
                "`1,5h` is not a duration: write a whole number and a unit, e.g. 30s, 2m, 1h 30m or 1d",
            ),
            (
                "",
                "a duration may not be empty: write one, e.g. 30s, 2m, 1h 30m or 1d",
            ),
            (
                "99999999999999999999d",
                "`99999999999999999999d` is too long to be a duration",
            ),
        ];
        for (text, message) in cases {
            assert_eq!(parse_duration(text), Err(message.to_owned()), "{text}");
        }
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn humanizes_largest_unit_first_and_drops_zero_parts() {
        let cases = [
            (0, "0s"),
            (30_000, "30s"),
            (120_000, "2m"),
            (5_400_000, "1h 30m"),
            (86_400_000, "1d"),
            (110_850_000, "1d 6h 47m 30s"),
            (259_200_000, "3d"),
            (250, "250ms"),
            (5_054, "5.1s"),
            (1_999, "2s"),
            (1_000, "1s"),
            (59_960, "1m"),
            (90_400, "1m 30s"),
        ];
        for (ms, text) in cases {
            assert_eq!(humanize_duration(Duration::from_millis(ms)), text, "{ms} ms");
        }
    }
}
