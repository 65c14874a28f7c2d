//! Charts of schedules, as self-contained SVG: users would rather look at a schedule than
//! read it. Plain SVG 1.1 with inline attributes, no scripts, no external fonts, so
//! the files render the same in a browser, on GitHub and in an image viewer.

use std::fmt::Write as _;
use std::time::Duration;

use crate::policy::{BackoffFunction, Phase, Policy, humanize_duration, preview};

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 24.0;
/// Room for the title and, under it, the legend row: the legend never covers data.
const TOP: f64 = 72.0;
const BOTTOM: f64 = 64.0;
const LEGEND_Y: f64 = 44.0;

/// Bars beyond which a preview chart shows only the first ones (and says so), so that a
/// 100 016-attempt policy stays a small, readable file.
const MAX_BARS: usize = 120;

/// Steps of a linear axis of durations, in seconds: values people name.
const DURATION_STEPS_S: [f64; 24] = [
    0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
    14_400.0, 21_600.0, 43_200.0, 86_400.0, 172_800.0, 259_200.0, 604_800.0,
];

/// Steps of a linear axis of plain numbers of seconds.
const NUMBER_STEPS: [f64; 13] = [
    0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 25.0, 50.0, 100.0, 200.0, 500.0,
];

/// Ticks of a logarithmic axis of durations, about one per order of magnitude.
const LOG_TICKS_S: [f64; 9] = [0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 21_600.0, 86_400.0, 604_800.0];

/// At most this many intervals on a linear axis.
const MAX_LINEAR_TICKS: f64 = 6.0;

fn phase_colour(phase: Phase) -> &'static str {
    match phase {
        Phase::Initial => "#6b7280",
        Phase::Schedule => "#2563eb",
        Phase::NoDelay => "#9333ea",
        Phase::PreBackoff => "#0891b2",
        Phase::Backoff => "#ea580c",
        Phase::PostBackoff => "#16a34a",
    }
}

const DEADLINE_COLOUR: &str = "#dc2626";

fn curve_colour(function: BackoffFunction) -> &'static str {
    match function {
        BackoffFunction::Linear => "#2563eb",
        BackoffFunction::Arithmetic => "#16a34a",
        BackoffFunction::Geometric => "#ea580c",
        BackoffFunction::Exponential => "#9333ea",
    }
}

/// A value axis: maps seconds to a 0..=1 height, linear from 0 or logarithmic.
enum Scale {
    Linear { max_s: f64, step_s: f64 },
    Log { min_s: f64, max_s: f64 },
}

impl Scale {
    /// A linear axis from 0 with a tenth of headroom above `max_s`, in steps from `steps`.
    fn linear(max_s: f64, steps: &[f64]) -> Scale {
        let top_s = if max_s > 0.0 { max_s * 1.1 } else { 1.0 };
        let step_s = steps
            .iter()
            .copied()
            .find(|step| top_s / step <= MAX_LINEAR_TICKS)
            .unwrap_or_else(|| (top_s / MAX_LINEAR_TICKS).ceil());
        Scale::Linear {
            max_s: (top_s / step_s).ceil() * step_s,
            step_s,
        }
    }

    /// Logarithmic when the waits span more than two orders of magnitude (a 30 s wait next to
    /// a 2 d one would be invisible on a linear axis), linear otherwise.
    fn for_waits(values_s: &[f64]) -> Scale {
        let max_s = values_s.iter().copied().fold(0.0_f64, f64::max);
        let min_positive_s = values_s
            .iter()
            .copied()
            .filter(|v| *v > 0.0)
            .fold(f64::INFINITY, f64::min);
        if max_s > 0.0 && max_s / min_positive_s > 100.0 {
            let min_s = LOG_TICKS_S
                .iter()
                .rev()
                .copied()
                .find(|t| *t < min_positive_s)
                .unwrap_or(min_positive_s / 10.0);
            Scale::Log {
                min_s,
                max_s: max_s * 1.3,
            }
        } else {
            Scale::linear(max_s, &DURATION_STEPS_S)
        }
    }

