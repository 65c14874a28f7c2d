//! Standard Webhooks signing of a 1 KiB body: paid on every attempt of every endpoint with a
//! secret, once per secret while a secret is rotated; `v1` HMAC and `v1a` Ed25519.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hookgate::delivery::signing::{
    SignatureScheme, ed25519_signature, standard_headers, standard_webhooks_signature,
};
use hookgate::model::Secret;

fn sign(c: &mut Criterion) {
    let body = vec![b'x'; 1024];
    let one = [Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")];
    let rotating = [
        Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        Secret::new("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
    ];
    let mut group = c.benchmark_group("signing 1 KiB");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("signature, one secret", |b| {
        b.iter(|| {
            standard_webhooks_signature(
                black_box(&one),
                "evt_01JD8X3Q9V7",
                1_767_225_600,
                black_box(&body),
            )
        })
    });
    group.bench_function("signature, two secrets (rotation)", |b| {
        b.iter(|| {
            standard_webhooks_signature(
                black_box(&rotating),
                "evt_01JD8X3Q9V7",
                1_767_225_600,
                black_box(&body),
            )
        })
    });
    group.bench_function("all standard headers, one secret", |b| {
        b.iter(|| {
            standard_headers(
                "evt_01JD8X3Q9V7",
                1_767_225_600,
                1,
                black_box(&one),
                black_box(&body),
                Some(SignatureScheme::Hmac),
            )
        })
    });
    // The key pair is derived from the `whsk_` seed on every attempt: part of the cost.
    let ed25519 = [Secret::new("whsk_KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=")];
    group.bench_function("v1a signature, one ed25519 key", |b| {
        b.iter(|| {
            ed25519_signature(
                black_box(&ed25519),
                "evt_01JD8X3Q9V7",
                1_767_225_600,
                black_box(&body),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, sign);
criterion_main!(benches);
