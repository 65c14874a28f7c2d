//! Retry planning: one `plan_next` per finished attempt, on the scheduler's actor — its cost is
//! paid once per attempt on the one thread that plans every delivery.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hookgate::model::{ErrorKind, Outcome, Timestamp};
use hookgate::policy::{Policy, RetryContext, plan_next};

fn plan(c: &mut Criterion) {
    let received = Timestamp::from_millis(1_767_225_600_000);
    let failed = Outcome::Failed {
        kind: ErrorKind::HttpStatus,
        status: Some(503),
        retry_after: None,
        detail: "503 Service Unavailable".into(),
    };
    let delivered = Outcome::Delivered { status: Some(200) };
    let standard = Policy::standard();
    let sns = Policy::preset("sns-aws-managed").expect("a preset");
    let mut group = c.benchmark_group("plan_next");
    for (name, policy, outcome, attempts) in [
        ("standard, delivered", &standard, &delivered, 1),
        ("standard, 503 after attempt 3", &standard, &failed, 3),
        ("sns-aws-managed, 503 after attempt 50", &sns, &failed, 50),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                plan_next(
                    black_box(policy),
                    &RetryContext {
                        attempts_made: attempts,
                        round_started_at: received,
                        now: received.plus(std::time::Duration::from_secs(900)),
                        outcome: black_box(outcome),
                        jitter_sample: 0.37,
                        plugin_decision: None,
                    },
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, plan);
criterion_main!(benches);
