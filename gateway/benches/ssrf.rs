//! The SSRF classifier: every address a name resolves to is judged before a connection is
//! opened, so it runs once per new connection (pooled connections skip it).

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{Criterion, criterion_group, criterion_main};
use hookgate::delivery::ssrf::{blocked_reason, check};
use ipnet::IpNet;

fn classify(c: &mut Criterion) {
    let addresses: Vec<IpAddr> = [
        "93.184.215.14",
        "10.1.2.3",
        "169.254.169.254",
        "100.64.0.1",
        "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
        "::ffff:192.168.0.1",
        "64:ff9b::a00:1",
        "fd00::1",
    ]
    .iter()
    .map(|a| a.parse().expect("an address"))
    .collect();
    let allow: Vec<IpNet> = vec!["127.0.0.0/8".parse().expect("a CIDR")];
    let mut group = c.benchmark_group("ssrf");
    group.bench_function("blocked_reason, 8 mixed addresses", |b| {
        b.iter(|| {
            addresses
                .iter()
                .filter(|a| blocked_reason(black_box(**a)).is_some())
                .count()
        })
    });
    group.bench_function("check with an allow list, 8 mixed addresses", |b| {
        b.iter(|| {
            addresses
                .iter()
                .filter(|a| check(black_box(**a), black_box(&allow)).is_ok())
                .count()
        })
    });
    group.finish();
}

criterion_group!(benches, classify);
criterion_main!(benches);
