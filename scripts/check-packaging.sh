#!/usr/bin/env bash
# Checks what README "Install" promises, on a built shipping binary (CI runs it on the musl
# `dist` build):
#
#   scripts/check-packaging.sh target/x86_64-unknown-linux-musl/dist/hookgate
#
# 1. The binary is static and works in an empty root: the contract smoke test (ingest, deliver,
#    sign) and a kill -9 and restart that must lose nothing acknowledged, with the binary
#    chrooted into a folder that holds only the binary and /tmp, where the tests keep their
#    config and data — what a `FROM scratch` image with a mounted volume is.
# 2. The Debian package installs, upgrades (keeping an edited config), is removed and purged
#    cleanly in a throwaway Debian root (debootstrap), never touching this machine's own, and
#    its systemd unit passes `systemd-analyze verify`.
# 3. The compose file is valid against the Compose specification's JSON Schema, and the compose
#    cluster's nginx config passes `nginx -t`.
# 4. The Helm chart's values pass its schema. Helm itself is not installable here (no Debian
#    package, and its npm and PyPI wrappers download it at install time), so its templates are
#    not rendered.
#
# Needs root (chroot, mount namespaces, debootstrap), debootstrap, dpkg-deb, nginx, python3 and
# the network to Debian's mirror and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(readlink -f "$1")
work=$(readlink -f target/packaging-check)
rm -rf "$work"
mkdir -p "$work"
step() { printf -- '--- packaging: %s\n' "$*"; }
fail() { printf 'packaging check failed: %s\n' "$*" >&2; exit 1; }

step "the binary is static and names its version"
ldd "$bin" 2>&1 | grep -Eq 'not a dynamic executable|statically linked' || fail "$bin is not static: $(ldd "$bin" 2>&1)"
"$bin" --version | grep -q '^hookgate .* (commit ' || fail "--version does not name the commit"

step "the contract smoke test in an empty root"
root="$work/empty-root"
mkdir -p "$root/tmp"
cp "$bin" "$root/hookgate"
wrapper="$work/hookgate-in-empty-root"
# unshare without --fork execs the command in a new mount namespace, so the gateway keeps the
# wrapper's pid and gets smoke.py's signals itself; the bind mount is private to that namespace.
cat > "$wrapper" <<EOF
#!/bin/sh
exec unshare --mount sh -c 'mount --bind /tmp "\$0/tmp" && exec chroot "\$0" /hookgate "\$@"' "$root" "\$@"
EOF
chmod +x "$wrapper"
[ "$(ls -A "$root" | sort | tr '\n' ' ')" = "hookgate tmp " ] || fail "the root holds more than the binary"
python3 ../shared/conformance/smoke.py "$wrapper"

step "the bundled plugins, and kill -9 and restart, in the empty root"
python3 - "$wrapper" <<'EOF'
import json, os, signal, socket, subprocess, sys, tempfile, time, urllib.error, urllib.request

wrapper = sys.argv[1]
work = tempfile.mkdtemp(prefix="hookgate-restart-")
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
port, closed = free_port(), free_port()
config = os.path.join(work, "hookgate.yaml")
with open(config, "w") as f:
    # The endpoint's port is closed: every event stays pending, so all of it must survive.
    f.write(f"""server: {{listen: "127.0.0.1:{port}"}}
storage: {{path: "{work}/hookgate.db"}}
plugins: {{dir: "{work}/plugins"}}
delivery: {{allow_networks: ["127.0.0.0/8"]}}
topics: {{orders: {{}}}}
endpoints:
  e: {{url: "http://127.0.0.1:{closed}/hook", topics: [orders]}}
""")

def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, None

def start():
    proc = subprocess.Popen([wrapper, "serve", "--config", config],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            if call("GET", "/healthz")[0] == 200:
                return proc
        except OSError:
            time.sleep(0.1)
    sys.exit("the gateway did not start in the empty root")

proc = start()
# The plugins of plugins/ are built into the shipping binary: the empty root serves them.
loaded = {p["name"] for p in call("GET", "/v1/plugins")[1]["plugins"]}
bundled = {"cloudevents", "decorrelated-jitter", "github-signature", "js", "redact", "sns-envelope", "stripe-signature"}
assert bundled <= loaded, f"bundled plugins missing in the empty root: {bundled - loaded}"
ids = []
for n in range(200):
    status, body = call("POST", "/v1/topics/orders/events", {"type": "order.created", "payload": {"n": n}})
    assert status == 202, (status, body)
    ids.append(body["id"])
proc.send_signal(signal.SIGKILL)
proc.wait()
proc = start()
missing = [i for i in ids if call("GET", f"/v1/events/{i}")[0] != 200]
proc.send_signal(signal.SIGTERM)
proc.wait(timeout=30)
assert not missing, f"{len(missing)} acknowledged events lost: {missing[:5]}"
print("200 acknowledged events, kill -9, restart: all 200 are there")
EOF

step "the Debian package in a throwaway root"
deb1=$(packaging/debian/build-deb.sh "$bin" "$work/deb" 0.0.1)
deb2=$(packaging/debian/build-deb.sh "$bin" "$work/deb" 0.0.2)
droot="$work/debian-root"
debootstrap --variant=minbase --include=adduser,procps bookworm "$droot" http://deb.debian.org/debian \
    > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; fail "debootstrap"; }
