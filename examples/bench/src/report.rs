//! Figures, their runs and medians, the table on stdout and the JSON file.

use serde::{Deserialize, Serialize};

/// Which way a target points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) enum Bound {
    #[serde(rename = ">=")]
    AtLeast,
    #[serde(rename = "<=")]
    AtMost,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Target {
    pub(crate) bound: Bound,
    pub(crate) value: f64,
}

impl Target {
    pub(crate) fn at_least(value: f64) -> Option<Target> {
        Some(Target {
            bound: Bound::AtLeast,
            value,
        })
    }

    pub(crate) fn at_most(value: f64) -> Option<Target> {
        Some(Target {
            bound: Bound::AtMost,
            value,
        })
    }

    pub(crate) fn met_by(&self, value: f64) -> bool {
        match self.bound {
            Bound::AtLeast => value >= self.value,
            Bound::AtMost => value <= self.value,
        }
    }
}

/// One reported figure with the value of every run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Figure {
    pub(crate) key: String,
    pub(crate) label: String,
    pub(crate) unit: String,
    pub(crate) runs: Vec<f64>,
    pub(crate) median: f64,
    pub(crate) target: Option<Target>,
    pub(crate) met: Option<bool>,
}

/// Figures in the order they were first recorded.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Results {
    pub(crate) figures: Vec<Figure>,
    /// Scenarios that could not run, and why.
    pub(crate) skipped: Vec<String>,
}

impl Results {
    /// The last run of figure `over` as a share of `under`'s, when both have as many runs: the
    /// two are then of the same run, not one of an earlier run's.
    pub(crate) fn last_ratio(&self, under: &str, over: &str) -> Option<f64> {
        let runs = |key: &str| Some(&self.figures.iter().find(|f| f.key == key)?.runs);
        let (under, over) = (runs(under)?, runs(over)?);
        (under.len() == over.len()).then_some(over.last()? / under.last()?)
    }

    /// Adds one run's value of a figure.
    pub(crate) fn record(&mut self, key: &str, label: &str, unit: &str, value: f64, target: Option<Target>) {
        let figure = match self.figures.iter_mut().position(|f| f.key == key) {
            Some(i) => &mut self.figures[i],
            None => {
                self.figures.push(Figure {
                    key: key.to_owned(),
                    label: label.to_owned(),
                    unit: unit.to_owned(),
                    runs: Vec::new(),
                    median: f64::NAN,
                    target,
                    met: None,
                });
                self.figures.last_mut().expect("just pushed")
            }
        };
        figure.runs.push(value);
        figure.median = median(&figure.runs);
        figure.met = figure.target.map(|t| t.met_by(figure.median));
    }

    pub(crate) fn table(&self) -> String {
        let mut rows = vec![[
            "figure".to_owned(),
            "median".to_owned(),
            "unit".to_owned(),
            "runs".to_owned(),
            "target".to_owned(),
            String::new(),
        ]];
        for f in &self.figures {
            rows.push([
                f.label.clone(),
                number(f.median),
                f.unit.clone(),
                f.runs.iter().map(|v| number(*v)).collect::<Vec<_>>().join(" / "),
                f.target.map_or(String::new(), |t| {
                    format!(
                        "{} {}",
                        match t.bound {
                            Bound::AtLeast => "≥",
                            Bound::AtMost => "≤",
                        },
                        number(t.value)
                    )
                }),
                match f.met {
                    Some(true) => "met".into(),
                    Some(false) => "MISSED".into(),
                    None => String::new(),
                },
            ]);
        }
        let widths: Vec<usize> = (0..6)
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for (i, row) in rows.iter().enumerate() {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(c, (cell, w))| {
                    let pad = w - cell.chars().count();
                    if c == 1 {
                        format!("{}{cell}", " ".repeat(pad))
                    } else {
                        format!("{cell}{}", " ".repeat(pad))
                    }
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
            if i == 0 {
                out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 10));
                out.push('\n');
            }
        }
        for s in &self.skipped {
            out.push_str(&format!("skipped: {s}\n"));
        }
        out
    }
}

/// The median (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// A figure as people read it: whole numbers from 100 up, three significant digits below.
pub(crate) fn number(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_targets() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        let mut r = Results::default();
        r.record("a", "A", "events/s", 9000.0, Target::at_least(8000.0));
        r.record("a", "A", "events/s", 7000.0, None);
        r.record("a", "A", "events/s", 8500.0, None);
        assert_eq!(r.figures[0].median, 8500.0);
        assert_eq!(r.figures[0].met, Some(true));
        r.record("b", "B", "ms", 12.0, Target::at_most(10.0));
        assert_eq!(r.figures[1].met, Some(false));
        let table = r.table();
        assert!(table.contains("9000 / 7000 / 8500"), "{table}");
        assert!(table.contains("MISSED"), "{table}");
    }

    #[test]
    fn a_ratio_is_of_two_figures_of_the_same_run() {
        let mut r = Results::default();
        r.record("one", "1", "/s", 100.0, None);
        assert_eq!(r.last_ratio("one", "three"), None, "no second figure yet");
        r.record("three", "3", "/s", 90.0, None);
        assert_eq!(r.last_ratio("one", "three"), Some(0.9));
        r.record("one", "1", "/s", 200.0, None);
        assert_eq!(
            r.last_ratio("one", "three"),
            None,
            "run 2 of one against run 1 of three"
        );
        r.record("three", "3", "/s", 220.0, None);
        assert_eq!(r.last_ratio("one", "three"), Some(1.1));
    }

    #[test]
    fn figures_read_back_from_their_json_for_a_redraw() {
        let mut r = Results::default();
        r.record("a", "A", "events/s", 9000.0, Target::at_least(8000.0));
        r.record("b", "B", "ms", 12.0, Target::at_most(10.0));
        r.record("c", "C", "µs", 3.0, None);
        let json = serde_json::to_string(&r.figures).unwrap();
        let back: Vec<Figure> = serde_json::from_str(&json).unwrap();
        let redrawn = Results {
            figures: back,
            skipped: Vec::new(),
        };
        assert_eq!(redrawn.table(), r.table());
        assert_eq!(redrawn.figures[1].target, Target::at_most(10.0));
    }
}
