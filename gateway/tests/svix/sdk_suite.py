#!/usr/bin/env python3
"""Svix's official Python SDK (the `svix` package from PyPI, pinned in scripts/install-svix.sh)
against a running hookgate, as a user of Svix would drive it: only `server_url` differs.

Run by gateway/tests/it/svix_sdk.rs, which starts the gateway and passes in the environment:
  HOOKGATE_URL          the gateway
  HOOKGATE_ADMIN_KEY    an admin key
  HOOKGATE_ACME_KEY     a key of tenant `acme`
  SVIX_SUITE_RESULTS    a file to write what the browser step needs (the portal link)

Every delivery a receiver gets is verified with svix.webhooks.Webhook from the same package,
with only the svix-* headers left, so that a receiver written for Svix is what is proven.
Prints one line per check, the SDK calls made and what each answered, and a closing line
`N passed, N failed`; exits 1 if any check failed.
"""
import datetime
import json
import os
import sys
import time
import urllib.request

from svix.api import (
    AppPortalAccessIn,
    ApplicationIn,
    ApplicationListOptions,
    ApplicationPatch,
    EndpointHeadersIn,
    EndpointHeadersPatchIn,
    EndpointIn,
    EndpointListOptions,
    EndpointPatch,
    EndpointSecretRotateIn,
    EndpointUpsertIn,
    EventExampleIn,
    EventTypeIn,
    EventTypePatch,
    EventTypeUpsertIn,
    MessageAttemptListByEndpointOptions,
    MessageAttemptListByMsgOptions,
    MessageCreateOptions,
    MessageGetOptions,
    MessageIn,
    MessageListOptions,
    RecoverIn,
    Svix,
    SvixOptions,
)
from svix.api.message import message_in_raw
from svix.exceptions import HttpError, HTTPValidationError

from helpers import Receiver, check, eventually, results, settle, verifies

URL = os.environ["HOOKGATE_URL"]
ADMIN = os.environ["HOOKGATE_ADMIN_KEY"]
ACME_KEY = os.environ["HOOKGATE_ACME_KEY"]
RESULTS = os.environ.get("SVIX_SUITE_RESULTS")

calls = []


def client(key):
    # Retries as the SDK makes them by default; a short timeout keeps a hang visible.
    return Svix(key, SvixOptions(server_url=URL, timeout=20))


class Recorder:
    """Wraps an SDK object so that every call is recorded with what it answered."""

    def __init__(self, inner, prefix):
        self._inner, self._prefix = inner, prefix

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return Recorder(attr, f"{self._prefix}.{name}")

        def call(*args, **kwargs):
            label = f"{self._prefix}.{name}"
            try:
                value = attr(*args, **kwargs)
            except HttpError as e:
                calls.append((label, f"{e.status_code} {e.code}"))
                raise
            except HTTPValidationError as e:
                calls.append((label, f"{e.status_code} validation"))
                raise
            calls.append((label, "ok"))
            return value

        return call


def sdk(key):
    return Recorder(client(key), "svix")


def expect_error(name, status, fn):
    try:
        fn()
    except (HttpError, HTTPValidationError) as e:
        check(name, e.status_code == status, f"answered {e.status_code}, wanted {status}: {e}")
        return e
    check(name, False, f"no error, wanted {status}")
    return None


