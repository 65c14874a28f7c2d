#!/usr/bin/env python3
"""Splits a `perf report --stdio --sort comm,dso,sym -F overhead,comm,dso,sym` of the gateway
into what the code is, and turns each share into microseconds per delivery.

    profile-classify.py REPORT --cpu-us US --deliveries N [--case NAME] [--per-delivery US]
    profile-classify.py REPORT --per-delivery US --minus OTHER-REPORT --minus-per-delivery US

`--cpu-us` is the gateway's CPU time over the sampled window (all threads), `--deliveries` the
deliveries the sink received in it. Sampling makes the gateway slower (perf's interrupts):
`--per-delivery` gives the CPU per delivery measured without it, which the shares are then
applied to. `--minus` prints, by what the code is, how much more one case costs per delivery
than another. Used by scripts/profile-cpu.sh (BENCHMARKS.md, "Where each
microsecond goes").
"""

import argparse
import re
import sys
from collections import defaultdict

# Columns are two or more spaces apart; a thread name or a DSO (`[JIT] tid 42`) may hold one.
LINE = re.compile(r"^\s*([\d.]+)%\s{2,}(.+?)\s{2,}(.+?)\s{2,}\[(.)\]\s+(.*?)\s*$")

KERNEL = [
    ("kernel: loopback TCP (send, receive, sockets)",
     r"tcp|^ip_|^ipv6|skb|sock|inet|^__dev|loopback|^net_|netif|napi|^nf_|^sk_|^__sys_(send|recv)|"
     r"copy_(to|from)_user|_copy_|csum|^__x64_sys_(sendto|recvfrom|write|read|writev|readv)$|"
     r"^do_(sys_)?(read|write)|^(vfs|ksys|new_sync)_(read|write)|sendmsg|recvmsg|^release_sock|^lock_sock"),
    ("kernel: files and fsync",
     r"ext4|jbd2|^blk|fsync|iomap|filemap|folio|^bio|nvme|^submit_bio|^generic_perform_write|"
     r"^file_|pwrite|pread|fdatasync"),
    ("kernel: wake-ups, futexes, epoll, scheduling",
     r"futex|schedule|switch|wake|epoll|^ep_|hrtimer|^irq|idle|rcu|select_task|enqueue|dequeue|"
     r"update_(curr|load|cfs)|pick_next|psi_|^finish_task|^try_to_wake|ttwu|timerqueue|^__x64_sys_(futex|epoll)"),
    ("kernel: memory (page faults, mmap)", r"page_fault|^handle_mm|^do_anonymous|alloc_pages|clear_page|"
     r"memcg|^__mmap|munmap|madvise|^zap_|^unmap|^exc_page|lru|^mm_"),
]

# Rust crate (first path segment) → bucket.
CRATES = {
    "hyper": "HTTP: hyper, http, httparse",
    "hyper_util": "HTTP: hyper, http, httparse",
    "http": "HTTP: hyper, http, httparse",
    "httparse": "HTTP: hyper, http, httparse",
    "http_body_util": "HTTP: hyper, http, httparse",
    "h2": "HTTP: hyper, http, httparse",
    "axum": "axum and tower (routing, layers)",
    "axum_core": "axum and tower (routing, layers)",
    "tower": "axum and tower (routing, layers)",
    "tower_http": "axum and tower (routing, layers)",
    "tokio": "tokio (tasks, timers, I/O driver)",
    "mio": "tokio (tasks, timers, I/O driver)",
    "serde_json": "JSON (serde_json)",
    "serde": "JSON (serde_json)",
    "sha2": "signing (HMAC-SHA-256, base64)",
    "hmac": "signing (HMAC-SHA-256, base64)",
    "base64": "signing (HMAC-SHA-256, base64)",
    "digest": "signing (HMAC-SHA-256, base64)",
    "rusqlite": "SQLite",
    "wasmtime": "plugins: wasmtime host side",
    "wasmtime_environ": "plugins: wasmtime host side",
    "wasmtime_wasi": "plugins: wasmtime host side",
    "wasmtime_internal_fiber": "plugins: wasmtime host side",
    "cranelift_codegen": "plugins: wasmtime host side",
    "tracing": "tracing and metrics",
    "tracing_core": "tracing and metrics",
    "tracing_subscriber": "tracing and metrics",
    "metrics": "tracing and metrics",
    "opentelemetry": "tracing and metrics",
    "ulid": "hookgate: ids",
    "hashbrown": "hash maps (hashbrown, SipHash)",
    "foldhash": "hash maps (hashbrown, SipHash)",
    "bytes": "buffers (bytes, memcpy)",
    "parking_lot": "locks (parking_lot, std)",
    "parking_lot_core": "locks (parking_lot, std)",
    "crossbeam_channel": "channels (crossbeam, tokio)",
    "flume": "channels (crossbeam, tokio)",
}


