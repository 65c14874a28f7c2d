#!/bin/sh
# Installs the official signature verifiers that the signer tests check the bundled
# `stripe-signature` and `github-signature` plugins against, into target/verifiers/:
#
#   target/verifiers/venv/            Python virtualenv with `stripe` from PyPI
#                                     (stripe.Webhook.construct_event)
#   target/verifiers/node/node_modules/@octokit/webhooks-methods   from npm (verify)
#
# Needs python3 (with venv) and node >= 18 with npm. The tests find them there by themselves;
# without them they print "SKIPPED", and with HOOKGATE_TEST_VERIFIERS=required they fail.
set -eu

STRIPE_VERSION=16.1.0
OCTOKIT_WEBHOOKS_METHODS_VERSION=6.0.0

root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/target/verifiers"
mkdir -p "$dir/node"

python3 -m venv "$dir/venv"
"$dir/venv/bin/pip" install --quiet --disable-pip-version-check "stripe==$STRIPE_VERSION"

npm install --silent --no-audit --no-fund --prefix "$dir/node" \
    "@octokit/webhooks-methods@$OCTOKIT_WEBHOOKS_METHODS_VERSION"

"$dir/venv/bin/python" -c 'import stripe; print("stripe", stripe.VERSION)'
(cd "$dir/node" && node --input-type=module -e \
    'import { verify } from "@octokit/webhooks-methods"; console.log("@octokit/webhooks-methods", typeof verify);')
