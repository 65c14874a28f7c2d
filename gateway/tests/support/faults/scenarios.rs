//! The fault scenarios, as functions that run one and report what happened; the `faults`
//! tests assert on the reports, and `hookgate-bench` repeats them and counts.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::checker::{Acked, FREEZE_GRACE, Verdict};
use super::http;
use super::pg::{PrivatePostgres, Stop};
use super::rig::{Answer, EndpointSpec, Load, Rig, RigOptions};

/// How to start a node: `program args… serve --config FILE`.
#[derive(Debug, Clone)]
pub(crate) struct Program {
    pub(crate) program: PathBuf,
    pub(crate) args: Vec<String>,
}

/// The part of a lease a node gives up by its own clock (as `hookgate::fence::Fence::margin`).
pub(crate) fn margin(lease: Duration) -> Duration {
    lease / 5
}

fn options(
    program: &Program,
    nodes: usize,
    lease: Duration,
    endpoints: Vec<EndpointSpec>,
    takes: Duration,
) -> RigOptions {
    RigOptions {
        nodes,
        lease,
        endpoints,
        receiver_takes: takes,
        program: program.program.clone(),
        program_args: program.args.clone(),
        max_connections: 8,
    }
}

/// Sums a metric over the nodes that answer.
async fn metric_over_nodes(rig: &Rig, name: &str) -> f64 {
    let mut sum = 0.0;
    for i in 0..rig.nodes.len() {
        sum += http::metric_sum(&rig.metrics(i).await, name);
    }
    sum
}

// --- the freeze

pub(crate) struct FreezeOptions {
    pub(crate) lease: Duration,
    pub(crate) freeze_for: Duration,
    pub(crate) events: u64,
    /// Deliveries received before the owner is frozen.
    pub(crate) freeze_after: usize,
    pub(crate) receiver_takes: Duration,
}

impl FreezeOptions {
    /// The issue's scenario: lease 3 s, a 9 s freeze, 150 events of one key, 40 ms receiver.
    pub(crate) fn as_reported() -> FreezeOptions {
        FreezeOptions {
            lease: Duration::from_secs(3),
            freeze_for: Duration::from_secs(9),
            events: 150,
            freeze_after: 40,
            receiver_takes: Duration::from_millis(40),
        }
    }
}

pub(crate) struct FreezeRun {
    pub(crate) verdict: Verdict,
    /// Deliveries the other node made while the owner was frozen.
    pub(crate) delivered_while_frozen: usize,
    /// Requests the frozen node sent after it woke that another node had sent already.
    pub(crate) resent_after_waking: usize,
    /// The frozen node's `hookgate_cluster_lease_lapses_total` and
    /// `hookgate_cluster_fenced_attempts_total` afterwards.
    pub(crate) lapses: f64,
    pub(crate) fenced: f64,
    pub(crate) all_delivered: bool,
    pub(crate) logs: String,
}

