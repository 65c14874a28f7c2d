//! Config loading: YAML → interpolation → typed structs → validation. Runs at start and on
//! every reload, on the reload path rather than the hot path; a large config must still load
//! in well under the watcher's debounce.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hookgate::config::load_str;

const QUICK_START: &str = include_str!("../../config/hookgate.yaml");

/// A config with `n` endpoints spread over 10 topics, each with a type filter and a secret.
fn large(n: usize) -> String {
    let mut yaml = String::from("delivery:\n  allow_networks: [127.0.0.0/8]\ntopics:\n");
    for t in 0..10 {
        yaml.push_str(&format!("  topic{t}: {{}}\n"));
    }
    yaml.push_str("endpoints:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  endpoint-{i}:\n    url: https://hooks{i}.example.com/in\n    topics: [topic{}]\n    \
             types: [\"order.*\", \"user.created\"]\n    secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n    \
             headers: {{X-Team: t{i}}}\n",
            i % 10
        ));
    }
    yaml
}

fn load(c: &mut Criterion) {
    let env = |name: &str| (name == "HOOKGATE_API_KEY").then(|| "k".to_owned());
    let big = large(200);
    let mut group = c.benchmark_group("config load");
    group.bench_function("quick-start config", |b| {
        b.iter(|| load_str(black_box(QUICK_START), "hookgate.yaml", None, env).expect("valid"))
    });
    group.bench_function("200 endpoints", |b| {
        b.iter(|| load_str(black_box(&big), "big.yaml", None, env).expect("valid"))
    });
    group.finish();
}

criterion_group!(benches, load);
criterion_main!(benches);
