#!/usr/bin/env bash
# Builds the container image from a built static binary and runs it, with podman (CI runs it on
# the musl `dist` build):
#
#   scripts/check-image.sh target/x86_64-unknown-linux-musl/dist/hookgate
#
# 1. The image builds from packaging/container/Containerfile.prebuilt, with no network.
# 2. It starts as its non-root user on a named volume, its health check (`hookgate
#    healthcheck --ready`) passes, and an endpoint created through its API delivers an event
#    to a receiver on the host.
# 3. Killed (SIGKILL) and started again on the same volume, it still has the endpoint (its
#    secret encrypted under the key file it made in the volume, mode 0600), the event, and
#    delivers the next one.
#
# Podman runs rootful here, on its own storage under target/ (vfs: no overlay module needed),
# runc with cgroupfs, and the host's network (no bridge or netavark setup); containers.conf
# turns off podman's default ulimits, which this machine's limits do not allow.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(readlink -f "${1:?usage: scripts/check-image.sh PATH-TO-STATIC-HOOKGATE}")
work=$(readlink -f target/image-check)
step() { printf -- '--- image: %s\n' "$*"; }
fail() { printf 'image check failed: %s\n' "$*" >&2; exit 1; }

podman_at() {
  podman --root "$work/storage" --runroot "$work/run" --storage-driver vfs \
    --runtime runc --cgroup-manager cgroupfs "$@"
}
cleanup() {
  podman_at rm -f -t 0 hookgate-check >/dev/null 2>&1 || true
  podman_at volume rm -f hookgate-check-data >/dev/null 2>&1 || true
  [ -n "${sink_pid:-}" ] && kill "$sink_pid" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$work"
mkdir -p "$work"
printf '[containers]\ndefault_ulimits = []\n' > "$work/containers.conf"
export CONTAINERS_CONF="$work/containers.conf"

step "the build context, laid out as the Dockerfile's build stage lays out /rootfs"
context="$work/context"
mkdir -p "$context/rootfs/etc/hookgate" "$context/rootfs/tmp" "$context/data/plugins"
cp "$bin" "$context/rootfs/hookgate"
echo 'hookgate:x:10001:10001:hookgate:/data:/hookgate' > "$context/rootfs/etc/passwd"
echo 'hookgate:x:10001:' > "$context/rootfs/etc/group"
chmod 1777 "$context/rootfs/tmp"
cp packaging/container/hookgate.yaml "$context/rootfs/etc/hookgate/hookgate.yaml"

step "podman build (Containerfile.prebuilt)"
podman_at build --quiet --format docker --network none \
  -f packaging/container/Containerfile.prebuilt -t localhost/hookgate:check "$context" >/dev/null
podman_at image inspect localhost/hookgate:check --format '{{.Config.User}}' | grep -qx '10001:10001' \
  || fail "the image does not run as user 10001"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
sink_port=$(free_port)

step "a receiver on the host"
received="$work/received"
: > "$received"
python3 - "$sink_port" "$received" <<'EOF' &
import http.server, sys
port, out = int(sys.argv[1]), sys.argv[2]
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        with open(out, "a") as f:
            f.write(self.headers.get("webhook-id", "") + "\n")
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
EOF
sink_pid=$!

# The image's config, but on a free port of the host's network and allowed to deliver to the
# receiver on loopback (the SSRF guard refuses loopback by default).
cat > "$work/hookgate.yaml" <<EOF
server:
  listen: 127.0.0.1:$port
  api_keys: ["\${HOOKGATE_API_KEY}"]
storage:
  path: /data/hookgate.db
plugins:
  dir: /data/plugins
delivery:
  allow_networks: [127.0.0.0/8]
topics:
  default: {}
EOF

start() {
  # The image's health check without podman's timer for it (a systemd unit; with no systemd
  # here podman says so on stderr, kept in a file): the script runs it itself.
  podman_at run -d --name hookgate-check --network host --health-interval disable \
    -e HOOKGATE_API_KEY=check-key -e HOOKGATE_URL="http://127.0.0.1:$port" \
    -v hookgate-check-data:/data -v "$work/hookgate.yaml:/etc/hookgate/hookgate.yaml:ro" \
    localhost/hookgate:check >/dev/null 2>"$work/podman-run.log" \
    || { cat "$work/podman-run.log" >&2; fail "podman run"; }
}

# The checks of one run of the container, from the host: $1 is `first` or `restarted`.
check() {
  python3 - "$port" "$sink_port" "$received" "$1" <<'EOF'
import json, sys, time, urllib.error, urllib.request
port, sink_port, received, phase = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
base = f"http://127.0.0.1:{port}"
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"content-type": "application/json",
                                          "authorization": "Bearer check-key"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except OSError:
        return None, None
def wait(what, test, within=60):
    deadline = time.time() + within
    while time.time() < deadline:
        if test():
            return
        time.sleep(0.2)
    sys.exit(f"{phase}: {what} did not happen within {within} s")
def delivered(event_id):
    return event_id in open(received).read().split()
def expect(what, got, status):
    if got[0] != status:
        sys.exit(f"{phase}: {what}: {got}")
    return got[1]

wait("GET /readyz 200", lambda: call("GET", "/readyz")[0] == 200)
if phase == "first":
    expect("creating the endpoint", call("POST", "/v1/endpoints", {
        "name": "host-sink", "url": f"http://127.0.0.1:{sink_port}/hook", "topics": ["default"],
        "headers": {"authorization": "Bearer kept-in-the-volume"}}), 201)
else:
    # Read back from the volume: the endpoint (its secrets opened with the key file there)
    # and the event of the first run.
    expect("the endpoint after the restart", call("GET", "/v1/endpoints/host-sink"), 200)
    expect("the first event after the restart", call("GET", "/v1/events/evt-first"), 200)
event = f"evt-{phase}"
expect("posting an event", call("POST", "/v1/topics/default/events",
                                {"type": "check", "id": event, "payload": {"phase": phase}}), 202)
wait(f"the delivery of {event} to the host", lambda: delivered(event))
print(f"{phase}: ready, {event} delivered to the host")
EOF
}

step "run: ready, healthy, an event delivered to the host"
start
check first || { podman_at logs hookgate-check | tail -n 30; fail "the first run"; }
podman_at image inspect localhost/hookgate:check --format '{{json .HealthCheck.Test}}' \
  | grep -q 'healthcheck","--ready' || fail "the image's HEALTHCHECK is not \`hookgate healthcheck --ready\`"
podman_at healthcheck run hookgate-check >/dev/null || fail "the image's health check failed"
mountpoint=$(podman_at volume inspect hookgate-check-data --format '{{.Mountpoint}}')
[ "$(stat -c '%a %u' "$mountpoint/hookgate.key")" = "600 10001" ] \
  || fail "the key file is not the image user's alone: $(stat -c '%a %u' "$mountpoint/hookgate.key")"
if grep -q 'kept-in-the-volume' "$mountpoint"/hookgate.db*; then
  fail "an endpoint's header value is readable in the database files"
fi

step "kill -9 and start again on the same volume"
podman_at kill --signal KILL hookgate-check >/dev/null
podman_at rm -f hookgate-check >/dev/null 2>&1
start
check restarted || { podman_at logs hookgate-check | tail -n 30; fail "the run after the kill"; }
echo "image: ok"
