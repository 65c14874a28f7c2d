#!/bin/sh
# Installs Svix's official SDKs, pinned, that gateway/tests/it/svix_sdk.rs drives hookgate's
# Svix-compatible API with, into target/svix/:
#
#   target/svix/venv/                    Python virtualenv with `svix` from PyPI
#   target/svix/node/node_modules/svix   the `svix` npm package
#
# Needs python3 (with venv) and node >= 20 with npm. The tests find them there by themselves;
# without them they print "SKIPPED", and with HOOKGATE_TEST_SVIX_REQUIRED=1 they fail.
set -eu

SVIX_PYTHON_VERSION=2.9.1
SVIX_NODE_VERSION=2.5.0

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/target/svix"
mkdir -p "$dir/node"

python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install --quiet --disable-pip-version-check "svix==$SVIX_PYTHON_VERSION"

# svix 2.x declares node >= 22 but runs on Node.js 20 (the smoke test proves it here).
npm install --silent --no-audit --no-fund --engine-strict=false --prefix "$dir/node" "svix@$SVIX_NODE_VERSION"

"$dir/venv/bin/python" -c 'import svix; print("svix (PyPI)", svix.__version__)'
(cd "$dir/node" && node --input-type=module -e \
    'import { Svix } from "svix"; import pkg from "svix/package.json" with { type: "json" }; console.log("svix (npm)", pkg.version, typeof Svix);')
