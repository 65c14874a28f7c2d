//! Reads one histogram or counter out of the gateway's Prometheus text, and quantiles and sums
//! out of the difference of two readings (so that only what happened between them counts).

/// The counter `name` from Prometheus text, summed over its labels; 0 when absent.
pub(crate) fn counter(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| line.split(['{', ' ']).next() == Some(name))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Cumulative bucket counts by upper edge, ascending; the last edge is `+Inf`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Histogram {
    pub(crate) buckets: Vec<(f64, u64)>,
    /// The sum of every recorded value (`<name>_sum`).
    pub(crate) sum: f64,
}

impl Histogram {
    /// The histogram `name` (without labels) from Prometheus text; empty when absent.
    pub(crate) fn parse(text: &str, name: &str) -> Histogram {
        let prefix = format!("{name}_bucket{{le=\"");
        let mut buckets: Vec<(f64, u64)> = text
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix(&prefix)?;
                let (edge, count) = rest.split_once("\"} ")?;
                let edge = if edge == "+Inf" {
                    f64::INFINITY
                } else {
                    edge.parse().ok()?
                };
                Some((edge, count.trim().parse().ok()?))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let sum_prefix = format!("{name}_sum ");
        let sum = text
            .lines()
            .find_map(|line| line.strip_prefix(&sum_prefix)?.trim().parse().ok())
            .unwrap_or(0.0);
        Histogram { buckets, sum }
    }

    /// What was recorded after `earlier` was read.
    pub(crate) fn since(&self, earlier: &Histogram) -> Histogram {
        let before = |edge: f64| {
            earlier
                .buckets
                .iter()
                .find(|(e, _)| *e == edge)
                .map_or(0, |(_, c)| *c)
        };
        Histogram {
            buckets: self
                .buckets
                .iter()
                .map(|(edge, count)| (*edge, count.saturating_sub(before(*edge))))
                .collect(),
            sum: self.sum - earlier.sum,
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.buckets.last().map_or(0, |(_, c)| *c)
    }

    /// The upper edge of the bucket that holds quantile `q`: every value up to it is at most
    /// this. None when nothing was recorded.
    pub(crate) fn quantile_upper_edge(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        self.buckets
            .iter()
            .find(|(_, c)| *c >= rank)
            .map(|(edge, _)| *edge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE x histogram\n\
        x_bucket{le=\"0.0005\"} 10\nx_bucket{le=\"0.0015\"} 95\nx_bucket{le=\"0.0025\"} 99\n\
        x_bucket{le=\"+Inf\"} 100\nx_sum 0.1\nx_count 100\nother_bucket{le=\"1\"} 7\n";

    #[test]
    fn parses_buckets_and_finds_quantiles() {
        let h = Histogram::parse(TEXT, "x");
        assert_eq!(h.buckets.len(), 4);
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile_upper_edge(0.5), Some(0.0015));
        assert_eq!(h.quantile_upper_edge(0.99), Some(0.0025));
        assert_eq!(h.quantile_upper_edge(1.0), Some(f64::INFINITY));
        assert_eq!(h.sum, 0.1);
    }

    #[test]
    fn a_counter_is_summed_over_its_labels() {
        let text = "# TYPE c counter\nc{node=\"a\"} 2\nc{node=\"b\"} 3\nc_other 7\nx_sum 1\n";
        assert_eq!(counter(text, "c"), 5.0);
        assert_eq!(counter("c 4\n", "c"), 4.0);
        assert_eq!(counter(text, "absent"), 0.0);
    }

    #[test]
    fn the_difference_counts_only_what_came_after() {
        let before = Histogram::parse(TEXT, "x");
        let after = Histogram::parse(
            &TEXT
                .replace("} 100", "} 110")
                .replace("} 99", "} 109")
                .replace("x_sum 0.1", "x_sum 0.35"),
            "x",
        );
        let d = after.since(&before);
        assert_eq!(d.count(), 10);
        assert!((d.sum - 0.25).abs() < 1e-12);
        assert_eq!(d.quantile_upper_edge(0.5), Some(0.0025));
        assert_eq!(Histogram::default().quantile_upper_edge(0.5), None);
    }
}