    fn fraction(&self, value_s: f64) -> f64 {
        match *self {
            Scale::Linear { max_s, .. } => (value_s / max_s).clamp(0.0, 1.0),
            Scale::Log { min_s, max_s } => {
                if value_s <= min_s {
                    0.0
                } else {
                    ((value_s / min_s).ln() / (max_s / min_s).ln()).clamp(0.0, 1.0)
                }
            }
        }
    }

    fn ticks_s(&self) -> Vec<f64> {
        match *self {
            Scale::Linear { max_s, step_s } => (0..)
                .map(|k| f64::from(k) * step_s)
                .take_while(|t| *t <= max_s + step_s * 1e-6)
                .collect(),
            Scale::Log { min_s, max_s } => LOG_TICKS_S
                .iter()
                .copied()
                .filter(|t| *t >= min_s && *t <= max_s)
                .collect(),
        }
    }

    fn is_log(&self) -> bool {
        matches!(self, Scale::Log { .. })
    }
}

fn plot_width() -> f64 {
    WIDTH - LEFT - RIGHT
}

fn plot_height() -> f64 {
    HEIGHT - TOP - BOTTOM
}

/// The y coordinate of a 0..=1 height.
fn y_of(fraction: f64) -> f64 {
    TOP + plot_height() * (1.0 - fraction)
}

fn baseline() -> f64 {
    TOP + plot_height()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn duration_label(seconds: f64) -> String {
    humanize_duration(Duration::from_secs_f64(seconds.max(0.0)))
}

fn number_label(seconds: f64) -> String {
    if seconds.fract() == 0.0 {
        format!("{seconds:.0}")
    } else {
        format!("{seconds:.1}")
    }
}

fn open_svg(out: &mut String, title: &str) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold" fill="#111827">{}</text>"##,
        WIDTH / 2.0,
        escape(title)
    );
}

/// Horizontal grid lines with their labels, the two axes, and the axis titles.
fn axes(out: &mut String, scale: &Scale, label: fn(f64) -> String, x_title: &str, y_title: &str) {
    for tick_s in scale.ticks_s() {
        let y = y_of(scale.fraction(tick_s));
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e7eb"/>"##,
            WIDTH - RIGHT
        );
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#374151">{}</text>"##,
            LEFT - 6.0,
            y + 4.0,
            label(tick_s)
        );
    }
    let baseline = baseline();
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{baseline:.1}" stroke="#111827"/>"##
    );
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{baseline:.1}" x2="{:.1}" y2="{baseline:.1}" stroke="#111827"/>"##,
        WIDTH - RIGHT
    );
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#111827">{}</text>"##,
        LEFT + plot_width() / 2.0,
        HEIGHT - 16.0,
        escape(x_title)
    );
    let y_title = if scale.is_log() {
        format!("{y_title} (log scale)")
    } else {
        y_title.to_owned()
    };
    let mid_y = TOP + plot_height() / 2.0;
    let _ = writeln!(
        out,
        r##"<text x="18" y="{mid_y:.1}" text-anchor="middle" fill="#111827" transform="rotate(-90 18 {mid_y:.1})">{}</text>"##,
        escape(&y_title)
    );
}

/// x-axis labels for items `1..=count`, thinned to about 20.
fn x_labels(out: &mut String, count: usize, x_of: impl Fn(usize) -> f64) {
    let every = count.div_ceil(20).max(1);
    for k in 1..=count {
        if k == 1 || k % every == 0 {
            let _ = writeln!(
                out,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#374151">{k}</text>"##,
                x_of(k),
                baseline() + 16.0
            );
        }
    }
}

/// A legend row between the title and the plot: coloured swatches with labels.
fn legend(out: &mut String, entries: &[(&str, String)]) {
    // Helvetica at 12 px averages under 7 px a character; the row is centred on the plot.
    let widths: Vec<f64> = entries
        .iter()
        .map(|(_, label)| 18.0 + label.chars().count() as f64 * 6.6 + 18.0)
        .collect();
    let total: f64 = widths.iter().sum();
    let mut x = (LEFT + (plot_width() - total) / 2.0).max(8.0);
    for ((colour, label), width) in entries.iter().zip(widths) {
        let _ = writeln!(
            out,
            r##"<rect x="{x:.1}" y="{:.1}" width="12" height="12" fill="{colour}"/>"##,
            LEGEND_Y - 10.0
        );
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{LEGEND_Y:.1}" fill="#111827">{}</text>"##,
            x + 18.0,
            escape(label)
        );
        x += width;
    }
}