/// Two nodes; one ordered endpoint with `max_in_flight: 1`; `events` events of one key posted
/// to the endpoint's node, which is frozen (SIGSTOP) mid-stream for `freeze_for`, then thawed.
pub(crate) async fn freeze(
    pg: &PrivatePostgres,
    database: &str,
    program: &Program,
    o: &FreezeOptions,
) -> FreezeRun {
    let endpoint = EndpointSpec {
        name: "e".into(),
        ordered: true,
        max_in_flight: Some(1),
        max_per_second: None,
    };
    let mut rig = Rig::start(
        pg,
        database,
        options(program, 2, o.lease, vec![endpoint], o.receiver_takes),
    )
    .await;
    let mut acked = Vec::new();
    // The first event finds the endpoint's node.
    post_until_acked(&rig, 0, "k-0", 0, &mut acked).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while rig.receiver.count() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let owner_name = rig.last_sender("/e").expect("the first event arrived");
    let owner = rig.node_index(&owner_name);
    // The rest in one batch (one commit, in order): however slow the machine, the freeze
    // then comes with most of them still to deliver.
    let rest: Vec<(String, u64)> = (1..o.events).map(|seq| (format!("k-{seq}"), seq)).collect();
    let deadline_batch = Instant::now() + Duration::from_secs(60);
    loop {
        let reply = rig
            .post_batch(owner, &rest, Some("k"), Duration::from_secs(10))
            .await;
        if matches!(reply.as_ref().map(|r| r.status), Ok(202 | 409)) {
            break;
        }
        assert!(
            Instant::now() < deadline_batch,
            "the batch was never acknowledged: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    acked.extend(rest.into_iter().map(|(id, seq)| Acked {
        id,
        key: Some("k".into()),
        seq,
    }));
    while rig.receiver.count() < o.freeze_after && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    rig.freeze(owner);
    let frozen_at = Instant::now();
    tokio::time::sleep(o.freeze_for).await;
    rig.thaw(owner);
    let thawed_at = Instant::now();
    let all_delivered = rig.wait_delivered(&acked, Duration::from_secs(60)).await;
    // Let a woken node that would send stale attempts do so before the verdict.
    tokio::time::sleep(o.lease).await;
    let seen = rig.receiver.seen();
    let delivered_while_frozen = seen
        .iter()
        .filter(|s| s.node != owner_name && s.arrived > frozen_at && s.arrived < thawed_at)
        .count();
    let resent_after_waking = seen
        .iter()
        .filter(|s| s.node == owner_name && s.arrived > thawed_at)
        .filter(|s| {
            seen.iter()
                .any(|t| t.id == s.id && t.node != owner_name && t.arrived < s.arrived)
        })
        .count();
    let metrics = rig.metrics(owner).await;
    FreezeRun {
        verdict: rig.verdict(&acked),
        delivered_while_frozen,
        resent_after_waking,
        lapses: http::metric_sum(&metrics, "hookgate_cluster_lease_lapses_total"),
        fenced: http::metric_sum(&metrics, "hookgate_cluster_fenced_attempts_total"),
        all_delivered,
        logs: rig.problems_in_logs(),
    }
}

