#!/usr/bin/env bash
# Where the gateway's CPU time per delivery goes (BENCHMARKS.md, "Where each microsecond goes"):
#
#   scripts/profile-cpu.sh [OUT-DIR]        (default target/profile)
#
# For each case it starts a fresh gateway (release build, embedded SQLite, one endpoint on a
# hookgate-sink, Standard Webhooks signing), sends a warm-up, then samples every CPU with
# `perf record -a` while hookgate-loadgen sends the measured events and the sink receives
# every delivery, and reads the gateway's samples. (Sampling the gateway's threads alone, `-p`,
# made each of their context switches several times dearer.) The gateway's CPU time over that
# window (from /proc, user + system) divided by the deliveries is its CPU per delivery; the
# samples split it by thread and by what the code is (scripts/profile-classify.py). Cases:
#
# - `batches`: batches of 100 events, 4 clients (the "end to end, batches" figure);
# - `single`: single events, 64 clients (the "end to end, single events" figure);
# - `plugins`: as `batches`, with the bundled `cloudevents` transform and `github-signature`
#   signer on the endpoint.
#
# The events' payloads are 200 bytes, as in hookgate-bench's end-to-end figures (`PAYLOAD` sets
# another size); `CASES` picks some of the cases;
# `PERF=0` measures the CPU per delivery without sampling; `GATEWAY` runs another build of the
# gateway (an A/B). Needs perf (linux-perf) and
# python3. The load generator and the sink run on the same cores; their CPU is not in the
# figures.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-target/profile}" && readlink -f "${1:-target/profile}")
payload=${PAYLOAD:-200}
cases=${CASES:-batches single plugins}
port=18580
sink_port=18590
secret=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw

command -v perf >/dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 1; }
gateway=${GATEWAY:-target/release/hookgate}
[ -n "${GATEWAY:-}" ] || cargo build --release -q -p hookgate --bin hookgate
cargo build --release -q -p hookgate-loadgen -p hookgate-sink

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
target/release/hookgate-sink --listen "127.0.0.1:$sink_port" --quiet &
pids+=($!)

config() {
  local data=$1 plugged=$2
  cat <<EOF
server:
  listen: 127.0.0.1:$port
storage:
  path: $data/hookgate.db
plugins:
  dir: $data/plugins
delivery:
  allow_networks: [127.0.0.0/8]
topics:
  orders: {}
endpoints:
  e:
    url: http://127.0.0.1:$sink_port/
    topics: [orders]
    secret: $secret
EOF
  if [ "$plugged" = yes ]; then
    printf '    transform: {plugin: cloudevents, config: {source: /bench}}\n'
    printf '    signer: {plugin: github-signature}\n'
  fi
}

# The gateway's CPU time so far, in clock ticks (user + system, all threads).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
delivered() { curl -fs "http://127.0.0.1:$sink_port/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["answered_ok"])'; }

# One case: `run NAME PLUGGED REQUESTS LOADGEN-ARGS...`: a tenth of REQUESTS to warm up, then
# REQUESTS sampled.
run() {
  local name=$1 plugged=$2 requests=$3
  shift 3
  local data="$out/data-$name"
  rm -rf "$data" && mkdir -p "$data"
  config "$data" "$plugged" >"$data/hookgate.yaml"
  "$gateway" serve --config "$data/hookgate.yaml" >"$out/$name.log" 2>&1 &
  local gw=$!
  pids+=("$gw")
  for _ in $(seq 1 300); do
    curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  local load=(target/release/hookgate-loadgen --gateway "http://127.0.0.1:$port" --topic orders
    --payload-bytes "$payload" --sink-stats "http://127.0.0.1:$sink_port/stats" "$@")
  "${load[@]}" --count $((requests / 10)) >"$out/$name.warm" 2>&1
  local before_ok before_ticks
  before_ok=$(delivered)
  before_ticks=$(ticks "$gw")
  local sample=(perf record -q -a -F 999 -o "$out/$name.data" --)
  [ "${PERF:-1}" = 0 ] && sample=()
  "${sample[@]}" "${load[@]}" --count "$requests" >"$out/$name.load" 2>&1
  local after_ticks after_ok
  after_ticks=$(ticks "$gw")
  after_ok=$(delivered)
  kill "$gw"
  wait "$gw" 2>/dev/null || true
  local hz
  hz=$(getconf CLK_TCK)
  if [ "${PERF:-1}" = 0 ]; then
    python3 -c "print('$name: %.1f µs of gateway CPU per delivery, unsampled' % (($after_ticks - $before_ticks) / $hz * 1e6 / ($after_ok - $before_ok)))"
    return
  fi
  perf report -i "$out/$name.data" --pid "$gw" --no-children --sort comm,dso,sym -F overhead,comm,dso,sym \
    --stdio 2>/dev/null >"$out/$name.report"
  python3 scripts/profile-classify.py "$out/$name.report" \
    --cpu-us "$(python3 -c "print(($after_ticks - $before_ticks) / $hz * 1e6)")" \
    --deliveries "$((after_ok - before_ok))" --case "$name" | tee "$out/$name.txt"
}

for case in $cases; do
  case $case in
    batches) run batches no 2000 --batch 100 --concurrency 4 ;;
    single) run single no 100000 --concurrency 64 ;;
    plugins) run plugins yes 2000 --batch 100 --concurrency 4 ;;
    *) echo "unknown case $case (batches, single, plugins)" >&2; exit 2 ;;
  esac
done
