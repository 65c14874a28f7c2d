//! Durations as people write and read them in configs and previews: `30s`, `2m`, `1h 30m`.

use std::time::Duration;

/// Parses a wait or deadline in humantime syntax: `0s`, `30s`, `2m`, `1h 30m`, `1d`.
///
/// The error is a sentence for a config message, naming the text that did not parse.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("`{text}` is not a duration ({e}); write e.g. 30s, 2m, 1h 30m, 1d"))
}

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
    fn a_bad_duration_names_the_text_and_shows_examples() {
        let message = parse_duration("5x").unwrap_err();
        assert!(message.starts_with("`5x` is not a duration"), "{message}");
        assert!(message.ends_with("write e.g. 30s, 2m, 1h 30m, 1d"), "{message}");
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
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
