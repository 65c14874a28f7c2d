// Svix's official JavaScript SDK (the `svix` npm package, pinned in scripts/install-svix.sh)
// against a running hookgate: a smaller smoke than sdk_suite.py, with only `serverUrl` changed.
// Run by gateway/tests/it/svix_sdk.rs with HOOKGATE_URL and HOOKGATE_ADMIN_KEY set and
// NODE_PATH-free resolution from target/svix/node (the test runs node there).
// Prints one line per check, the SDK calls made, and a closing line `N passed, N failed`.
import http from "node:http";
import { ApiException, Svix, Webhook } from "svix";

const url = process.env.HOOKGATE_URL;
const admin = process.env.HOOKGATE_ADMIN_KEY;
const results = [];
const calls = [];

function check(name, ok, detail = "") {
  results.push(Boolean(ok));
  console.log(`${ok ? "PASS" : "FAIL"} ${name}${ok ? "" : `: ${JSON.stringify(detail)}`}`);
}

async function call(label, fn) {
  try {
    const value = await fn();
    calls.push(`${label}: ok`);
    return value;
  } catch (e) {
    calls.push(`${label}: ${e instanceof ApiException ? e.code : e}`);
    throw e;
  }
}

const received = [];
const receiver = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    received.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
    res.writeHead(200, { "content-length": "0" });
    res.end();
  });
});
await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
const hook = `http://127.0.0.1:${receiver.address().port}/hook`;

async function waitFor(n) {
  const deadline = Date.now() + 20000;
  while (received.length < n && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
  }
}

try {
  const svix = new Svix(admin, { serverUrl: url });
  // Svix refuses an endpoint filtering on an event type that is not in the catalog.
  await call("eventType.create", () => svix.eventType.create({ name: "order.created", description: "An order" }));
  const app = await call("application.create", () => svix.application.create({ name: "Node shop", uid: "node-shop" }));
  check("an application is created", app.id.startsWith("app_") && app.uid === "node-shop", app);
  const ep = await call("endpoint.create", () =>
    svix.endpoint.create("node-shop", { url: hook, eventTypes: ["order.created"], channels: ["eu"] }),
  );
  check("an endpoint keeps its filters", ep.channels?.[0] === "eu" && ep.eventTypes?.[0] === "order.created", ep);
  const secret = await call("endpoint.getSecret", () => svix.endpoint.getSecret("node-shop", ep.id));
  const msg = await call("message.create", () =>
    svix.message.create("node-shop", { eventType: "order.created", payload: { id: 7 }, channels: ["eu"], eventId: "order-7" }),
  );
  check("a message is accepted", msg.id.startsWith("msg_"), msg);
  await call("message.create (no channel)", () =>
    svix.message.create("node-shop", { eventType: "order.created", payload: { id: 8 } }),
  );
  await call("message.create (another type)", () =>
    svix.message.create("node-shop", { eventType: "order.deleted", payload: { id: 9 }, channels: ["eu"] }),
  );
  await waitFor(1);
  await new Promise((r) => setTimeout(r, 300));
  check("only the message of the endpoint's type and channel arrives", received.length === 1, received.length);
  const { headers, body } = received[0];
  let verified = true;
  try {
    new Webhook(secret.key).verify(body, {
      "svix-id": headers["svix-id"],
      "svix-timestamp": headers["svix-timestamp"],
      "svix-signature": headers["svix-signature"],
    });
  } catch (e) {
    verified = false;
  }
  check("svix's Webhook verifies the delivery", verified, headers);
  try {
    await call("message.create (same eventId)", () =>
      svix.message.create("node-shop", { eventType: "order.created", payload: { id: 7 }, eventId: "order-7" }),
    );
    check("a repeated eventId is refused", false);
  } catch (e) {
    check("a repeated eventId is a 409", e instanceof ApiException && e.code === 409, String(e));
  }
  let attempts = { data: [] };
  const deadline = Date.now() + 20000;
  while (attempts.data.length < 1 && Date.now() < deadline) {
    attempts = await call("messageAttempt.listByMsg", () => svix.messageAttempt.listByMsg("node-shop", msg.id));
  }
  check("the attempt is listed as a success", attempts.data[0]?.status === 0, attempts);
  // Three messages were sent: page through them one at a time.
  let page = await call("message.list", () => svix.message.list("node-shop", { limit: 1 }));
  const seen = page.data.map((m) => m.id);
  while (!page.done && seen.length < 10) {
    const iterator = page.iterator;
    page = await call("message.list (iterator)", () => svix.message.list("node-shop", { limit: 1, iterator }));
    seen.push(...page.data.map((m) => m.id));
  }
  check("messages page with the iterator, newest first", seen.length === 3 && new Set(seen).size === 3 && seen[2] === msg.id, seen);
  try {
    await call("application.get (missing)", () => svix.application.get("no-such-app"));
    check("a missing application is refused", false);
  } catch (e) {
    check("a missing application is a 404", e instanceof ApiException && e.code === 404, String(e));
  }
} catch (e) {
  check("the smoke ran to its end", false, String(e?.stack ?? e));
} finally {
  receiver.close();
}
console.log("SDK calls made (call: answer):");
for (const c of [...new Set(calls)].sort()) console.log(`  ${c}`);
const passed = results.filter(Boolean).length;
console.log(`${passed} passed, ${results.length - passed} failed`);
process.exit(passed === results.length ? 0 : 1);
