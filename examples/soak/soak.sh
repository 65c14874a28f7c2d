#!/usr/bin/env bash
# Soak test: a steady open-loop load on two endpoints of a sink that fails a share of requests,
# sampled every 10 s (gateway RSS, CPU, queue depth, sink counters), then a check, by event id,
# that every accepted event ended delivered (the receiver answered 2xx for its webhook-id) or
# dead-lettered (status `dead` in the gateway) on both endpoints, and never both.
#
#   examples/soak/soak.sh                      # 500 events/s for 10 minutes, 20 % failures
#   RATE=1000 DURATION=30m FAIL=0.5 examples/soak/soak.sh
#   PROFILE=dev RATE=50 DURATION=20s examples/soak/soak.sh   # a smoke run on debug binaries
#
# Writes samples.tsv, a chart of it (soak.svg), the gateway's log, the final metrics and the id
# lists (accepted.txt; per endpoint, delivered-*.txt and dead-*.txt) to $OUT (default
# target/soak-<time>). Exits 1 if an event is unaccounted for or a signature
# was refused.
set -euo pipefail
cd "$(dirname "$0")/../.."
export LC_ALL=C  # one collation for sort and comm

RATE="${RATE:-500}"
DURATION="${DURATION:-600s}"
FAIL="${FAIL:-0.2}"
OUT="${OUT:-target/soak-$(date +%Y%m%d-%H%M%S)}"
GW_PORT="${GW_PORT:-18080}"
SINK_PORT_A="${SINK_PORT_A:-19100}"
SINK_PORT_B="${SINK_PORT_B:-19101}"
SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw

PROFILE="${PROFILE:-release}"
cargo build --profile "$PROFILE" -q -p hookgate -p hookgate-sink -p hookgate-loadgen
BIN=target/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

cat > "$OUT/hookgate.yaml" <<YAML
server:
  listen: 127.0.0.1:$GW_PORT
storage:
  path: $OUT/data/hookgate.db
plugins:
  dir: $OUT/plugins
delivery:
  allow_networks: [127.0.0.0/8]
policies:
  soak:
    schedule: [0s, 1s, 5s, 30s, 2m]    # five attempts within ~3 minutes, then dead letter
topics:
  soak: { policy: soak }
endpoints:
  flaky-a: { url: "http://127.0.0.1:$SINK_PORT_A/a", topics: [soak], secret: $SECRET, dead_letter: true }
  flaky-b: { url: "http://127.0.0.1:$SINK_PORT_B/b", topics: [soak], secret: $SECRET, dead_letter: true }
YAML

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for port in "$SINK_PORT_A" "$SINK_PORT_B"; do
  "$BIN/hookgate-sink" --listen "127.0.0.1:$port" --secret "$SECRET" --fail-fraction "$FAIL" --quiet \
    > "$OUT/sink-$port.log" 2>&1 &
  pids+=($!)
done
"$BIN/hookgate" serve --config "$OUT/hookgate.yaml" > "$OUT/gateway.log" 2>&1 &
GW=$!
pids+=("$GW")
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$GW_PORT/healthz" >/dev/null && break; sleep 0.1; done

"$BIN/hookgate-loadgen" --gateway "http://127.0.0.1:$GW_PORT" --topic soak --rate "$RATE" \
  --duration "$DURATION" --accepted-ids "$OUT/accepted.txt" > "$OUT/loadgen.log" 2>&1 &
LOADGEN=$!

