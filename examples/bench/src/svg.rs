//! Small hand-written SVG charts of a run: throughput, its share of the floor, latency
//! percentiles, and PostgreSQL's one node against three. Horizontal bars with their value
//! written out, and the target as a dashed mark where there is one.

use std::fmt::Write as _;

use crate::cluster::{APART_KEY, CLUSTER_KEY, ONE_NODE_KEY, PER_CORE_KEY};
use crate::report::{Bound, Results, Target, number};

pub(crate) struct Bar {
    pub(crate) label: String,
    pub(crate) value: f64,
    pub(crate) unit: &'static str,
    pub(crate) target: Option<Target>,
}

const WIDTH: f64 = 820.0;
const LABEL_W: f64 = 300.0;
const ROW_H: f64 = 30.0;
const VALUE_W: f64 = 150.0;
const TOP: f64 = 56.0;

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A horizontal bar chart on a linear scale from zero.
pub(crate) fn bar_chart(title: &str, subtitle: &str, bars: &[Bar]) -> String {
    let max = bars
        .iter()
        .flat_map(|b| [Some(b.value), b.target.map(|t| t.value)])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    // Room right of the longest bar for its value.
    let plot_w = WIDTH - LABEL_W - VALUE_W;
    let x = |v: f64| LABEL_W + (v / max) * plot_w;
    let height = TOP + ROW_H * bars.len() as f64 + 30.0;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="13">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="16" y="24" font-size="16" font-weight="bold">{}</text>
<text x="16" y="43" fill="#555555">{}</text>
"##,
        escape(title),
        escape(subtitle)
    );
    for (i, bar) in bars.iter().enumerate() {
        let y = TOP + ROW_H * i as f64;
        let value = if bar.value.is_finite() { bar.value } else { 0.0 };
        let met = bar.target.map(|t| t.met_by(value));
        let fill = match met {
            Some(false) => "#d9822b",
            _ => "#3b7dd8",
        };
        let _ = write!(
            svg,
            r##"<text x="{lx}" y="{ty}" text-anchor="end">{label}</text>
<rect x="{LABEL_W}" y="{by}" width="{bw:.1}" height="{bh}" fill="{fill}"/>
<text x="{vx:.1}" y="{ty}" fill="#222222">{value} {unit}</text>
"##,
            lx = LABEL_W - 8.0,
            ty = y + 19.0,
            label = escape(&bar.label),
            by = y + 5.0,
            bw = (x(value) - LABEL_W).max(1.0),
            bh = ROW_H - 10.0,
            vx = x(value) + 6.0,
            value = number(bar.value),
            unit = escape(bar.unit),
        );
        if let Some(t) = bar.target {
            let tx = x(t.value);
            let sign = match t.bound {
                Bound::AtLeast => "≥",
                Bound::AtMost => "≤",
            };
            let _ = writeln!(
                svg,
                r##"<line x1="{tx:.1}" y1="{y1}" x2="{tx:.1}" y2="{y2}" stroke="#c0392b" stroke-width="2" stroke-dasharray="4 3"><title>target {sign} {tv}</title></line>"##,
                y1 = y + 2.0,
                y2 = y + ROW_H - 2.0,
                tv = number(t.value),
            );
        }
    }
    let _ = write!(
        svg,
        r##"<text x="16" y="{fy}" fill="#555555" font-size="11">dashed red: target · orange bar: target missed</text>
</svg>
"##,
        fy = height - 10.0
    );
    svg
}

fn bar(results: &Results, key: &str, label: &str, unit: &'static str) -> Option<Bar> {
    let f = results.figures.iter().find(|f| f.key == key)?;
    Some(Bar {
        label: label.to_owned(),
        value: f.median,
        unit,
        target: f.target,
    })
}

/// Ingest events/s at each concurrency and in batches, and end-to-end deliveries/s.
pub(crate) fn throughput_chart(results: &Results, machine: &str) -> String {
    let bars: Vec<Bar> = [
        (
            "loopback_floor",
            "loopback floor (nothing but HTTP)",
            "requests/s",
        ),
        (
            "ingest_subscribed_c64",
            "ingest, 1 KiB, 1 subscriber, 64 clients",
            "events/s",
        ),
        ("ingest_single_c1", "ingest, no subscriber, 1 client", "events/s"),
        (
            "ingest_single_c16",
            "ingest, no subscriber, 16 clients",
            "events/s",
        ),
        (
            "ingest_single_c64",
            "ingest, no subscriber, 64 clients",
            "events/s",
        ),
        ("ingest_batch", "ingest, batches of 100, 4 clients", "events/s"),
        (
            "e2e_1_endpoint",
            "end to end, 1 endpoint, batches",
            "deliveries/s",
        ),
        (
            "e2e_single",
            "end to end, 1 endpoint, single events",
            "deliveries/s",
        ),
        ("e2e_fanout_10", "end to end, fan-out to 10", "deliveries/s"),
    ]
    .into_iter()
    .filter_map(|(key, label, unit)| bar(results, key, label, unit))
    .collect();
    bar_chart(
        "hookgate throughput (medians; every 202 after an fsync'd commit)",
        machine,
        &bars,
    )
}