def main():
    admin = sdk(ADMIN)
    started = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)

    # Health.
    admin.health.get()
    check("health answers", True)

    # Applications.
    acme = admin.application.create(ApplicationIn(name="Acme", uid="acme", metadata={"plan": "pro"}))
    check("an application gets an app_ id and keeps uid and metadata",
          acme.id.startswith("app_") and acme.uid == "acme" and acme.metadata == {"plan": "pro"}, acme)
    globex = admin.application.create(ApplicationIn(name="Globex"))
    check("an application without uid is its own tenant", globex.uid is None, globex)
    again = admin.application.get_or_create(ApplicationIn(name="Acme", uid="acme"))
    check("get_or_create answers the existing application", again.id == acme.id, again)
    check("an application is found by its uid and by its id",
          admin.application.get("acme").id == acme.id and admin.application.get(acme.id).uid == "acme")
    expect_error("a second application with the same uid is a conflict", 409,
                 lambda: admin.application.create(ApplicationIn(name="Other", uid="acme")))
    expect_error("a missing application is 404", 404, lambda: admin.application.get("nope"))
    patched = admin.application.patch("acme", ApplicationPatch(name="Acme Corp"))
    check("patch changes the name and keeps the rest", patched.name == "Acme Corp" and patched.metadata == {"plan": "pro"})
    upserted = admin.application.upsert("initech", ApplicationIn(name="Initech"))
    check("upsert creates an application named by its uid", upserted.uid == "initech", upserted)
    first = admin.application.list(ApplicationListOptions(limit=2))
    rest = admin.application.list(ApplicationListOptions(limit=2, iterator=first.iterator))
    listed = [a.id for a in first.data + rest.data]
    check("applications page with limit and iterator", not first.done and rest.done and len(set(listed)) == 3, listed)

    # Event types, one with a JSON Schema.
    schema = {
        "1": {
            "type": "object",
            "required": ["email"],
            "properties": {"email": {"type": "string"}},
            "examples": [{"email": "example@acme.test"}],
        }
    }
    signup = admin.event_type.create(EventTypeIn(name="user.signup", description="A user signed up", schemas=schema))
    check("an event type keeps its schema", signup.schemas == schema, signup)
    admin.event_type.create(EventTypeIn(name="invoice.paid", description="An invoice was paid"))
    admin.event_type.patch("invoice.paid", EventTypePatch(description="Paid"))
    check("an event type is read back", admin.event_type.get("invoice.paid").description == "Paid")
    admin.event_type.upsert("user.deleted", EventTypeUpsertIn(description="A user left"))
    names = [t.name for t in admin.event_type.list().data]
    check("event types are listed", {"user.signup", "invoice.paid", "user.deleted"} <= set(names), names)
    expect_error("a second event type of the same name is a conflict", 409,
                 lambda: admin.event_type.create(EventTypeIn(name="user.signup", description="again")))

    # Endpoints: by event type, by channel, and one for everything.
    by_type, by_channel, everything, other = Receiver(), Receiver(), Receiver(), Receiver()
    ep_type = admin.endpoint.create("acme", EndpointIn(url=by_type.url, event_types=["user.signup"], uid="signups"))
    ep_channel = admin.endpoint.create("acme", EndpointIn(url=by_channel.url, channels=["eu"], description="EU"))
    ep_all = admin.endpoint.create("acme", EndpointIn(url=everything.url, metadata={"team": "ops"}))
    ep_other = admin.endpoint.create(globex.id, EndpointIn(url=other.url))
    check("an endpoint gets an ep_ id and keeps its filters",
          ep_type.id.startswith("ep_") and ep_type.event_types == ["user.signup"] and ep_channel.channels == ["eu"])
    check("an endpoint is found by its uid", admin.endpoint.get("acme", "signups").id == ep_type.id)
    expect_error("a second endpoint with the same uid is a conflict", 409,
                 lambda: admin.endpoint.create("acme", EndpointIn(url=by_type.url, uid="signups")))
    expect_error("an endpoint URL that is not a URL is refused", 422,
                 lambda: admin.endpoint.create("acme", EndpointIn(url="not a url")))
    page1 = admin.endpoint.list("acme", EndpointListOptions(limit=2))
    page2 = admin.endpoint.list("acme", EndpointListOptions(limit=2, iterator=page1.iterator))
    check("endpoints page with limit and iterator",
          len(page1.data) == 2 and len(page2.data) == 1 and page2.done, (page1, page2))
    secrets = {ep.id: admin.endpoint.get_secret("acme", ep.id).key for ep in (ep_type, ep_channel, ep_all)}
    check("secrets are whsec_ keys", all(s.startswith("whsec_") for s in secrets.values()), secrets)

    # Messages: types and channels pick the endpoints.
    m1 = admin.message.create("acme", MessageIn(event_type="user.signup", payload={"email": "a@acme.test"}, channels=["eu"]))
    m2 = admin.message.create("acme", MessageIn(event_type="invoice.paid", payload={"n": 1}))
    m3 = admin.message.create("acme", MessageIn(event_type="invoice.paid", payload={"n": 2}, channels=["us"]))
    check("a message gets a msg_ id", m1.id.startswith("msg_"), m1)
    everything.wait_for(3)
    by_type.wait_for(1)
    by_channel.wait_for(1)
    settle()
    check("an endpoint without filters gets every message", sorted(everything.ids()) == sorted([m1.id, m2.id, m3.id]), everything.ids())
    check("an endpoint with event types gets only those", by_type.ids() == [m1.id], by_type.ids())
    check("an endpoint with channels gets only messages on one of them", by_channel.ids() == [m1.id], by_channel.ids())
    check("another application's endpoint gets nothing", other.ids() == [], other.ids())
    for receiver, ep in ((everything, ep_all), (by_type, ep_type), (by_channel, ep_channel)):
        for headers, body in receiver.requests:
            check(f"svix.webhooks.Webhook verifies a delivery to {ep.id}", verifies(secrets[ep.id], headers, body), headers)
            check("svix-* headers carry the webhook-* values",
                  headers.get("svix-id") == headers.get("webhook-id")
                  and headers.get("svix-signature") == headers.get("webhook-signature")
                  and headers.get("svix-timestamp") == headers.get("webhook-timestamp"), headers)
    check("the payload arrives as sent", json.loads(by_type.requests[0][1]) == {"email": "a@acme.test"})

    # A payload its event type's schema refuses.
    bad = expect_error("a payload that breaks its type's JSON Schema is refused with 400", 400,
                       lambda: admin.message.create("acme", MessageIn(event_type="user.signup", payload={"email": 42})))
    check("the refusal says where the payload fails", bad is not None and "/email" in bad.detail, bad and bad.detail)

    # Idempotent eventId, and the idempotency-key.
    e1 = admin.message.create("acme", MessageIn(event_type="invoice.paid", payload={"n": 3}, event_id="inv-3"))
    expect_error("a repeated eventId is a conflict", 409,
                 lambda: admin.message.create("acme", MessageIn(event_type="invoice.paid", payload={"n": 3}, event_id="inv-3")))
    other_app = admin.message.create(globex.id, MessageIn(event_type="invoice.paid", payload={"n": 3}, event_id="inv-3"))
    check("another application may use the same eventId", other_app.id != e1.id)
    check("a message is found by its eventId", admin.message.get("acme", "inv-3").id == e1.id)
    k1 = admin.message.create("acme", MessageIn(event_type="invoice.paid", payload={"n": 4}),
                              MessageCreateOptions(idempotency_key="order-4"))
    k2 = admin.message.create("acme", MessageIn(event_type="invoice.paid", payload={"n": 4}),
                              MessageCreateOptions(idempotency_key="order-4"))
    check("a repeated idempotency-key answers the first message", k1.id == k2.id, (k1.id, k2.id))
    raw = admin.message.create("acme", message_in_raw("invoice.paid", '{"raw":  true}', "application/json"))
    everything.wait_for(6)
    settle()
    check("an idempotency-key retry sends nothing twice", everything.ids().count(k1.id) == 1, everything.ids())
    raw_bodies = [b for h, b in everything.requests if h.get("svix-id") == raw.id]
    check("a raw payload is sent byte for byte", raw_bodies == [b'{"raw":  true}'], raw_bodies)

    # Messages and attempts, paged with the iterator.
    msgs = admin.message.list("acme", MessageListOptions(limit=2))
    seen = [m.id for m in msgs.data]
    while not msgs.done:
        msgs = admin.message.list("acme", MessageListOptions(limit=2, iterator=msgs.iterator))
        seen += [m.id for m in msgs.data]
    check("messages page newest first to the end", seen[0] == raw.id and len(seen) == len(set(seen)) == 6, seen)
    on_channel = admin.message.list("acme", MessageListOptions(channel="eu"))
    check("messages filter by channel", [m.id for m in on_channel.data] == [m1.id])
    eventually(lambda: admin.message_attempt.list_by_endpoint("acme", ep_all.id), lambda page: len(page.data) == 6)
    attempts = admin.message_attempt.list_by_endpoint("acme", ep_all.id, MessageAttemptListByEndpointOptions(limit=2))
    attempt_ids = [a.id for a in attempts.data]
    while not attempts.done:
        attempts = admin.message_attempt.list_by_endpoint(
            "acme", ep_all.id, MessageAttemptListByEndpointOptions(limit=2, iterator=attempts.iterator))
        attempt_ids += [a.id for a in attempts.data]
    check("an endpoint's attempts page with the iterator, each once", len(attempt_ids) == len(set(attempt_ids)) == 6, attempt_ids)
    by_msg = eventually(lambda: admin.message_attempt.list_by_msg("acme", m1.id), lambda page: len(page.data) == 3)
    check("a message's attempts: one per endpoint, all successful",
          len(by_msg.data) == 3 and all(a.status == 0 and a.response_status_code == 200 for a in by_msg.data), by_msg)
    one = admin.message_attempt.get("acme", m1.id, by_msg.data[0].id)
    check("an attempt is read by its id", one.id == by_msg.data[0].id and one.msg_id == m1.id)
    dests = admin.message_attempt.list_attempted_destinations("acme", m1.id)
    check("a message's endpoints with its status at each",
          {d.id for d in dests.data} == {ep_type.id, ep_channel.id, ep_all.id} and all(d.status == 0 for d in dests.data), dests)
    sent = admin.message_attempt.list_attempted_messages("acme", ep_type.id)
    check("an endpoint's messages with their status", [m.id for m in sent.data] == [m1.id], sent)

    # Resend.
    admin.message_attempt.resend("acme", m1.id, ep_type.id)
    by_type.wait_for(2)
    check("resend sends the message again with the same svix-id", by_type.ids() == [m1.id, m1.id], by_type.ids())
    manual = eventually(lambda: admin.message_attempt.list_by_endpoint("acme", ep_type.id), lambda page: len(page.data) == 2)
    check("the resent attempt is manual", manual.data[0].trigger_type == 1, manual.data[0])

    # Recover.
    before = len(everything.requests)
    admin.endpoint.recover("acme", ep_all.id, RecoverIn(since=started))
    # The six messages of acme so far (the refused one was never stored).
    everything.wait_for(before + 6)
    settle()
    check("recover re-sends the endpoint's messages since then", len(everything.requests) == before + 6, len(everything.requests))

    # Secret rotation.
    old_secret = secrets[ep_type.id]
    rotated = admin.endpoint.rotate_secret("acme", ep_type.id, EndpointSecretRotateIn())
    check("rotation answers a new secret", rotated.key.startswith("whsec_") and rotated.key != old_secret)
    check("the endpoint's secret is the new one", admin.endpoint.get_secret("acme", ep_type.id).key == rotated.key)
    m4 = admin.message.create("acme", MessageIn(event_type="user.signup", payload={"email": "b@acme.test"}))
    by_type.wait_for(3)
    headers, body = by_type.requests[-1]
    check("after rotation the new secret verifies", verifies(rotated.key, headers, body), headers)
    check("and the old one still does during the grace period", verifies(old_secret, headers, body), headers)
    given = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    chosen = admin.endpoint.rotate_secret("acme", ep_type.id, EndpointSecretRotateIn(key=given))
    check("rotation to a given secret", chosen.key == given)

    # Endpoint headers.
    admin.endpoint.set_headers("acme", ep_all.id, EndpointHeadersIn(headers={"X-Team": "ops", "Authorization": "Bearer t0ken"}))
    shown = admin.endpoint.get_headers("acme", ep_all.id)
    check("headers are shown, credentials only by name",
          shown.headers == {"X-Team": "ops"} and shown.sensitive == ["Authorization"], shown)
    admin.endpoint.patch_headers("acme", ep_all.id, EndpointHeadersPatchIn(headers={"X-Extra": "1"}, delete_headers=["X-Team"]))
    count = len(everything.requests)
    m5 = admin.message.create("acme", MessageIn(event_type="invoice.paid", payload={"n": 5}))
    everything.wait_for(count + 1)
    headers = everything.requests[-1][0]
    check("a delivery carries the endpoint's headers",
          headers.get("x-extra") == "1" and "x-team" not in headers and headers.get("authorization") == "Bearer t0ken", headers)

    # Stats, send-example, patch, upsert, disable.
    # Six messages, their six recovered copies, m4 and m5.
    stats = eventually(lambda: admin.endpoint.get_stats("acme", ep_all.id), lambda st: st.success >= 14)
    check("stats count the endpoint's deliveries", stats.success == 14 and stats.fail == 0, stats)
    example = admin.endpoint.send_example("acme", ep_channel.id, EventExampleIn(event_type="user.signup"))
    by_channel.wait_for(2)
    check("send-example sends the schema's example to that endpoint only",
          by_channel.ids()[-1] == example.id and json.loads(by_channel.requests[-1][1]) == {"email": "example@acme.test"})
    changed = admin.endpoint.patch("acme", ep_channel.id, EndpointPatch(channels=["eu", "us"], description="EU and US"))
    check("patch changes an endpoint's channels", changed.channels == ["eu", "us"] and changed.description == "EU and US", changed)
    replaced = admin.endpoint.upsert("acme", ep_channel.id, EndpointUpsertIn(url=by_channel.url))
    check("upsert replaces every field", replaced.channels is None and replaced.description == "", replaced)
    admin.endpoint.patch("acme", ep_type.id, EndpointPatch(disabled=True))
    check("a disabled endpoint shows so", admin.endpoint.get("acme", ep_type.id).disabled is True)
    got = len(by_type.requests)
    admin.message.create("acme", MessageIn(event_type="user.signup", payload={"email": "c@acme.test"}))
    everything.wait_for(count + 2)
    settle()
    check("a disabled endpoint gets no messages", len(by_type.requests) == got, by_type.ids())
    admin.endpoint.patch("acme", ep_type.id, EndpointPatch(disabled=False))
    check("and is enabled again", admin.endpoint.get("acme", ep_type.id).disabled is False)

    # A tenant's key sees its own application only.
    acme_sdk = sdk(ACME_KEY)
    mine = acme_sdk.application.list()
    check("a tenant key lists only its application", [a.id for a in mine.data] == [acme.id], mine)
    expect_error("a tenant key gets 404 for another application", 404, lambda: acme_sdk.application.get(globex.id))
    expect_error("nor its endpoints", 404, lambda: acme_sdk.endpoint.list(globex.id))
    expect_error("nor may it send into it", 404,
                 lambda: acme_sdk.message.create(globex.id, MessageIn(event_type="invoice.paid", payload={})))
    expect_error("nor read another's endpoint secret through its own application", 404,
                 lambda: acme_sdk.endpoint.get_secret("acme", ep_other.id))
    expect_error("a tenant key cannot create applications", 403,
                 lambda: acme_sdk.application.create(ApplicationIn(name="Mine")))
    own = acme_sdk.message.create("acme", MessageIn(event_type="invoice.paid", payload={"n": 6}))
    check("a tenant key sends into its own application", own.id.startswith("msg_"))
    check("and lists its endpoints", len(acme_sdk.endpoint.list("acme").data) == 3)

    # App portal access: a console link signed in as the application.
    portal = admin.authentication.app_portal_access("acme", AppPortalAccessIn())
    check("app portal access answers a console link and token",
          "/console/#token=" in portal.url and portal.url.endswith(portal.token), portal)
    request = urllib.request.Request(f"{URL}/v1/me", headers={"Authorization": f"Bearer {portal.token}"})
    me = json.load(urllib.request.urlopen(request))
    check("the token is the application's tenant", me.get("admin") is False and me.get("tenant") == "acme", me)
    expect_error("a tenant key cannot make portal links", 403,
                 lambda: acme_sdk.authentication.app_portal_access("acme", AppPortalAccessIn()))

    # Expunging a message's content.
    admin.message.expunge_content("acme", m5.id)
    expunged = admin.message.get("acme", m5.id, MessageGetOptions(with_content=True))
    check("an expunged message shows its payload as expired, as Svix does",
          expunged.payload == {"expired": True}, expunged)

    # What hookgate does not offer answers 501.
    expect_error("Svix cloud's usage statistics answer 501", 501, lambda: admin.statistics.aggregate_event_types())

    # Deletion.
    admin.endpoint.delete("acme", ep_channel.id)
    expect_error("a deleted endpoint is gone", 404, lambda: admin.endpoint.get("acme", ep_channel.id))
    admin.event_type.delete("user.deleted")
    check("a deleted event type is archived", admin.event_type.get("user.deleted").archived is True)
    admin.application.delete("initech")
    expect_error("a deleted application is gone", 404, lambda: admin.application.get("initech"))

    if RESULTS:
        with open(RESULTS, "w") as f:
            json.dump({"portal_url": portal.url, "own_endpoint": ep_all.id, "other_endpoint": ep_other.id}, f)

    print("SDK calls made (call: answer):")
    for label in sorted(set(c for c, _ in calls)):
        answers = sorted(set(a for c, a in calls if c == label))
        print(f"  {label}: {', '.join(answers)}")
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