def bucket(thread, dso, kind, sym):
    if kind == "k":
        for name, pattern in KERNEL:
            if re.search(pattern, sym):
                return name
        return "kernel: other (syscall entry, accounting)"
    if dso.startswith("[JIT]") or dso.startswith("[unknown]") or sym.startswith("0x0"):
        return "plugins: guest code (compiled wasm)"
    if re.match(r"_?mi_|malloc|^free$|^cfree|realloc|^_int_|calloc|__rust_(alloc|dealloc|realloc)|"
                r"alloc::alloc|unlink_chunk|__libc_(malloc|free)", sym):
        return "allocator (mimalloc)"
    if re.match(r"__mem(cpy|move|set|cmp)|mem(cpy|move|set|cmp)|__strlen|strlen|__nss", sym):
        return "buffers (bytes, memcpy)"
    if "::" not in sym:
        if re.match(r"pthread|__lll|__futex|syscall|epoll|__GI|__libc|_IO|clock_gettime|__vdso", sym):
            return "libc (syscall stubs, clocks, locks)"
        # SQLite's functions: `sqlite3…`, and its static ones (btree, pager, VDBE, WAL) without a
        # prefix. On the store's threads, any other native code is SQLite's too.
        if thread.startswith(("hookgate-writ", "hookgate-sync")) or re.match(
                r"(btree|pager|vdbe|wal|pcache|balance|memjrnl|sqlite|yy|exprAnalyze|whereLoop|"
                r"moveToChild|getAndInitPage|insertCell|fillInCell|dropCell|cellSize|decodeFlags|"
                r"accessPayload|computeCellSize|pageFindSlot|rebuildPage|editPage|releasePage|"
                r"allocateSpace|freeSpace|defragmentPage|getPageNormal|pagerStress|syncJournal|"
                r"robust_|unix|posix|memdb|findCell|compare|serialGet|vdbeRecord|moveto|"
                r"columnMem|statAccum|whereScan)", sym, re.I):
            return "SQLite"
        return "other native code"
    m = re.search(r"hookgate::(\w+)", sym)
    if m:
        return "hookgate: " + m.group(1)
    crates = re.findall(r"(?:^|[<\s&(*])([a-z_][a-z0-9_]*)::", sym)
    for crate in crates:
        if crate in CRATES:
            return CRATES[crate]
    for crate in crates:
        if crate not in ("core", "alloc", "std", "impl", "dyn", "mut", "const"):
            return "other crates: " + crate
    return "Rust std, core, alloc (generic code)"


# The buckets summed into the parts BENCHMARKS tabulates, first match wins.
PARTS = [
    ("kernel: wake-ups, context switches, interrupts", ("kernel: wake", "kernel: other", "kernel: memory")),
    ("kernel: loopback TCP", ("kernel: loopback",)),
    ("kernel: WAL writes and fsync", ("kernel: files",)),
    ("SQLite", ("SQLite",)),
    ("allocator", ("allocator",)),
    ("copies", ("buffers",)),
    ("hyper, tokio, axum", ("HTTP", "tokio", "axum")),
    ("plugin calls (wasmtime host, guest, glue)", ("plugins", "hookgate: plugins")),
    ("hookgate's own code", ("hookgate:",)),
    ("JSON, signing, tracing, metrics, hash maps, locks", ("JSON", "signing", "tracing", "hash", "locks")),
    ("generic Rust, libc, other crates", ("",)),
]


def part_of(bucket_name):
    return next(name for name, prefixes in PARTS if bucket_name.startswith(prefixes))


def thread_of(comm):
    if comm.startswith("hookgate-writ"):
        return "store writer thread"
    if comm.startswith("hookgate-sync"):
        return "store syncer thread (fsync)"
    if comm.startswith("hookgate-sch"):
        return "scheduler thread"
    if comm.startswith("tokio"):
        return "tokio workers and blocking threads"
    return "other threads: " + comm


def read(path):
    """The report's shares by thread, by bucket and by symbol, as fractions of the process."""
    buckets, threads, syms = defaultdict(float), defaultdict(float), defaultdict(float)
    total = 0.0
    for line in open(path, errors="replace"):
        m = LINE.match(line)
        if line.startswith("#") or not m:
            continue
        share, comm, dso, kind, sym = float(m[1]), m[2], m[3], m[4], m[5]
        total += share
        buckets[bucket(comm, dso, kind, sym)] += share
        threads[thread_of(comm)] += share
        syms[f"{sym[:90]} [{comm}]"] += share
    for table in (buckets, threads, syms):
        for key in table:
            table[key] /= total
    return total, buckets, threads, syms


def table(title, rows, per, limit=None):
    print(f"\n| {title} | share | µs per delivery |\n|---|---:|---:|")
    for name, share in sorted(rows.items(), key=lambda kv: -kv[1])[:limit]:
        print(f"| {name} | {share * 100:.1f} % | {share * per:.1f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--cpu-us", type=float)
    ap.add_argument("--deliveries", type=int)
    ap.add_argument("--per-delivery", type=float)
    ap.add_argument("--case", default="")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--minus")
    ap.add_argument("--minus-per-delivery", type=float)
    args = ap.parse_args()
    total, buckets, threads, syms = read(args.report)
    if args.minus:
        _, other, _, _ = read(args.minus)
        per, base = args.per_delivery, args.minus_per_delivery
        print(f"| what the code is | {args.case or 'this'} µs | other µs | more per delivery |\n|---|---:|---:|---:|")
        names = set(buckets) | set(other)
        rows = sorted(names, key=lambda n: -(buckets.get(n, 0) * per - other.get(n, 0) * base))
        for name in rows:
            a, b = buckets.get(name, 0) * per, other.get(name, 0) * base
            if abs(a - b) >= 0.5:
                print(f"| {name} | {a:.1f} | {b:.1f} | {a - b:+.1f} |")
        print(f"| all | {per:.1f} | {base:.1f} | {per - base:+.1f} |")
        return
    sampled = args.cpu_us / max(args.deliveries, 1)
    per = args.per_delivery or sampled
    print(f"## {args.case}: {per:.1f} µs of gateway CPU per delivery"
          + (f" unsampled, {sampled:.1f} µs sampled" if args.per_delivery else "")
          + f" ({args.cpu_us / 1e6:.2f} s over {args.deliveries} deliveries; the gateway is {total:.1f} % of the samples)")
    parts = defaultdict(float)
    for name, share in buckets.items():
        parts[part_of(name)] += share
    table("by part", parts, per)
    table("by thread", threads, per)
    table("by what the code is", buckets, per)
    table("top symbols", syms, per, args.top)


if __name__ == "__main__":
    sys.exit(main())
