#!/usr/bin/env bash
# Counts the heap allocations the gateway makes per ingested event and per delivery, and says
# where they are made (BENCHMARKS.md, "Allocations per request"):
#
#   scripts/count-allocations.sh [OUT-DIR]        (default target/allocations)
#
# The gateway is built with the `system-allocator` feature: the C library's malloc instead of
# mimalloc, which heaptrack (an LD_PRELOAD of malloc) does not see. It runs under heaptrack on
# the embedded SQLite store without plugins (their compilation would swamp the counts), twice
# per case, with the same start and a different number of
# single-event requests (c=16, 1 KiB); the difference between the two runs is what the
# requests cost, without the start. Two cases:
#
# - `ingest`: events to a topic nobody subscribes to (the request, the store's insert);
# - `deliver`: events to a topic with one HTTP endpoint, a hookgate-sink (the request, the
#   insert, the delivery and its outcome).
#
# `deliver` minus `ingest` is a delivery's share. OUT-DIR gets the counts (`counts.txt`) and,
# per case, heaptrack's sites with the most allocation calls in the difference (`CASE.sites`).
# heaptrack slows the gateway several times over: the counts hold, its rates do not.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-target/allocations}" && readlink -f "${1:-target/allocations}")
small=${SMALL:-2000}
large=${LARGE:-12000}
port=18480
sink_port=18490

command -v heaptrack >/dev/null || { echo "needs heaptrack (apt-get install heaptrack)" >&2; exit 1; }
cargo build --release -q -p hookgate --bin hookgate --features system-allocator
cp target/release/hookgate "$out/hookgate-system-allocator"
cargo build --release -q -p hookgate-loadgen -p hookgate-sink

sink_pid=""
cleanup() { [ -n "$sink_pid" ] && kill "$sink_pid" 2>/dev/null || true; }
trap cleanup EXIT
target/release/hookgate-sink --listen "127.0.0.1:$sink_port" --quiet &
sink_pid=$!

config() {
  cat >"$out/hookgate.yaml" <<EOF
server:
  listen: 127.0.0.1:$port
storage:
  path: $1/hookgate.db
plugins:
  dir: $1/plugins
  bundled: false
delivery:
  allow_networks: [127.0.0.0/8]
topics:
  quiet: {}
  loud: {}
endpoints:
  sink:
    url: http://127.0.0.1:$sink_port/
    topics: [loud]
EOF
}

# One run: a fresh database, the gateway under heaptrack, `count` events to `topic`, a clean
# stop (SIGTERM) so that heaptrack writes its file. Prints the file's path.
run() {
  local topic=$1 count=$2 data="$out/data-$1-$2"
  rm -rf "$data" && mkdir -p "$data"
  config "$data"
  heaptrack -o "$out/$topic-$count" "$out/hookgate-system-allocator" serve --config "$out/hookgate.yaml" \
    >"$out/$topic-$count.log" 2>&1 &
  local pid=$!
  # Under heaptrack the start is slow: wait up to five minutes.
  local up=""
  for _ in $(seq 1 3000); do
    curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && { up=1; break; }
    sleep 0.1
  done
  [ -n "$up" ] || { echo "the gateway did not start: $out/$topic-$count.log" >&2; exit 1; }
  local sink=()
  [ "$topic" = loud ] && sink=(--sink-stats "http://127.0.0.1:$sink_port/stats")
  target/release/hookgate-loadgen --gateway "http://127.0.0.1:$port" --topic "$topic" \
    --count "$count" --concurrency 16 --payload-bytes 1024 "${sink[@]}" >"$out/$topic-$count.load" 2>&1
  grep -q "answers: 202 ×$count\$" "$out/$topic-$count.load" ||
    { echo "not every event was accepted: $out/$topic-$count.load" >&2; exit 1; }
  # The sink's count says every delivery arrived; its outcome is committed a moment later.
  sleep 2
  # The gateway itself, not heaptrack's script around it (whose command line names it too).
  pkill -TERM -f "^$out/hookgate-system-allocator serve"
  wait "$pid" || true
  ls "$out/$topic-$count".*
}

calls() { heaptrack_print -f "$1" -a 0 -p 0 -T 0 | sed -n 's/^calls to allocation functions: \([0-9]*\).*/\1/p'; }

: >"$out/counts.txt"
for case in ingest deliver; do
  topic=quiet
  [ "$case" = deliver ] && topic=loud
  a=$(run "$topic" "$small" | grep -E '\.(zst|gz)$' | head -1)
  b=$(run "$topic" "$large" | grep -E '\.(zst|gz)$' | head -1)
  per=$(( ($(calls "$b") - $(calls "$a")) / (large - small) ))
  echo "$case: $per allocations per event ($(calls "$a") after $small events, $(calls "$b") after $large)" |
    tee -a "$out/counts.txt"
  heaptrack_print -f "$b" -d "$a" -a 1 -p 0 -T 0 -n 25 >"$out/$case.sites"
done