metric() { awk -v m="$1" '$1 == m || index($1, m"{") == 1 { s += $2 } END { print s + 0 }' "$OUT/metrics.txt"; }
# The p99 of the attempts' lateness (start minus planned time: for a first attempt, the lag
# from commit to send) over the last window, from the difference of two histogram snapshots.
lag_p99() {
  python3 - "$OUT/metrics.txt" "$OUT/metrics.prev" <<'PY'
import re, sys
def buckets(path):
    out = {}
    try:
        for line in open(path):
            m = re.match(r'hookgate_attempt_lateness_seconds_bucket\{le="([^"]+)"\} (\S+)', line)
            if m:
                out[m.group(1)] = float(m.group(2))
    except FileNotFoundError:
        pass
    return out
now, prev = buckets(sys.argv[1]), buckets(sys.argv[2])
delta = [(float(le), n - prev.get(le, 0)) for le, n in now.items()]
delta.sort()
total = delta[-1][1] if delta else 0
if total <= 0:
    print("-")
else:
    le = next(le for le, n in delta if n >= 0.99 * total)
    print("inf" if le == float("inf") else f"{le * 1000:.1f}")
PY
}
start=$(date +%s)
printf 't_s\trss_mib\tcpu_s\tqueue_depth\tattempts\tlag_p99_ms\tsink_a_requests\n' > "$OUT/samples.tsv"
while true; do
  [ -f "$OUT/metrics.txt" ] && mv "$OUT/metrics.txt" "$OUT/metrics.prev"
  curl -s "http://127.0.0.1:$GW_PORT/metrics" > "$OUT/metrics.txt"
  rss=$(awk '/VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$GW/status")
  cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$GW/stat")
  depth=$(metric hookgate_queue_depth)
  attempts=$(metric hookgate_attempts_total)
  lag=$(lag_p99)
  sink_a=$(curl -s "http://127.0.0.1:$SINK_PORT_A/stats" | python3 -c 'import json, sys; print(json.load(sys.stdin)["requests"])')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(( $(date +%s) - start ))" "$rss" "$cpu" "$depth" "$attempts" "$lag" "$sink_a" \
    | tee -a "$OUT/samples.tsv"
  if ! kill -0 "$LOADGEN" 2>/dev/null && [ "$depth" = "0" ]; then break; fi
  sleep 10
done
wait "$LOADGEN" || { echo "soak: the load generator failed" >&2; exit 1; }
LOAD_SECONDS=$(awk '/events accepted in/ { for (i = 1; i <= NF; i++) if ($i == "in") { print $(i + 1) + 0; exit } }' "$OUT/loadgen.log")
cat "$OUT/loadgen.log"

# The ids of one endpoint's dead-lettered deliveries, one per line, from the API.
dead_ids() {
  python3 - "http://127.0.0.1:$GW_PORT" "$1" <<'PY'
import json, sys, urllib.request
base, endpoint = sys.argv[1], sys.argv[2]
cursor = None
while True:
    url = f"{base}/v1/deliveries?endpoint={endpoint}&status=dead&limit=1000"
    if cursor:
        url += f"&cursor={cursor}"
    page = json.load(urllib.request.urlopen(url))
    for d in page["deliveries"]:
        print(d["event_id"])
    cursor = page.get("next_cursor")
    if not cursor:
        break
PY
}

status=0
sort -u "$OUT/accepted.txt" > "$OUT/accepted.sorted"
accepted=$(wc -l < "$OUT/accepted.sorted")
[ "$accepted" -eq "$(wc -l < "$OUT/accepted.txt")" ] || { echo "the gateway gave an id twice"; status=1; }
for pair in "flaky-a:$SINK_PORT_A" "flaky-b:$SINK_PORT_B"; do
  endpoint=${pair%%:*} port=${pair##*:}
  curl -s "http://127.0.0.1:$port/ids" | sort -u > "$OUT/delivered-$endpoint.txt"
  dead_ids "$endpoint" | sort -u > "$OUT/dead-$endpoint.txt"
  ok=$(wc -l < "$OUT/delivered-$endpoint.txt")
  dead=$(wc -l < "$OUT/dead-$endpoint.txt")
  # Accepted ids neither delivered nor dead-lettered; ids both; ids the receiver got that were
  # never accepted.
  missing=$(sort -u "$OUT/delivered-$endpoint.txt" "$OUT/dead-$endpoint.txt" | comm -23 "$OUT/accepted.sorted" - | wc -l)
  both=$(comm -12 "$OUT/delivered-$endpoint.txt" "$OUT/dead-$endpoint.txt" | wc -l)
  unknown=$(comm -13 "$OUT/accepted.sorted" "$OUT/delivered-$endpoint.txt" | wc -l)
  echo "$endpoint: $ok distinct ids delivered + $dead dead-lettered of $accepted accepted" \
    "($missing missing, $both both, $unknown never accepted)"
  [ "$missing" -eq 0 ] && [ "$both" -eq 0 ] && [ "$unknown" -eq 0 ] && [ $((ok + dead)) -eq "$accepted" ] || status=1
done
for port in "$SINK_PORT_A" "$SINK_PORT_B"; do
  invalid=$(curl -s "http://127.0.0.1:$port/stats" | python3 -c 'import json, sys; print(json.load(sys.stdin)["signatures_invalid"])')
  [ "$invalid" -eq 0 ] || { echo "sink $port refused $invalid signatures"; status=1; }
done
python3 examples/soak/chart.py "$OUT/samples.tsv" "$OUT/soak.svg" "$LOAD_SECONDS"
echo "chart: $OUT/soak.svg"
[ "$status" -eq 0 ] && echo "soak: every accepted event is accounted for" || echo "soak: FAILED" >&2
exit "$status"