/// A bar chart of a policy's waits (without jitter, deadline applied): one bar per attempt,
/// its height the wait before it, coloured by phase; an attempt brought forward to the
/// deadline is red. The axis is logarithmic when the waits span more than two orders of
/// magnitude; a zero wait is a thin line on the baseline. Policies of more than 120
/// attempts show their first 120 and say so.
pub fn render_preview_svg(policy: &Policy) -> String {
    let attempts = preview(policy);
    let shown = &attempts[..attempts.len().min(MAX_BARS)];
    let waits_s: Vec<f64> = shown.iter().map(|a| a.wait.as_secs_f64()).collect();
    let scale = Scale::for_waits(&waits_s);
    let title = format!(
        "Policy {}: the wait before each attempt (without jitter)",
        policy.name
    );
    let x_title = if shown.len() < attempts.len() {
        format!("attempt (the first {} of {})", shown.len(), attempts.len())
    } else {
        format!("attempt (all {})", attempts.len())
    };
    let mut out = String::new();
    open_svg(&mut out, &title);
    axes(
        &mut out,
        &scale,
        duration_label,
        &x_title,
        "wait before the attempt",
    );

    let slot = plot_width() / shown.len().max(1) as f64;
    let bar_width = (slot * 0.7).max(0.5);
    let x_center = |n: usize| LEFT + slot * (n as f64 - 0.5);
    for a in shown {
        let colour = if a.brought_forward() {
            DEADLINE_COLOUR
        } else {
            phase_colour(a.phase)
        };
        let top = y_of(scale.fraction(a.wait.as_secs_f64()));
        let height = (baseline() - top).max(1.5);
        let _ = writeln!(
            out,
            r#"<rect x="{:.2}" y="{:.2}" width="{bar_width:.2}" height="{height:.2}" fill="{colour}"><title>attempt {}: wait {}, {} after the event ({})</title></rect>"#,
            x_center(a.n as usize) - bar_width / 2.0,
            baseline() - height,
            a.n,
            humanize_duration(a.wait),
            humanize_duration(a.at),
            a.phase.label()
        );
    }
    x_labels(&mut out, shown.len(), x_center);

    let mut phases: Vec<Phase> = Vec::new();
    for a in shown {
        if !phases.contains(&a.phase) {
            phases.push(a.phase);
        }
    }
    let mut entries: Vec<(&str, String)> = phases
        .iter()
        .map(|p| (phase_colour(*p), p.label().to_owned()))
        .collect();
    if let Some(last) = shown.iter().find(|a| a.brought_forward()) {
        entries.push((
            DEADLINE_COLOUR,
            format!("brought forward to the deadline, {}", humanize_duration(last.at)),
        ));
    }
    legend(&mut out, &entries);
    out.push_str("</svg>\n");
    out
}

