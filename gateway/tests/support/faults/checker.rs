//! Judges what the receiver saw against what the nodes acknowledged: nothing acknowledged
//! lost, each ordering key's events in the order they were acknowledged, at most
//! `max_in_flight` requests of an endpoint at once, `max_per_second` for the whole cluster,
//! and the duplicates counted (with those explained by a freeze apart).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::receiver::Seen;

/// An event a node acknowledged (202, or 409 for an id it had already committed).
#[derive(Debug, Clone)]
pub(crate) struct Acked {
    pub(crate) id: String,
    pub(crate) key: Option<String>,
    pub(crate) seq: u64,
}

/// An endpoint's limits, as configured.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limits {
    /// One ordering key's events are sent one after another, in order.
    pub(crate) ordered: bool,
    pub(crate) max_in_flight: Option<usize>,
    pub(crate) max_per_second: Option<u32>,
}

/// A node frozen at `at` (SIGSTOP), and thawed at `thawed` (SIGCONT) if it was.
#[derive(Debug, Clone)]
pub(crate) struct Freeze {
    pub(crate) node: String,
    pub(crate) at: Instant,
    pub(crate) thawed: Option<Instant>,
}

/// A node started again after a kill at `at`: it begins with a full rate bucket, as a node
/// taking over does.
#[derive(Debug, Clone)]
pub(crate) struct Restart {
    pub(crate) node: String,
    pub(crate) at: Instant,
}

/// The attempts an endpoint may have in flight when its config sets no limit.
const DEFAULT_IN_FLIGHT: usize = hookgate::config::defaults::MAX_IN_FLIGHT_PER_ENDPOINT as usize;

/// The window over which the rate of an endpoint is counted.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(5);
/// How long after a SIGSTOP a request of the frozen node may still arrive: it was written
/// before the stop (the receiver's clock and the test's are the same, but the receiver runs
/// on a busy machine).
/// How much earlier than its arrival a request may have been started. The limit counts starts,
/// the receiver arrivals: a window of arrivals can hold the starts of a little more than a
/// window when its first requests were slow on the way, or the receiver late to see them (it
/// shares two cores with three nodes, their database and the load). CI saw 121 in 5 s at
/// 20/s from one node, twice: a tenth of a second of such lag.
pub(crate) const ARRIVAL_SLACK: Duration = Duration::from_millis(500);
pub(crate) const FREEZE_GRACE: Duration = Duration::from_millis(200);

#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// Events × endpoints acknowledged.
    pub(crate) acknowledged: usize,
    /// (path, id) acknowledged and never received.
    pub(crate) lost: Vec<(String, String)>,
    pub(crate) requests: usize,
    /// Requests beyond the first of each (path, id).
    pub(crate) duplicates: usize,
    /// Of those, the ones another node sent again after a node froze, when the frozen node
    /// had sent it within the second before its freeze: an attempt on the wire, or one whose
    /// outcome was not yet recorded (outcomes are committed in groups, moments later).
    pub(crate) duplicates_at_freeze: usize,
    /// A request that arrived after a later event of its key had arrived.
    pub(crate) inversions: Vec<String>,
    /// The most requests of each path at once, as the receiver counted them.
    pub(crate) most_at_once: HashMap<String, usize>,
    pub(crate) over_in_flight: Vec<String>,
    /// The most requests of a rate-limited path in any [`RATE_WINDOW`].
    pub(crate) most_in_window: HashMap<String, usize>,
    pub(crate) over_rate: Vec<String>,
}

impl Verdict {
    /// What broke a promise: lost, out of order, over a limit.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.lost.is_empty() {
            out.push(format!(
                "{} acknowledged deliveries lost, e.g. {:?}",
                self.lost.len(),
                &self.lost[..self.lost.len().min(5)]
            ));
        }
        out.extend(self.inversions.iter().take(5).cloned());
        out.extend(self.over_in_flight.iter().cloned());
        out.extend(self.over_rate.iter().cloned());
        out
    }

    pub(crate) fn summary(&self) -> String {
        format!(
            "acknowledged {} deliveries; received {} requests: lost {}, duplicates {} ({} of an attempt running at a freeze), \
             order inversions {}, most at once {:?}, most in {RATE_WINDOW:?} {:?}",
            self.acknowledged,
            self.requests,
            self.lost.len(),
            self.duplicates,
            self.duplicates_at_freeze,
            self.inversions.len(),
            sorted(&self.most_at_once),
            sorted(&self.most_in_window),
        )
    }
}

fn sorted(map: &HashMap<String, usize>) -> Vec<(&str, usize)> {
    let mut v: Vec<(&str, usize)> = map.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    v.sort();
    v
}

