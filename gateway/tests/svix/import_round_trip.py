#!/usr/bin/env python3
"""`hookgate import svix` round trip: a setup made with Svix's Python SDK on one gateway (the
"Svix server", read through its Svix API) is imported into a fresh gateway, and the same
receivers keep verifying what the new one sends with the secrets they already had.

Run by gateway/tests/it/svix_sdk.rs with:
  HOOKGATE_BIN                    the hookgate binary (for `hookgate import svix`)
  SOURCE_URL, SOURCE_KEY          the gateway playing the Svix server, and its admin key
  TARGET_URL, TARGET_KEY          the fresh gateway, and its admin key
Prints one line per check and a closing line `N passed, N failed`; exits 1 if any failed.
"""
import os
import subprocess
import sys

from svix.api import (
    ApplicationIn,
    EndpointHeadersIn,
    EndpointIn,
    EventTypeIn,
    MessageIn,
    Svix,
    SvixOptions,
)
from svix.exceptions import HttpError

from helpers import Receiver, check, results, settle, verifies

BIN = os.environ["HOOKGATE_BIN"]
SOURCE_URL, SOURCE_KEY = os.environ["SOURCE_URL"], os.environ["SOURCE_KEY"]
TARGET_URL, TARGET_KEY = os.environ["TARGET_URL"], os.environ["TARGET_KEY"]


def import_svix(*extra):
    command = [BIN, "import", "svix", "--url", SOURCE_URL, "--gateway", TARGET_URL, *extra]
    env = dict(os.environ, SVIX_AUTH_TOKEN=SOURCE_KEY, HOOKGATE_API_KEY=TARGET_KEY)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    print(f"$ hookgate import svix {' '.join(extra)}\n{done.stdout}{done.stderr}", flush=True)
    return done


def main():
    source = Svix(SOURCE_KEY, SvixOptions(server_url=SOURCE_URL))
    target = Svix(TARGET_KEY, SvixOptions(server_url=TARGET_URL))

    # The setup on the "Svix server".
    schema = {"1": {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}}
    source.event_type.create(EventTypeIn(name="order.paid", description="An order was paid", schemas=schema))
    shop = source.application.create(ApplicationIn(name="Shop", uid="shop", metadata={"tier": "gold"}))
    bare = source.application.create(ApplicationIn(name="No uid"))
    eu, everything, bare_receiver = Receiver(), Receiver(), Receiver()
    given_secret = "whsec_" + "C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
    ep_eu = source.endpoint.create("shop", EndpointIn(url=eu.url, channels=["eu"], uid="eu-hooks", secret=given_secret))
    ep_all = source.endpoint.create("shop", EndpointIn(url=everything.url, event_types=["order.paid"], headers={"X-Shop": "1"}))
    ep_bare = source.endpoint.create(bare.id, EndpointIn(url=bare_receiver.url, description="bare"))
    secrets = {
        "eu": source.endpoint.get_secret("shop", ep_eu.id).key,
        "all": source.endpoint.get_secret("shop", ep_all.id).key,
        "bare": source.endpoint.get_secret(bare.id, ep_bare.id).key,
    }
    check("the source keeps a given secret", secrets["eu"] == given_secret)

    # A dry run reads everything and writes nothing.
    dry = import_svix("--dry-run")
    check("a dry run succeeds", dry.returncode == 0, dry.stderr)
    check("and says what it would copy",
          "would copy 1 event types, 2 applications, 3 endpoints (3 secrets, 1 headers)" in dry.stdout, dry.stdout)
    check("and copies nothing", target.application.list().data == [])

    first = import_svix()
    check("the import succeeds", first.returncode == 0, first.stderr)
    check("and says what it copied", "copied 1 event types, 2 applications, 3 endpoints" in first.stdout, first.stdout)
    again = import_svix()
    check("a second import succeeds too", again.returncode == 0, again.stderr)
    apps = target.application.list().data
    check("and adds nothing: two applications", len(apps) == 2, apps)
    check("the application keeps its uid, name and metadata",
          target.application.get("shop").name == "Shop" and target.application.get("shop").metadata == {"tier": "gold"})
    check("an application without uid is found by its Svix id", target.application.get(bare.id).name == "No uid")
    copied = target.endpoint.list("shop").data
    check("the endpoints are there once each", len(copied) == 2, copied)
    check("an endpoint keeps its uid and channels", target.endpoint.get("shop", "eu-hooks").channels == ["eu"])
    check("an endpoint without uid is found by its Svix id",
          target.endpoint.get("shop", ep_all.id).event_types == ["order.paid"])
    check("headers are copied", target.endpoint.get_headers("shop", ep_all.id).headers == {"X-Shop": "1"})
    check("the secrets are the same",
          target.endpoint.get_secret("shop", "eu-hooks").key == secrets["eu"]
          and target.endpoint.get_secret(bare.id, ep_bare.id).key == secrets["bare"])
    check("the event type and its schema are copied", target.event_type.get("order.paid").schemas == schema)
    try:
        target.message.create("shop", MessageIn(event_type="order.paid", payload={"total": "ten"}))
        check("the copied schema is enforced", False)
    except HttpError as e:
        check("the copied schema is enforced", e.status_code == 400, e)

    # The new gateway sends; the receivers verify with the secrets they had.
    paid = target.message.create("shop", MessageIn(event_type="order.paid", payload={"total": 10}, channels=["eu"]))
    hello = target.message.create(bare.id, MessageIn(event_type="hello", payload={"hi": True}))
    for receiver, secret, msg in ((eu, secrets["eu"], paid), (everything, secrets["all"], paid), (bare_receiver, secrets["bare"], hello)):
        check(f"a delivery arrives at {receiver.url}", receiver.wait_for(1))
        headers, body = receiver.requests[-1]
        check("it is the new gateway's message", headers.get("svix-id") == msg.id, headers)
        check("the receiver verifies it with the secret it already had", verifies(secret, headers, body), headers)
    check("the copied headers are sent", everything.requests[-1][0].get("x-shop") == "1")
    settle()
    check("each receiver got exactly one delivery", [len(r.requests) for r in (eu, everything, bare_receiver)] == [1, 1, 1])

    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        import traceback

        traceback.print_exc()
        passed = sum(results)
        print(f"{passed} passed, {len(results) - passed + 1} failed")
        sys.exit(1)
