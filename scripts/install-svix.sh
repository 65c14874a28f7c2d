#!/bin/sh
# Installs Svix's official SDKs, pinned, that gateway/tests/it/svix_sdk.rs drives hookgate's
# Svix-compatible API with, into target/svix/:
#
#   target/svix/venv/                    Python virtualenv with `svix` from PyPI
#   target/svix/node/node_modules/svix   the `svix` npm package
#   target/svix/rust/svix-rust-smoke     gateway/tests/svix/rust built with the `svix` crate
#
# Needs python3 (with venv), node >= 20 with npm, and cargo with OpenSSL's headers (installed
# with apt-get when missing). The tests find them there by themselves; without them they print
# "SKIPPED", and with HOOKGATE_TEST_SVIX_REQUIRED=1 they fail. The Rust smoke is a project of
# its own (its Cargo.lock pins the crate's dependencies), built here once, in debug, rather
# than by every test build of the gateway.
set -eu

SVIX_PYTHON_VERSION=2.9.1
SVIX_NODE_VERSION=2.5.0

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/target/svix"
mkdir -p "$dir/node" "$dir/rust"

python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install --quiet --disable-pip-version-check "svix==$SVIX_PYTHON_VERSION"

# svix 2.x declares node >= 22 but runs on Node.js 20 (the smoke test proves it here).
npm install --silent --no-audit --no-fund --engine-strict=false --prefix "$dir/node" "svix@$SVIX_NODE_VERSION"

# The Rust SDK's TLS links OpenSSL: its headers and pkg-config, from Debian's packages.
if ! pkg-config --exists openssl 2>/dev/null && command -v apt-get >/dev/null; then
    apt-get update -q >/dev/null
    apt-get install -y -q libssl-dev pkg-config >/dev/null
fi
cargo build --quiet --locked --manifest-path "$root/gateway/tests/svix/rust/Cargo.toml" \
    --target-dir "$dir/rust-target"
cp "$dir/rust-target/debug/svix-rust-smoke" "$dir/rust/svix-rust-smoke"

"$dir/venv/bin/python" -c 'import svix; print("svix (PyPI)", svix.__version__)'
(cd "$dir/node" && node --input-type=module -e \
    'import { Svix } from "svix"; import pkg from "svix/package.json" with { type: "json" }; console.log("svix (npm)", pkg.version, typeof Svix);')
echo "svix (crates.io) $(grep -A1 '^name = "svix"$' "$root/gateway/tests/svix/rust/Cargo.lock" | sed -n 's/^version = "\(.*\)"/\1/p')"