/// Judges `seen` (every request, any order) for the events `acked`, each due at every path of
/// `paths`, with each path's `limits`, the receiver's count of requests at once, and the
/// freezes and restarts of the run.
pub(crate) fn check(
    acked: &[Acked],
    paths: &[String],
    seen: &[Seen],
    most_at_once: &HashMap<String, usize>,
    limits: &HashMap<String, Limits>,
    freezes: &[Freeze],
    restarts: &[Restart],
) -> Verdict {
    let mut seen: Vec<&Seen> = seen.iter().collect();
    seen.sort_by_key(|s| s.arrived);
    let mut verdict = Verdict {
        acknowledged: acked.len() * paths.len(),
        requests: seen.len(),
        most_at_once: most_at_once.clone(),
        ..Verdict::default()
    };
    let received: HashSet<(&str, &str)> = seen.iter().map(|s| (s.path.as_str(), s.id.as_str())).collect();
    for path in paths {
        for a in acked {
            if !received.contains(&(path.as_str(), a.id.as_str())) {
                verdict.lost.push((path.clone(), a.id.clone()));
            }
        }
    }
    count_duplicates(&seen, freezes, &mut verdict);
    let ordered: Vec<&Seen> = seen
        .iter()
        .copied()
        .filter(|s| limits.get(&s.path).is_some_and(|l| l.ordered))
        .collect();
    find_inversions(&ordered, &mut verdict);
    for (path, most) in most_at_once {
        let limit = limits.get(path).and_then(|l| l.max_in_flight);
        if let Some(limit) = limit.filter(|l| most > l) {
            verdict
                .over_in_flight
                .push(format!("{path}: {most} requests at once, the limit is {limit}"));
        }
    }
    for (path, l) in limits {
        if let Some(rate) = l.max_per_second {
            let started_unsent = l.max_in_flight.unwrap_or(DEFAULT_IN_FLIGHT);
            let faults = RateFaults { freezes, restarts };
            check_rate(path, rate, started_unsent, &seen, faults, &mut verdict);
        }
    }
    verdict
}

fn count_duplicates(seen: &[&Seen], freezes: &[Freeze], verdict: &mut Verdict) {
    let mut first: HashMap<(&str, &str), &Seen> = HashMap::new();
    for s in seen {
        match first.get(&(s.path.as_str(), s.id.as_str())) {
            None => {
                first.insert((&s.path, &s.id), s);
            }
            Some(earlier) => {
                verdict.duplicates += 1;
                // The other node sends again what the frozen one had running: explained. The
                // frozen node sending it again itself after waking is not.
                let at_freeze = s.node != earlier.node
                    && freezes.iter().any(|f| {
                        f.node == earlier.node
                            && earlier.arrived <= f.at + FREEZE_GRACE
                            && earlier.ended + Duration::from_secs(1) >= f.at
                    });
                if at_freeze {
                    verdict.duplicates_at_freeze += 1;
                }
            }
        }
    }
}

/// An inversion: an event of a key that first arrived after a later event of that key had
/// first arrived. Repeats are not inversions but duplicates: a node taking over after a
/// failure sends again, in order, what the failed node had sent but not recorded yet.
fn find_inversions(seen: &[&Seen], verdict: &mut Verdict) {
    let mut latest: HashMap<(&str, &str), u64> = HashMap::new();
    let mut arrived: HashSet<(&str, &str)> = HashSet::new();
    for s in seen {
        let Some(key) = &s.key else { continue };
        if !arrived.insert((s.path.as_str(), s.id.as_str())) {
            continue;
        }
        let slot = latest.entry((s.path.as_str(), key.as_str())).or_insert(s.seq);
        if s.seq < *slot {
            verdict.inversions.push(format!(
                "{} key {key}: event {} (from {}) first arrived after event {}",
                s.path, s.seq, s.node, *slot
            ));
        }
        *slot = (*slot).max(s.seq);
    }
}

/// What gives a node more than its bucket in a window: a thaw (the requests it had started),
/// a restart (a full bucket).
#[derive(Clone, Copy)]
struct RateFaults<'a> {
    freezes: &'a [Freeze],
    restarts: &'a [Restart],
}