/// Posts one event of key `k` until some node acknowledges it (the given node first).
async fn post_until_acked(rig: &Rig, first: usize, id: &str, seq: u64, acked: &mut Vec<Acked>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut node = first;
    loop {
        let reply = rig.post(node, id, Some("k"), seq, Duration::from_secs(5)).await;
        if matches!(reply.as_ref().map(|r| r.status), Ok(202 | 409)) {
            acked.push(Acked {
                id: id.to_owned(),
                key: Some("k".into()),
                seq,
            });
            return;
        }
        assert!(Instant::now() < deadline, "no node acknowledged {id}: {reply:?}");
        node = (node + 1) % rig.nodes.len();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// --- a partition between one node and the database

pub(crate) struct PartitionRun {
    pub(crate) verdict: Verdict,
    pub(crate) cut_for: Duration,
    /// Requests the cut-off node sent later than its lease's margin after the cut (and a
    /// moment's grace for the receiver), before the cut healed.
    pub(crate) sent_after_margin: usize,
    /// Requests of the cut-off node's endpoints that other nodes sent during the cut.
    pub(crate) taken_over: usize,
    /// The cut-off node's answers to events posted during the cut: 503 with Retry-After, and
    /// any other (none should be a 202).
    pub(crate) refused_with_retry_after: usize,
    pub(crate) acked_during_cut: usize,
    /// After the cut: the node acknowledged an event posted to it (1) and delivered again.
    pub(crate) acked_after: usize,
    pub(crate) delivered_after: usize,
    pub(crate) all_delivered: bool,
    pub(crate) logs: String,
}

fn mixed_endpoints() -> Vec<EndpointSpec> {
    let mut endpoints: Vec<EndpointSpec> = (0..4).map(|i| EndpointSpec::plain(&format!("e{i}"))).collect();
    endpoints.push(EndpointSpec {
        name: "ord".into(),
        ordered: true,
        max_in_flight: Some(1),
        max_per_second: None,
    });
    endpoints.push(EndpointSpec {
        name: "lim".into(),
        max_in_flight: Some(2),
        ..EndpointSpec::default()
    });
    endpoints
}

/// Three nodes under load; the node that delivers the ordered endpoint is cut off from the
/// database for `3 × lease`, then the cut heals.
pub(crate) async fn partition(
    pg: &PrivatePostgres,
    database: &str,
    program: &Program,
    lease: Duration,
) -> PartitionRun {
    let rig = Rig::start(
        pg,
        database,
        options(program, 3, lease, mixed_endpoints(), Duration::from_millis(20)),
    )
    .await;
    let load = Load::start(&rig, "p", 3, 8.0, Duration::from_secs(5));
    wait_acked(&load, 30).await;
    let victim_name = rig.last_sender("/ord").expect("the ordered endpoint received");
    let victim = rig.node_index(&victim_name);
    let victims_paths: Vec<String> = rig
        .paths()
        .into_iter()
        .filter(|p| rig.last_sender(p).as_deref() == Some(victim_name.as_str()))
        .collect();
    let cut_for = lease * 3;
    rig.proxies[victim].cut();
    let cut_at = Instant::now();
    // Events posted to the cut-off node itself meanwhile (the loaders move to other nodes
    // after a refusal).
    let mut probes = Vec::new();
    let mut probe_answers = Vec::new();
    let mut n = 0;
    while cut_at.elapsed() < cut_for {
        let id = format!("cut-probe-{n}");
        n += 1;
        let sent = Instant::now();
        let reply = rig.post(victim, &id, None, 0, Duration::from_secs(5)).await;
        if matches!(reply.as_ref().map(|r| r.status), Ok(202 | 409)) {
            probes.push(Acked {
                id,
                key: None,
                seq: 0,
            });
        }
        probe_answers.push(Answer {
            node: victim,
            status: reply.as_ref().ok().map(|r| r.status),
            retry_after: reply.as_ref().is_ok_and(|r| r.header("retry-after").is_some()),
            sent,
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    rig.proxies[victim].heal();
    let healed_at = Instant::now();
    // The node takes events again by itself: asked directly until it does (half a minute).
    let mut acked_after = 0;
    while acked_after == 0 && healed_at.elapsed() < Duration::from_secs(30) {
        let id = format!("after-probe-{n}");
        n += 1;
        let reply = rig.post(victim, &id, None, 0, Duration::from_secs(5)).await;
        if matches!(reply.as_ref().map(|r| r.status), Ok(202 | 409)) {
            probes.push(Acked {
                id,
                key: None,
                seq: 0,
            });
            acked_after = 1;
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Long enough for the node to reconnect, take its share back and deliver it.
    tokio::time::sleep(lease * 3).await;
    let mut answers = load.answers.lock().unwrap().clone();
    answers.extend(probe_answers);
    let mut acked = load.stop().await;
    acked.extend(probes);
    let all_delivered = rig.wait_delivered(&acked, Duration::from_secs(90)).await;
    let seen = rig.receiver.seen();
    let quiet_from = cut_at + lease - margin(lease) + FREEZE_GRACE;
    let during_cut = |sent: Instant| sent > cut_at + Duration::from_millis(100) && sent < healed_at;
    PartitionRun {
        verdict: rig.verdict(&acked),
        cut_for,
        sent_after_margin: seen
            .iter()
            .filter(|s| s.node == victim_name && s.arrived > quiet_from && s.arrived < healed_at)
            .count(),
        taken_over: seen
            .iter()
            .filter(|s| s.node != victim_name && victims_paths.contains(&s.path))
            .filter(|s| s.arrived > cut_at && s.arrived < healed_at)
            .count(),
        refused_with_retry_after: answers
            .iter()
            .filter(|a| a.node == victim && during_cut(a.sent) && a.status == Some(503) && a.retry_after)
            .count(),
        acked_during_cut: answers
            .iter()
            .filter(|a| a.node == victim && during_cut(a.sent) && a.status == Some(202))
            .count(),
        acked_after,
        delivered_after: seen
            .iter()
            .filter(|s| s.node == victim_name && s.arrived > healed_at)
            .count(),
        all_delivered,
        logs: rig.problems_in_logs(),
    }
}

async fn wait_acked(load: &Load, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let before = load.acked_count();
    while load.acked_count() < before + n {
        assert!(Instant::now() < deadline, "ingestion stalled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// --- the database restarts

pub(crate) struct RestartRun {
    pub(crate) verdict: Verdict,
    /// Answers 503 (with Retry-After) while the database was down.
    pub(crate) refused: usize,
    /// Per node: 1 if it acknowledged an event posted to it after the restarts.
    pub(crate) acked_after_by_node: Vec<usize>,
    pub(crate) all_delivered: bool,
    pub(crate) logs: String,
}

/// Three nodes under load; the database stops cleanly and starts again, then stops as if it
/// crashed (immediate) and starts again.
pub(crate) async fn database_restart(
    pg: &PrivatePostgres,
    database: &str,
    program: &Program,
    lease: Duration,
) -> RestartRun {
    let rig = Rig::start(
        pg,
        database,
        options(program, 3, lease, mixed_endpoints(), Duration::from_millis(20)),
    )
    .await;
    let load = Load::start(&rig, "r", 3, 8.0, Duration::from_secs(5));
    for how in [Stop::Fast, Stop::Immediate] {
        wait_acked(&load, 30).await;
        tokio::task::block_in_place(|| pg.down(how)).expect("the database stops");
        // Down for a moment: the nodes refuse meanwhile.
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::task::block_in_place(|| pg.up()).expect("the database starts again");
    }
    wait_acked(&load, 30).await;
    // Each node, asked directly, takes events again (within half a minute, by itself).
    let mut probes = Vec::new();
    let mut acked_after_by_node = Vec::new();
    for i in 0..rig.nodes.len() {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut took = 0;
        while took == 0 && Instant::now() < deadline {
            let id = format!("probe-{i}");
            let reply = rig.post(i, &id, None, 0, Duration::from_secs(5)).await;
            if matches!(reply.map(|r| r.status), Ok(202 | 409)) {
                took = 1;
                probes.push(Acked {
                    id,
                    key: None,
                    seq: 0,
                });
            } else {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        acked_after_by_node.push(took);
    }
    let answers = load.answers.lock().unwrap().clone();
    let mut acked = load.stop().await;
    acked.extend(probes);
    let all_delivered = rig.wait_delivered(&acked, Duration::from_secs(90)).await;
    RestartRun {
        verdict: rig.verdict(&acked),
        refused: answers
            .iter()
            .filter(|a| a.status == Some(503) && a.retry_after)
            .count(),
        acked_after_by_node,
        all_delivered,
        logs: rig.problems_in_logs(),
    }
}

// --- a slow database

pub(crate) struct SlowRun {
    pub(crate) verdict: Verdict,
    /// Leases the nodes found lapsed (renewals starved would show here).
    pub(crate) lapses: f64,
    /// Answers by status (None: none came within the client's 30 s).
    pub(crate) answers: Vec<(Option<u16>, bool, usize)>,
    /// How much each node's resident memory grew, at most, during the load (KiB).
    pub(crate) rss_growth_kib: Vec<u64>,
    pub(crate) all_delivered: bool,
    pub(crate) logs: String,
}

/// Two nodes whose every round trip to the database takes `delay` more, with few pooled
/// connections and many clients: ingestion pushes back (503 with Retry-After) instead of
/// queueing, and the lease renewals go on.
pub(crate) async fn slow_database(
    pg: &PrivatePostgres,
    database: &str,
    program: &Program,
    lease: Duration,
    delay: Duration,
    load_for: Duration,
) -> SlowRun {
    let mut o = options(program, 2, lease, mixed_endpoints(), Duration::from_millis(10));
    o.max_connections = 4;
    let rig = Rig::start(pg, database, o).await;
    for proxy in &rig.proxies {
        proxy.delay(delay);
    }
    let before: Vec<u64> = rig.nodes.iter().map(|n| n.rss_kib().unwrap_or(0)).collect();
    let mut most = before.clone();
    let load = Load::start(&rig, "s", 32, 1000.0, Duration::from_secs(30));
    let until = Instant::now() + load_for;
    while Instant::now() < until {
        for (i, node) in rig.nodes.iter().enumerate() {
            most[i] = most[i].max(node.rss_kib().unwrap_or(0));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answers = load.answers.lock().unwrap().clone();
    let acked = load.stop().await;
    let all_delivered = rig.wait_delivered(&acked, Duration::from_secs(120)).await;
    let mut by_status: Vec<(Option<u16>, bool, usize)> = Vec::new();
    for a in &answers {
        match by_status
            .iter_mut()
            .find(|(s, r, _)| *s == a.status && *r == a.retry_after)
        {
            Some(entry) => entry.2 += 1,
            None => by_status.push((a.status, a.retry_after, 1)),
        }
    }
    SlowRun {
        verdict: rig.verdict(&acked),
        lapses: metric_over_nodes(&rig, "hookgate_cluster_lease_lapses_total").await,
        answers: by_status,
        rss_growth_kib: most
            .iter()
            .zip(&before)
            .map(|(m, b)| m.saturating_sub(*b))
            .collect(),
        all_delivered,
        logs: rig.problems_in_logs(),
    }
}

// --- the randomized run

/// A small seeded generator (SplitMix64): a run is repeated by its seed.
pub(crate) struct Dice(u64);

impl Dice {
    pub(crate) fn new(seed: u64) -> Dice {
        Dice(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    pub(crate) fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (self.next() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The seed of a randomized run: `HOOKGATE_FAULT_SEED` to repeat one, else a new one.
pub(crate) fn seed_from_env() -> u64 {
    std::env::var("HOOKGATE_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    Killed,
    Frozen,
    Cut,
    Delayed,
}

pub(crate) struct RandomRun {
    pub(crate) seed: u64,
    pub(crate) verdict: Verdict,
    /// What was done, in order, with when (seconds from the start).
    pub(crate) actions: Vec<String>,
    /// How many of each: kills, freezes, cuts, delays, database restarts.
    pub(crate) counts: [usize; 5],
    pub(crate) all_delivered: bool,
    pub(crate) logs: String,
}

/// Three nodes under load for `duration`, with kills, freezes, cuts and delays (and, when
/// `database_restarts`, now and then a database restart) drawn from `seed`; at most two
/// nodes faulted at once. Then everything heals, and the checker judges.
pub(crate) async fn randomized(
    pg: &PrivatePostgres,
    database: &str,
    program: &Program,
    lease: Duration,
    duration: Duration,
    seed: u64,
    database_restarts: bool,
) -> RandomRun {
    let mut endpoints = mixed_endpoints();
    endpoints.push(EndpointSpec {
        name: "rate".into(),
        max_per_second: Some(20),
        ..EndpointSpec::default()
    });
    let mut rig = Rig::start(
        pg,
        database,
        options(program, 3, lease, endpoints, Duration::from_millis(20)),
    )
    .await;
    let mut dice = Dice::new(seed);
    let load = Load::start(&rig, "x", 3, 5.0, Duration::from_secs(5));
    let start = Instant::now();
    let mut active: Vec<Option<(Fault, Instant)>> = vec![None; rig.nodes.len()];
    let mut actions = Vec::new();
    let mut counts = [0usize; 5];
    while start.elapsed() < duration {
        tokio::time::sleep(Duration::from_secs_f64(dice.between(0.3, 1.5))).await;
        let now = Instant::now();
        for (i, slot) in active.iter_mut().enumerate() {
            if let Some((fault, until)) = *slot
                && until <= now
            {
                end_fault(&mut rig, i, fault);
                note(
                    &mut actions,
                    format!(
                        "{:.1}s end {fault:?} {}",
                        start.elapsed().as_secs_f64(),
                        rig.nodes[i].name
                    ),
                );
                *slot = None;
            }
        }
        if database_restarts && dice.below(25) == 0 {
            let how = if dice.below(2) == 0 {
                Stop::Fast
            } else {
                Stop::Immediate
            };
            let at = start.elapsed().as_secs_f64();
            counts[4] += 1;
            let done = tokio::task::block_in_place(|| pg.restart(how));
            note(
                &mut actions,
                format!(
                    "{at:.1}s database restart ({how:?}): {}",
                    done.err().unwrap_or_else(|| "done".into())
                ),
            );
            continue;
        }
        let free: Vec<usize> = (0..active.len()).filter(|i| active[*i].is_none()).collect();
        if active.len() - free.len() >= 2 || free.is_empty() {
            continue;
        }
        let i = free[dice.below(free.len())];
        let lease_s = lease.as_secs_f64();
        let (fault, lasts) = match dice.below(4) {
            0 => (Fault::Killed, dice.between(0.5, 2.0)),
            1 => (Fault::Frozen, dice.between(0.3, 3.0) * lease_s),
            2 => (Fault::Cut, dice.between(0.5, 3.0) * lease_s),
            _ => (Fault::Delayed, dice.between(1.0, 3.0) * lease_s),
        };
        let detail = match fault {
            Fault::Killed => {
                rig.nodes[i].kill();
                counts[0] += 1;
                String::new()
            }
            Fault::Frozen => {
                rig.freeze(i);
                counts[1] += 1;
                String::new()
            }
            Fault::Cut => {
                rig.proxies[i].cut();
                counts[2] += 1;
                String::new()
            }
            Fault::Delayed => {
                let by = Duration::from_millis(20 + dice.below(130) as u64);
                rig.proxies[i].delay(by);
                counts[3] += 1;
                format!(" +{by:?} a round trip")
            }
        };
        note(
            &mut actions,
            format!(
                "{:.1}s {fault:?} {} for {lasts:.1}s{detail}",
                start.elapsed().as_secs_f64(),
                rig.nodes[i].name
            ),
        );
        active[i] = Some((fault, now + Duration::from_secs_f64(lasts)));
    }
    for (i, slot) in active.iter_mut().enumerate() {
        if let Some((fault, _)) = slot.take() {
            end_fault(&mut rig, i, fault);
        }
    }
    for i in 0..rig.nodes.len() {
        rig.wait_healthy(i).await;
    }
    tokio::time::sleep(lease * 2).await;
    let acked = load.stop().await;
    let all_delivered = rig.wait_delivered(&acked, Duration::from_secs(180)).await;
    tokio::time::sleep(lease).await;
    RandomRun {
        seed,
        verdict: rig.verdict(&acked),
        actions,
        counts,
        all_delivered,
        logs: rig.problems_in_logs(),
    }
}

/// Keeps an action for the report, and says it at once on stderr (a run that hangs still
/// shows what it did).
fn note(actions: &mut Vec<String>, action: String) {
    eprintln!("fault: {action}");
    actions.push(action);
}

fn end_fault(rig: &mut Rig, i: usize, fault: Fault) {
    match fault {
        Fault::Killed => rig.respawn(i),
        Fault::Frozen => rig.thaw(i),
        Fault::Cut => rig.proxies[i].heal(),
        Fault::Delayed => rig.proxies[i].delay(Duration::ZERO),
    }
}

/// A node killed and started again while cut off from the database (a cut at boot, or
/// PostgreSQL starting beside it): it must wait for the database rather than exit, and answer
/// once the cut heals. Answers whether the process was still running after three seconds of
/// the cut; returns only once it answers (the rig's wait panics with its log otherwise).
pub(crate) async fn start_while_cut_off(pg: &PrivatePostgres, program: &Program, lease: Duration) -> bool {
    let endpoints = vec![EndpointSpec::plain("e0")];
    let options = options(program, 1, lease, endpoints, Duration::ZERO);
    let mut rig = Rig::start(pg, "startcut", options).await;
    rig.nodes[0].kill();
    rig.proxies[0].cut();
    rig.nodes[0].spawn();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waited = !matches!(rig.nodes[0].state().as_str(), "Z" | "gone" | "not started");
    rig.proxies[0].heal();
    rig.wait_healthy(0).await;
    waited
}