cp "$deb1" "$deb2" "$droot/tmp/"
in_root() { chroot "$droot" "$@"; }
in_root dpkg -i "/tmp/$(basename "$deb1")" >/dev/null
in_root getent passwd hookgate >/dev/null || fail "no hookgate user after install"
[ "$(in_root stat -c %U /var/lib/hookgate)" = hookgate ] || fail "/var/lib/hookgate is not hookgate's"
in_root hookgate --version >/dev/null
in_root hookgate config check /etc/hookgate/hookgate.yaml >/dev/null || fail "the packaged config does not check"
[ -s "$droot/usr/share/man/man1/hookgate.1.gz" ] || fail "no man page"
[ -s "$droot/usr/share/bash-completion/completions/hookgate" ] || fail "no bash completion"
# The throwaway root is minimal: no systemd targets and no man, so verify checks the unit
# itself (keys, values, executables) and the man page is checked above instead.
systemd-analyze verify --man=no --recursive-errors=no --root="$droot" hookgate.service 2>&1 | tee "$work/verify.log"
[ ! -s "$work/verify.log" ] || fail "systemd-analyze verify has remarks on the unit"

echo '# edited by the admin' >> "$droot/etc/hookgate/hookgate.yaml"
in_root dpkg -i "/tmp/$(basename "$deb2")" >/dev/null
[ "$(in_root dpkg-query -W -f='${Version}' hookgate)" = 0.0.2 ] || fail "the upgrade did not take"
grep -q '^# edited by the admin' "$droot/etc/hookgate/hookgate.yaml" || fail "the upgrade lost the config edit"

in_root dpkg -r hookgate >/dev/null
[ ! -e "$droot/usr/bin/hookgate" ] || fail "remove left the binary"
[ -e "$droot/etc/hookgate/hookgate.yaml" ] || fail "remove took the config (only purge may)"
in_root dpkg -P hookgate >/dev/null 2>&1 # deluser notes that cron is absent
for gone in /etc/hookgate/hookgate.yaml /etc/default/hookgate /var/lib/hookgate /lib/systemd/system/hookgate.service; do
    [ ! -e "$droot$gone" ] || fail "purge left $gone"
done
! in_root getent passwd hookgate >/dev/null || fail "purge left the hookgate user"
! getent passwd hookgate >/dev/null || fail "the machine itself got a hookgate user"
! dpkg-query -W hookgate >/dev/null 2>&1 || fail "the machine itself got the package"

step "the compose file against the Compose specification"
venv="$work/venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q 'jsonschema==4.23.0' 'PyYAML==6.0.2'
# The Compose specification's schema as docker-compose 1.29.2 ships it (compose-spec's own
# schema file, pinned by the package's version).
"$venv/bin/pip" download -q --no-deps -d "$work/compose" 'docker-compose==1.29.2'
"$venv/bin/python" - "$work/compose"/docker_compose-1.29.2-*.whl packaging/compose/compose.yaml <<'EOF'
import json, sys, zipfile
import jsonschema, yaml
schema = json.loads(zipfile.ZipFile(sys.argv[1]).read("compose/config/compose_spec.json"))
compose = yaml.safe_load(open(sys.argv[2]))
jsonschema.validate(compose, schema)
assert {"postgres", "gw1", "gw2", "gw3", "nginx"} <= set(compose["services"]), compose["services"].keys()
print("compose.yaml: valid")
EOF

step "the compose cluster's nginx config"
printf '127.0.0.1 localhost gw1 gw2 gw3\n' > "$work/hosts"
mkdir -p "$work/nginx"
unshare --mount sh -c "mount --bind '$work/hosts' /etc/hosts && \
    nginx -t -e stderr -p '$work/nginx' -c '$PWD/packaging/compose/nginx.conf' -g 'pid $work/nginx/nginx.pid;'"

step "the Helm chart's values against its schema"
"$venv/bin/python" - packaging/helm/hookgate <<'EOF'
import json, sys
import jsonschema, yaml
chart = sys.argv[1]
meta = yaml.safe_load(open(f"{chart}/Chart.yaml"))
assert meta["apiVersion"] == "v2" and meta["name"] == "hookgate", meta
schema = json.load(open(f"{chart}/values.schema.json"))
values = yaml.safe_load(open(f"{chart}/values.yaml"))
jsonschema.validate(values, schema)
for mode in ("single", "cluster"):
    jsonschema.validate(dict(values, mode=mode), schema)
try:
    jsonschema.validate(dict(values, mode="both"), schema)
    raise SystemExit("the schema accepted mode: both")
except jsonschema.ValidationError:
    pass
print("helm values: valid (templates not rendered: no helm here)")
EOF

step "all packaging checks passed"