/// The most requests in any [`RATE_WINDOW`], against what one node at the limit could send:
/// a second's burst, the window at the rate, [`ARRIVAL_SLACK`] at the rate, and one more burst
/// for each other node that sent in the window and for each restart in it (a node taking over
/// or started again begins with a full bucket). Two nodes sending at their own limit at once
/// exceed it.
///
/// The limit counts requests when a node starts them, the receiver when they arrive. A node
/// stopped between the two (a freeze) writes the requests it had started, up to
/// `started_unsent` (its in-flight limit), when it wakes, beside what its bucket holds by
/// then: each thaw of a node that sent in the window allows that many more.
fn check_rate(
    path: &str,
    rate: u32,
    started_unsent: usize,
    seen: &[&Seen],
    faults: RateFaults<'_>,
    verdict: &mut Verdict,
) {
    let slack = (f64::from(rate) * ARRIVAL_SLACK.as_secs_f64()).ceil() as usize;
    let mine: Vec<&Seen> = seen.iter().copied().filter(|s| s.path == path).collect();
    let mut most = 0;
    let mut start = 0;
    for end in 0..mine.len() {
        while mine[end].arrived.duration_since(mine[start].arrived) >= RATE_WINDOW {
            start += 1;
        }
        let window = &mine[start..=end];
        let n = window.len();
        most = most.max(n);
        let nodes: HashSet<&str> = window.iter().map(|s| s.node.as_str()).collect();
        let handovers = nodes.len() - 1;
        let (first, last) = (mine[start].arrived, mine[end].arrived);
        let inside = |at: Instant| at >= first && at <= last;
        let thaws = faults
            .freezes
            .iter()
            .filter(|f| nodes.contains(f.node.as_str()))
            .filter(|f| f.thawed.is_some_and(inside))
            .count();
        let restarts = faults
            .restarts
            .iter()
            .filter(|r| nodes.contains(r.node.as_str()) && inside(r.at))
            .count();
        let bursts = 1 + handovers + restarts;
        let allowed =
            rate as usize * (RATE_WINDOW.as_secs() as usize + bursts) + slack + started_unsent * thaws;
        if n > allowed {
            verdict.over_rate.push(format!(
                "{path}: {n} requests in {RATE_WINDOW:?} (with {handovers} handovers, {restarts} restarts and {thaws} thaws), more than {allowed} at {rate}/s"
            ));
            break;
        }
    }
    verdict.most_in_window.insert(path.to_owned(), most);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(
        path: &str,
        id: &str,
        node: &str,
        key: Option<&str>,
        seq: u64,
        at_ms: u64,
        base: Instant,
    ) -> Seen {
        let arrived = base + Duration::from_millis(at_ms);
        Seen {
            path: path.into(),
            id: id.into(),
            node: node.into(),
            key: key.map(str::to_owned),
            seq,
            arrived,
            ended: arrived + Duration::from_millis(40),
        }
    }

    #[test]
    fn the_checker_finds_losses_inversions_duplicates_and_limits_broken() {
        let base = Instant::now();
        let acked: Vec<Acked> = (0..5)
            .map(|i| Acked {
                id: format!("e{i}"),
                key: Some("k".into()),
                seq: i,
            })
            .collect();
        let got = vec![
            seen("/a", "e0", "n1", Some("k"), 0, 0, base),
            seen("/a", "e1", "n1", Some("k"), 1, 50, base),
            // Frozen at 60 ms with e1 on the wire: n2 sends it again (explained), then e3
            // before e2 (an inversion).
            seen("/a", "e1", "n2", Some("k"), 1, 3000, base),
            seen("/a", "e3", "n2", Some("k"), 3, 3050, base),
            seen("/a", "e2", "n2", Some("k"), 2, 3100, base),
            // n1 wakes and sends e1 again: a duplicate not explained by the freeze.
            seen("/a", "e1", "n1", Some("k"), 1, 9000, base),
        ];
        let at_once = HashMap::from([("/a".to_owned(), 2)]);
        let limits = HashMap::from([(
            "/a".to_owned(),
            Limits {
                ordered: true,
                max_in_flight: Some(1),
                max_per_second: None,
            },
        )]);
        let freezes = [Freeze {
            node: "n1".into(),
            at: base + Duration::from_millis(60),
            thawed: None,
        }];
        let v = check(&acked, &["/a".to_owned()], &got, &at_once, &limits, &freezes, &[]);
        assert_eq!(v.lost, vec![("/a".to_owned(), "e4".to_owned())]);
        assert_eq!(v.duplicates, 2);
        assert_eq!(v.duplicates_at_freeze, 1);
        assert_eq!(v.inversions.len(), 1, "{:?}", v.inversions);
        assert_eq!(v.over_in_flight.len(), 1);
        assert_eq!(v.problems().len(), 3);
    }

    /// `path` limited to `rate` per second, unordered.
    fn rate_limited(path: &str, max_in_flight: Option<usize>, rate: u32) -> HashMap<String, Limits> {
        HashMap::from([(
            path.to_owned(),
            Limits {
                ordered: false,
                max_in_flight,
                max_per_second: Some(rate),
            },
        )])
    }

    /// The rate's verdict alone: no acknowledged events, no paths to deliver to.
    fn rate_check(
        got: &[Seen],
        limits: &HashMap<String, Limits>,
        freezes: &[Freeze],
        restarts: &[Restart],
    ) -> Verdict {
        check(&[], &[], got, &HashMap::new(), limits, freezes, restarts)
    }

    #[test]
    fn the_rate_counts_for_the_whole_cluster_with_a_burst_per_handover() {
        let base = Instant::now();
        let limits = rate_limited("/r", None, 2);
        // 2/s: 12 in 5 s from one node is within a second's burst and the window's 10.
        let ok: Vec<Seen> = (0..12)
            .map(|i| seen("/r", &format!("e{i}"), "n1", None, i, i * 400, base))
            .collect();
        let v = rate_check(&ok, &limits, &[], &[]);
        assert!(v.over_rate.is_empty(), "{:?}", v.over_rate);
        // Two nodes at 2/s each at once: 20 in 5 s, too many even with handovers counted.
        let twice: Vec<Seen> = (0..20)
            .map(|i| {
                seen(
                    "/r",
                    &format!("e{i}"),
                    if i % 4 < 2 { "n1" } else { "n2" },
                    None,
                    i,
                    i * 250,
                    base,
                )
            })
            .collect();
        let v = rate_check(&twice, &limits, &[], &[]);
        assert_eq!(v.over_rate.len(), 1, "{v:?}");
        assert!(v.most_in_window["/r"] > 14, "{v:?}");
    }

    #[test]
    fn a_thaw_allows_what_the_node_had_started_before_its_freeze() {
        let base = Instant::now();
        let limits = rate_limited("/r", Some(3), 2);
        // 2/s from one node allows 12 in 5 s; 15 arrive, the last 3 right after a thaw: the
        // requests the node had started when it stopped.
        let arrivals = (0..12).map(|i| i * 400).chain([4_500, 4_510, 4_520]);
        let got: Vec<Seen> = arrivals
            .enumerate()
            .map(|(i, ms)| seen("/r", &format!("e{i}"), "n1", None, i as u64, ms, base))
            .collect();
        let freeze = |thawed_ms: u64| Freeze {
            node: "n1".into(),
            at: base + Duration::from_millis(thawed_ms - 1_000),
            thawed: Some(base + Duration::from_millis(thawed_ms)),
        };
        let v = rate_check(&got, &limits, &[freeze(4_490)], &[]);
        assert!(v.over_rate.is_empty(), "{:?}", v.over_rate);
        // Without the thaw, or with one long before the window, the same arrivals are too many.
        let v = rate_check(&got, &limits, &[], &[]);
        assert_eq!(v.over_rate.len(), 1, "{v:?}");
        let got_later: Vec<Seen> = got
            .iter()
            .map(|s| Seen {
                arrived: s.arrived + Duration::from_secs(10),
                ..s.clone()
            })
            .collect();
        let v = rate_check(&got_later, &limits, &[freeze(4_490)], &[]);
        assert_eq!(v.over_rate.len(), 1, "{v:?}");
    }

    #[test]
    fn a_restart_inside_the_window_allows_a_fresh_burst() {
        let base = Instant::now();
        let limits = rate_limited("/r", Some(1), 2);
        // 2/s allows 12 in 5 s and a request of slack; 14 arrive, the last 2 right after the
        // node was started again with a full bucket.
        let arrivals = (0..12).map(|i| i * 400).chain([4_500, 4_510]);
        let got: Vec<Seen> = arrivals
            .enumerate()
            .map(|(i, ms)| seen("/r", &format!("e{i}"), "n1", None, i as u64, ms, base))
            .collect();
        let restart = Restart {
            node: "n1".into(),
            at: base + Duration::from_millis(4_450),
        };
        let v = rate_check(&got, &limits, &[], std::slice::from_ref(&restart));
        assert!(v.over_rate.is_empty(), "{:?}", v.over_rate);
        // Without it, or with another node's restart, the same arrivals are too many.
        let v = rate_check(&got, &limits, &[], &[]);
        assert_eq!(v.over_rate.len(), 1, "{v:?}");
        let elsewhere = Restart {
            node: "n2".into(),
            ..restart
        };
        let v = rate_check(&got, &limits, &[], &[elsewhere]);
        assert_eq!(v.over_rate.len(), 1, "{v:?}");
    }
}