/// The four SNS backoff curves for `n` backoff retries rising from `min_s` to `max_s`, on
/// one linear chart in seconds with a legend, like the figure in the SNS documentation.
pub fn render_backoff_curves_svg(min_s: f64, max_s: f64, n: u32) -> String {
    let n = n.max(1);
    let min_s = if min_s.is_finite() { min_s.max(0.0) } else { 0.0 };
    let max_s = if max_s.is_finite() {
        max_s.max(min_s)
    } else {
        min_s
    };
    let scale = Scale::linear(max_s, &NUMBER_STEPS);
    let title = format!(
        "SNS backoff functions: {n} retries from {} s to {} s",
        number_label(min_s),
        number_label(max_s)
    );
    let mut out = String::new();
    open_svg(&mut out, &title);
    axes(
        &mut out,
        &scale,
        number_label,
        "backoff retry",
        "delay before the retry (s)",
    );

    let x_of = |i: usize| {
        if n == 1 {
            LEFT + plot_width() / 2.0
        } else {
            LEFT + 20.0 + (plot_width() - 40.0) * (i as f64 - 1.0) / f64::from(n - 1)
        }
    };
    for function in BackoffFunction::ALL {
        let colour = curve_colour(function);
        let delays_s: Vec<f64> = (1..=n).map(|i| function.delay_s(i, n, min_s, max_s)).collect();
        let points: Vec<String> = delays_s
            .iter()
            .enumerate()
            .map(|(k, delay_s)| format!("{:.1},{:.1}", x_of(k + 1), y_of(scale.fraction(*delay_s))))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            points.join(" ")
        );
        for (k, delay_s) in delays_s.iter().enumerate() {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{function} retry {}: {delay_s:.1} s</title></circle>"#,
                x_of(k + 1),
                y_of(scale.fraction(*delay_s)),
                k + 1
            );
        }
    }
    x_labels(&mut out, n as usize, x_of);
    let entries: Vec<(&str, String)> = BackoffFunction::ALL
        .iter()
        .map(|f| (curve_colour(*f), f.as_str().to_owned()))
        .collect();
    legend(&mut out, &entries);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that every tag is closed in order: enough to catch a broken SVG without an XML
    /// parser among the dependencies.
    fn assert_well_formed(svg: &str) {
        assert!(
            svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            "{svg}"
        );
        let mut open: Vec<&str> = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unterminated tag") + start;
            let tag = &rest[start + 1..end];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                open.push(tag.split_whitespace().next().unwrap_or(""));
            }
            rest = &rest[end + 1..];
        }
        assert!(open.is_empty(), "unclosed {open:?}");
        assert!(
            !svg.contains("NaN") && !svg.contains("inf"),
            "bad number in {svg}"
        );
    }

    #[test]
    fn the_preview_chart_has_a_bar_per_attempt_axes_and_a_legend() {
        let svg = render_preview_svg(&Policy::standard());
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<title>attempt ").count(), 9);
        assert!(svg.contains("wait before the attempt (log scale)"));
        assert!(svg.contains(">initial</text>") && svg.contains(">schedule</text>"));
        assert!(svg.contains("brought forward to the deadline, 3d"));
        assert!(svg.contains("attempt (all 9)"));
    }

    #[test]
    fn the_preview_chart_of_a_long_policy_shows_its_first_bars_only() {
        let svg = render_preview_svg(&Policy::preset("sns-aws-managed").unwrap());
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<title>attempt ").count(), 120);
        assert!(svg.contains("attempt (the first 120 of 100016)"));
        assert!(svg.len() < 100_000, "{} bytes", svg.len());
    }

    #[test]
    fn the_preview_chart_of_flat_waits_uses_a_linear_axis() {
        let svg = render_preview_svg(&Policy::preset("sns-http-default").unwrap());
        assert_well_formed(&svg);
        assert!(svg.contains("wait before the attempt</text>"));
        assert!(!svg.contains("log scale"));
    }

    #[test]
    fn the_backoff_curves_chart_draws_the_four_functions_with_a_legend() {
        let svg = render_backoff_curves_svg(5.0, 260.0, 10);
        assert_well_formed(&svg);
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert_eq!(svg.matches("<circle").count(), 40);
        for function in BackoffFunction::ALL {
            assert!(svg.contains(&format!(">{function}</text>")), "{function}");
        }
        assert!(svg.contains("exponential retry 9: 98.8 s"), "{svg}");
        assert!(svg.contains(">backoff retry</text>"));
        assert!(svg.contains("delay before the retry (s)"));
        assert!(svg.contains("10 retries from 5 s to 260 s"));
    }

    /// `docs/backoff-curves.svg` is this chart; regenerate it with
    /// `HOOKGATE_BLESS=1 cargo test -p hookgate --lib charts`.
    #[test]
    fn docs_backoff_curves_svg_is_up_to_date() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/backoff-curves.svg");
        let svg = render_backoff_curves_svg(5.0, 260.0, 10);
        if std::env::var_os("HOOKGATE_BLESS").is_some() {
            std::fs::create_dir_all(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs")).unwrap();
            std::fs::write(path, &svg).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == svg,
            "docs/backoff-curves.svg is stale: run HOOKGATE_BLESS=1 cargo test -p hookgate --lib charts"
        );
    }
}