/// Every throughput as a share of the loopback floor of its run: comparable across machines.
pub(crate) fn floor_share_chart(results: &Results, machine: &str) -> String {
    let floor = results
        .figures
        .iter()
        .find(|f| f.key == "loopback_floor")
        .map_or(String::new(), |f| {
            format!("; floor {} requests/s", number(f.median))
        });
    let bars: Vec<Bar> = results
        .figures
        .iter()
        .filter(|f| f.key.ends_with("_share"))
        .map(|f| Bar {
            label: f
                .label
                .trim_end_matches(" — share of the floor")
                .replace("ingest, ", "")
                .to_owned(),
            value: f.median,
            unit: "× floor",
            target: f.target,
        })
        .collect();
    bar_chart(
        "hookgate throughput as a share of the loopback floor (1 KiB POST → 202, Rust client and server)",
        &format!("{machine}{floor}"),
        &bars,
    )
}

/// PostgreSQL deliveries/s on one node and on three on the same machine, the three measured
/// against the one (None when the run had no PostgreSQL figures).
pub(crate) fn cluster_chart(results: &Results, machine: &str) -> Option<String> {
    let one = bar(results, ONE_NODE_KEY, "1 node", "deliveries/s")?;
    let against_one = Target::at_least(one.value);
    // The nodes apart are the control (no coordination at all), so they have no target.
    let three = [
        (CLUSTER_KEY, "3 nodes, cores split between them", against_one),
        (APART_KEY, "3 single nodes apart, cores split", None),
        (PER_CORE_KEY, "3 nodes, a thread per core each", against_one),
    ]
    .into_iter()
    .filter_map(|(key, label, target)| {
        Some(Bar {
            target,
            ..bar(results, key, label, "deliveries/s")?
        })
    });
    let bars: Vec<Bar> = std::iter::once(one).chain(three).collect();
    Some(bar_chart(
        "PostgreSQL, end to end, fan-out to 10: one node and three on the same cores (medians)",
        &format!("{machine}; PostgreSQL on the same cores; target: 3 nodes ≥ 1; apart: no cluster"),
        &bars,
    ))
}

/// Ingest latency percentiles under load, and the scheduler's lateness.
pub(crate) fn latency_chart(results: &Results, machine: &str) -> String {
    let bars: Vec<Bar> = [
        ("latency_2000_p50", "ingest at 2 000/s offered — p50", "ms"),
        ("latency_2000_p99", "ingest at 2 000/s offered — p99", "ms"),
        ("latency_2000_p999", "ingest at 2 000/s offered — p99.9", "ms"),
        ("ingest_single_c16_p50", "ingest, 16 clients flat out — p50", "ms"),
        ("ingest_single_c16_p99", "ingest, 16 clients flat out — p99", "ms"),
        ("ingest_single_c64_p50", "ingest, 64 clients flat out — p50", "ms"),
        ("ingest_single_c64_p99", "ingest, 64 clients flat out — p99", "ms"),
        ("lateness_p50", "scheduler lateness — p50", "ms"),
        ("lateness_p99", "scheduler lateness — p99", "ms"),
    ]
    .into_iter()
    .filter_map(|(key, label, unit)| bar(results, key, label, unit))
    .collect();
    bar_chart("hookgate latency percentiles (medians of runs)", machine, &bars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_a_bar_and_a_target_mark_per_figure() {
        let mut r = Results::default();
        r.record("latency_2000_p99", "p99", "ms", 3.5, Target::at_most(10.0));
        r.record("lateness_p99", "late", "ms", 7.0, Target::at_most(5.0));
        let svg = latency_chart(&r, "2 cores");
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<rect x=").count(), 2);
        assert_eq!(svg.matches("stroke-dasharray").count(), 2);
        assert!(svg.contains("#d9822b"), "the missed target is marked");
        assert!(svg.contains("3.50 ms"));
    }

    #[test]
    fn the_cluster_chart_holds_three_nodes_against_one() {
        let mut r = Results::default();
        assert!(
            cluster_chart(&r, "2 cores").is_none(),
            "no PostgreSQL run, no chart"
        );
        r.record("pg_e2e_fanout_10", "1", "deliveries/s", 100.0, None);
        r.record("pg_e2e_fanout_10_cluster", "3", "deliveries/s", 90.0, None);
        r.record("pg_e2e_fanout_10_apart", "3 apart", "deliveries/s", 85.0, None);
        let svg = cluster_chart(&r, "2 cores").unwrap();
        assert_eq!(svg.matches("<rect x=").count(), 3);
        assert_eq!(
            svg.matches("stroke-dasharray").count(),
            1,
            "only the cluster's bar: the nodes apart are the control"
        );
        assert!(svg.contains("#d9822b"), "90 against 100 misses");
    }
}
