//! The web console in a real headless Chromium (WebDriver through chromedriver): the flows an
//! operator and a tenant's customer go through. Skipped, saying so, without a browser; CI
//! installs one and makes its absence a failure. With `HOOKGATE_CONSOLE_SCREENSHOTS=DIR` the
//! tests save the screenshots the README shows.

use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, START, Sink, TestGateway, WAIT, wait_state};
use crate::webdriver::Browser;

const ADMIN: &str = "admin-key-0123456789";

async fn browser() -> Option<Browser> {
    Browser::start(1280, 860).await
}

/// Signs in on the sign-in page with `key`.
async fn sign_in(browser: &Browser, gw: &TestGateway, key: &str) {
    browser.goto(&format!("{}/console/", gw.base)).await;
    browser.fill("#credential", key).await;
    browser.click("button[type=submit]").await;
}

/// Sets a `datetime-local` field to an RFC 3339 time, in the browser's zone.
async fn set_time(browser: &Browser, css: &str, rfc3339: &str) {
    browser.find(css).await;
    browser
        .execute(
            "const d = new Date(arguments[1]); const e = document.querySelector(arguments[0]); \
             e.value = new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16); \
             e.dispatchEvent(new Event('change', {bubbles: true}));",
            json!([css, rfc3339]),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_creates_an_endpoint_and_redelivers_a_failed_delivery() {
    let Some(browser) = browser().await else { return };
    let sink = Sink::start().await;
    let ledger = Sink::start().await;
    // The wall clock's time, so that the screenshots read "2 min ago".
    let now = hookgate::model::Timestamp::from_system_time(std::time::SystemTime::now());
    let gw = TestGateway::start_in(
        std::sync::Arc::new(tempfile::tempdir().unwrap()),
        &format!(
            "server:\n  api_keys: [{ADMIN}]\npolicies:\n  once:\n    schedule: [0s]\ntopics:\n  orders: {{}}\n  ledger: {{}}\n\
             endpoints:\n  ledger:\n    url: {}\n    topics: [ledger]\n    policy: once\n",
            ledger.url("/ledger")
        ),
        hookgate::clock::ManualClock::new(now),
    )
    .await;

    // A wrong key is refused with the API's reason; the right one opens the overview.
    sign_in(&browser, &gw, "wrong-key").await;
    browser.wait_for_text("the API key is not valid").await;
    browser.screenshot("signin").await;
    // With the keyboard alone: type the key, press Enter.
    browser.fill("#credential", ADMIN).await;
    browser.find("#credential").await.send_keys("\u{E007}").await;
    browser.wait_for_text("delivered in the last hour").await;
    assert!(browser.page_text().await.contains("Admin"));

    // Create an endpoint: the secret is shown once.
    browser.click("a[href='#/endpoints']").await;
    browser.click("#new-endpoint").await;
    browser.fill("#f-name", "shop").await;
    browser.fill("#f-url", &sink.url("/shop")).await;
    browser.fill("#f-description", "the shop's order feed").await;
    browser.click("input[name=topic][value=orders]").await;
    browser.click("#save-endpoint").await;
    browser.wait_for_text("Created shop").await;
    let secret = browser.find("[data-secret]").await.text().await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    browser.click("#to-endpoint").await;
    browser.wait_for_text("the shop's order feed").await;
    browser.click("#test").await;
    browser.wait_for_text("Delivered: 200").await;
    assert_eq!(sink.count(), 1);
    // Edit: the change shows on the endpoint's page.
    browser.click("#edit").await;
    browser.fill("#f-description", "orders for the shop").await;
    browser.click("#save-endpoint").await;
    browser.wait_for_text("orders for the shop").await;

    // A failing receiver: the delivery shows its attempt and the error.
    sink.always(Reply::status(500).with_body("database is down"));
    let (status, _) = gw
        .post(
            "/v1/topics/orders/events",
            json!({"type": "order.created", "payload": {"id": 42}}),
        )
        .await;
    assert_eq!(status, 202);
    sink.wait_for(2, WAIT).await;
    gw.settle().await;
    browser.goto(&format!("{}/console/#/deliveries", gw.base)).await;
    browser.wait_for_text("order.created").await;
    browser.screenshot("deliveries").await;
    browser.click("table a[href^='#/deliveries/dlv_']").await;
    // The list shows the error too: wait for the delivery's own page.
    browser.wait_for_text("Round 1, attempt 1").await;
    browser.wait_for_text("database is down").await;
    assert!(browser.page_text().await.contains("500"));
    // The body sent: the event's payload, with its content type.
    let body = browser.find("#body-sent").await.text().await;
    assert!(
        body.contains("application/json") && body.contains("\"id\": 42"),
        "{body}"
    );
    browser.screenshot("delivery-failed").await;

    // Fixed: redeliver from the console, and see it succeed — also when the receiver takes its
    // time, so that the outcome is stored well after the redeliver was answered.
    sink.always(Reply::status(200).delayed(Duration::from_millis(1500)));
    browser.click("#redeliver").await;
    sink.wait_for(3, WAIT).await;
    browser.wait_for_text("Round 2, attempt 1").await;
    browser.screenshot("delivery").await;

    // Some traffic for the overview: an hour of a ledger feed, a few of its deliveries failing.
    for minute in 0..30u64 {
        ledger.script(
            (0..minute % 4 + 1).map(|i| Reply::status(if (minute + i) % 9 == 0 { 503 } else { 200 })),
        );
        for _ in 0..minute % 4 + 1 {
            gw.ingest("ledger", "entry.posted", json!({"minute": minute}))
                .await;
        }
        gw.settle().await;
        gw.advance(Duration::from_secs(120)).await;
    }
    // The overview counts it; the endpoints list shows the endpoint as active.
    gw.settle().await;
    browser.goto(&format!("{}/console/#/overview", gw.base)).await;
    browser.wait_for_text("Last day").await;
    browser.screenshot("overview").await;
    // The cards count failed attempts apart from the deliveries that ended failed, as
    // `GET /v1/stats` does (`overview::failed_attempts_stay_counted_…` has them differ).
    let (_, hour) = gw.get("/v1/stats").await;
    let sum = |key: &str| -> u64 {
        hour["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b[key].as_u64().unwrap())
            .sum()
    };
    assert!(sum("failed_attempts") > 0, "{hour}");
    let card = |label: &str| {
        let script = "return [...document.querySelectorAll('.stat')]
            .find((s) => s.querySelector('.label').textContent === arguments[0])
            .querySelector('.value').textContent;";
        let label = label.to_owned();
        let browser = &browser;
        async move { browser.execute(script, json!([label])).await }
    };
    assert_eq!(
        card("failed attempts in the last hour").await,
        json!(sum("failed_attempts").to_string())
    );
    assert_eq!(
        card("deliveries ended failed in the last hour").await,
        json!(sum("failed").to_string())
    );
    browser.goto(&format!("{}/console/#/endpoints", gw.base)).await;
    browser.wait_for_text("shop").await;
    browser.screenshot("endpoints").await;
    browser.goto(&format!("{}/console/#/policies", gw.base)).await;
    browser.find(".svg-chart svg").await;
    browser.screenshot("policies").await;

    browser.goto(&format!("{}/console/#/plugins", gw.base)).await;
    browser.wait_for_text("Files that failed to load").await;

    // At a phone's width the same page still reads.
    browser.set_window(390, 844).await;
    browser
        .goto(&format!("{}/console/#/endpoints/shop", gw.base))
        .await;
    browser.wait_for_text("Health history").await;
    browser.screenshot("endpoint-phone").await;

    // Delete, after confirming: gone from the list.
    browser.click("#delete").await;
    browser.accept_dialog().await;
    browser.wait_for_text("1 endpoint").await;
    assert!(!browser.page_text().await.contains("shop"));
    let (status, _) = gw.get("/v1/endpoints/shop").await;
    assert_eq!(status, 404);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_endpoint_is_reenabled_with_replay_and_a_window_replayed_after_its_count() {
    let Some(browser) = browser().await else { return };
    let sink = Sink::start().await;
    sink.always(Reply::status(500));
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [{ADMIN}]\nhealth:\n  degrade_after_failures: 1\n  pause_after: 1h\n  pause_min_failures: 1\n\
         policies:\n  once:\n    schedule: [0s]\ntopics:\n  t: {{}}\nendpoints:\n  billing:\n    url: {}\n    topics: [t]\n    policy: once\n",
        sink.url("/billing")
    ))
    .await;
    gw.ingest("t", "invoice.created", json!({"n": 1})).await;
    sink.wait_for(1, WAIT).await;
    wait_state(&gw, "billing", "degraded").await;
    gw.advance(Duration::from_secs(3600)).await;
    wait_state(&gw, "billing", "paused").await;
    // Missed while paused: not even queued.
    gw.ingest("t", "invoice.created", json!({"n": 2})).await;
    gw.ingest("t", "invoice.created", json!({"n": 3})).await;
    sink.always(Reply::status(200));

    sign_in(&browser, &gw, ADMIN).await;
    browser.wait_for_text("delivered in the last hour").await;
    browser
        .goto(&format!("{}/console/#/endpoints/billing", gw.base))
        .await;
    browser.wait_for_text("Re-enable").await;
    browser.screenshot("endpoint-paused").await;
    set_time(
        &browser,
        "#replay-since",
        &START.plus(Duration::from_secs(60)).to_rfc3339(),
    )
    .await;
    browser.click("#reenable").await;
    browser.wait_for_text("2 missed events queued").await;
    browser.find("h1 .badge.active").await;
    let received = sink.wait_for(3, WAIT).await;
    let mut missed: Vec<i64> = received[1..]
        .iter()
        .map(|r| r.json()["n"].as_i64().unwrap())
        .collect();
    missed.sort();
    assert_eq!(missed, [2, 3]);

    // Replay a window: the count comes first, and only the confirmation sends.
    gw.settle().await;
    browser.wait_for_text("Replay a window").await;
    set_time(&browser, "#window-since", &START.to_rfc3339()).await;
    browser.click("#replay-count-button").await;
    browser.wait_for_text("3 events in this window").await;
    assert_eq!(sink.count(), 3, "counting sends nothing");
    browser.screenshot("replay").await;
    browser.click("#replay-send").await;
    browser.wait_for_text("3 events queued again").await;
    sink.wait_for(6, WAIT).await;
    browser.close().await;
}

/// A gateway without API keys opens the console at once, and there is nothing to sign out of:
/// no "Sign out" (it led to a sign-in page that had no key to ask for); the sign-in page says
/// so and leads to the overview; a console link's token still opens a tenant's view, and
/// signing out of it returns to the admin's overview.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_without_api_keys_has_nothing_to_sign_out_of() {
    let Some(browser) = browser().await else { return };
    let gw = TestGateway::start("topics:\n  t: {}\n").await;
    let (_, me) = gw.get("/v1/me").await;
    assert_eq!(me, json!({"admin": true, "tenant": null, "open": true}));

    browser.goto(&format!("{}/console/", gw.base)).await;
    browser.wait_for_text("delivered in the last hour").await;
    assert!(browser.page_text().await.contains("no API keys"));
    assert!(!browser.has("#sign-out").await, "nothing to sign out of");
    browser.goto(&format!("{}/console/#/signin", gw.base)).await;
    browser.wait_for_text("the console needs no sign-in").await;
    browser.assert_readable().await;
    browser.click("#to-overview").await;
    browser.wait_for_text("delivered in the last hour").await;

    let (status, link) = gw.post("/v1/tenants/acme/console-token", json!({})).await;
    assert_eq!(status, 200, "{link}");
    let token = link["token"].as_str().unwrap();
    browser.goto("about:blank").await;
    browser.goto(&format!("{}/console/#token={token}", gw.base)).await;
    browser.wait_for_text("Tenant acme").await;
    browser.click("#sign-out").await;
    browser.wait_for_text("Admin").await;
    browser.wait_for_text("delivered in the last hour").await;
    let page = browser.page_text().await;
    assert!(
        !page.contains("Sign in") && !page.contains("Tenant acme"),
        "{page}"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_link_shows_one_tenant_and_is_refused_once_expired() {
    let Some(browser) = browser().await else { return };
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [{ADMIN}]\ntopics:\n  t: {{}}\nendpoints:\n  acme-hooks:\n    url: {}\n    topics: [t]\n    tenant: acme\n\
         \x20 globex-hooks:\n    url: {}\n    topics: [t]\n    tenant: globex\n",
        sink.url("/acme"),
        sink.url("/globex")
    ))
    .await;
    for tenant in ["acme", "globex"] {
        let (status, _) = gw
            .post(
                "/v1/topics/t/events",
                json!({"type": "x", "payload": {}, "tenant": tenant}),
            )
            .await;
        assert_eq!(status, 202);
    }
    sink.wait_for(2, WAIT).await;
    gw.settle().await;
    let (status, link) = gw
        .post("/v1/tenants/acme/console-token", json!({"ttl": "1h"}))
        .await;
    assert_eq!(status, 200, "{link}");
    let token = link["token"].as_str().unwrap();

    browser.goto(&format!("{}/console/#token={token}", gw.base)).await;
    browser.wait_for_text("Tenant acme").await;
    let url: String = browser
        .execute("return location.href", json!([]))
        .await
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!url.contains("hgc_"), "the token leaves the address bar: {url}");
    browser.goto(&format!("{}/console/#/endpoints", gw.base)).await;
    browser.wait_for_text("acme-hooks").await;
    browser.screenshot("tenant-endpoints").await;
    let page = browser.page_text().await;
    assert!(!page.contains("globex"), "{page}");
    assert!(
        !browser.has("a[href='#/plugins']").await,
        "no admin sections for a tenant"
    );
    browser.goto(&format!("{}/console/#/deliveries", gw.base)).await;
    browser.wait_for_text("acme-hooks").await;
    assert!(!browser.page_text().await.contains("globex"));
    browser
        .goto(&format!("{}/console/#/endpoints/globex-hooks", gw.base))
        .await;
    browser.wait_for_text("endpoint_not_found").await;

    // An hour later the open console signs out, and the link no longer opens anything.
    gw.advance(Duration::from_secs(3600)).await;
    browser.goto(&format!("{}/console/#/endpoints", gw.base)).await;
    browser.wait_for_text("This console link has expired").await;
    assert!(!browser.page_text().await.contains("acme-hooks"));
    browser.goto("about:blank").await;
    browser.goto(&format!("{}/console/#token={token}", gw.base)).await;
    browser.wait_for_text("This console link has expired").await;
    browser.screenshot("expired").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_type_catalog_is_read_by_tenants_and_kept_by_admins() {
    let Some(browser) = browser().await else { return };
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [{ADMIN}, {{key: acme-key-0123456789, tenant: acme}}]\n"
    ))
    .await;
    let (status, _) = gw
        .call_as(
            Some(ADMIN),
            reqwest::Method::POST,
            "/v1/event-types",
            Some(json!({"name": "invoice.paid", "description": "An invoice was paid"})),
        )
        .await;
    assert_eq!(status, 201);

    sign_in(&browser, &gw, ADMIN).await;
    browser.wait_for_text("delivered in the last hour").await;
    browser.click("a[href='#/event-types']").await;
    browser.wait_for_text("An invoice was paid").await;
    // Add a type with a schema: the page shows it, and the API then refuses a bad payload.
    browser.fill("#et-name", "user.signup").await;
    browser.fill("#et-description", "A user signed up").await;
    browser
        .fill("#et-schema", r#"{"type": "object", "required": ["email"]}"#)
        .await;
    browser.click("#create-event-type").await;
    browser.wait_for_text("A user signed up").await;
    browser
        .click("tr:has([data-event-type='user.signup']) summary")
        .await;
    browser.wait_for_text("\"required\"").await;
    let page = browser.page_text().await;
    assert!(page.contains("version 1"), "{page}");
    for bad in ["undefined", "[object Object]", "NaN"] {
        assert!(!page.contains(bad), "the page shows {bad}: {page}");
    }
    browser.screenshot("event-types").await;
    let (status, refused) = gw
        .post(
            "/v1/topics/svix/events",
            json!({"type": "user.signup", "payload": {"name": "no email"}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    // Archive: hidden from the list until asked for.
    browser.click("[data-archive='invoice.paid']").await;
    browser.wait_for_text("Show archived").await;
    wait_gone(&browser, "An invoice was paid").await;
    browser.click("#toggle-archived").await;
    browser.wait_for_text("An invoice was paid").await;
    assert!(browser.page_text().await.contains("archived"));

    // A tenant reads the catalog and cannot change it.
    browser.click("button[type=button]").await;
    sign_in(&browser, &gw, "acme-key-0123456789").await;
    browser.wait_for_text("Tenant acme").await;
    browser.goto(&format!("{}/console/#/event-types", gw.base)).await;
    browser.wait_for_text("A user signed up").await;
    assert!(!browser.has("#create-event-type").await);
    assert!(!browser.has("[data-archive]").await);
    browser.close().await;
}

/// Waits until `text` is no longer on the page.
async fn wait_gone(browser: &Browser, text: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while browser.page_text().await.contains(text) {
        assert!(std::time::Instant::now() < deadline, "`{text}` stays on the page");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_endpoint_shows_where_its_events_went_and_what_the_broker_answered() {
    use crate::destinations::Fixture as _;
    let Some(stream) = crate::destinations::redis::RedisFixture::new().await else {
        return;
    };
    let Some(browser) = browser().await else { return };
    let url = stream.url(stream.broker_addr());
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [{ADMIN}]\ntopics:\n  orders: {{}}\nendpoints:\n  stream:\n    url: '{url}'\n    topics: [orders]\n"
    ))
    .await;
    gw.ingest("orders", "order.created", json!({"id": 7})).await;
    crate::destinations::common::wait_received(&stream, 1).await;
    gw.settle().await;

    sign_in(&browser, &gw, ADMIN).await;
    browser.wait_for_text("delivered in the last hour").await;
    browser.goto(&format!("{}/console/#/endpoints", gw.base)).await;
    browser.wait_for_text("redis").await;
    browser
        .goto(&format!("{}/console/#/endpoints/stream", gw.base))
        .await;
    browser.wait_for_text("redis: stream ").await;
    browser.click("#test").await;
    browser.wait_for_text("XADD: entry").await;
    assert!(browser.page_text().await.contains("Delivered to stream "));

    browser.goto(&format!("{}/console/#/deliveries", gw.base)).await;
    browser.click("table a[href^='#/deliveries/dlv_']").await;
    browser.wait_for_text("accepted").await;
    let text = browser.page_text().await;
    assert!(text.contains("XADD: entry"), "{text}");
    for broken in ["undefined", "[object Object]", "NaN"] {
        assert!(!text.contains(broken), "{broken} on the page: {text}");
    }
    browser.close().await;
    stream.cleanup().await;
}

/// What a newcomer read wrong: large counts without digit grouping, "the topic's" policy on
/// an endpoint whose two topics have different ones, and a refused reload seen only on the
/// Plugins page. Every page visited is read for leaked values (see `webdriver`), the delivery
/// log of deliveries without an error included (it read `[object Object]`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_policies_and_a_refused_reload_read_right() {
    let Some(browser) = browser().await else { return };
    let sink = Sink::start().await;
    let yaml = format!(
        "server:\n  api_keys: [{ADMIN}]\npolicies:\n  fast:\n    schedule: [0s, 5s]\n\
         topics:\n  orders: {{ policy: fast }}\n  users: {{}}\n\
         endpoints:\n  shop:\n    url: {}\n    topics: [orders, users]\n",
        sink.url("/shop")
    );
    let gw = TestGateway::start(&yaml).await;
    for batch in 0..2 {
        let events: Vec<_> = (0..600)
            .map(|i| json!({"type": "order.created", "payload": {"n": batch * 600 + i}}))
            .collect();
        let (status, answer) = gw
            .post("/v1/topics/orders/events/batch", json!({"events": events}))
            .await;
        assert_eq!(status, 202, "{answer}");
    }
    sink.wait_for(1200, WAIT).await;
    gw.settle().await;

    sign_in(&browser, &gw, ADMIN).await;
    browser.wait_for_text("delivered in the last hour").await;
    let page = browser.page_text().await;
    assert!(page.contains("1,200"), "grouped digits:\n{page}");
    assert!(!page.contains("not what runs"), "{page}");

    browser.goto(&format!("{}/console/#/deliveries", gw.base)).await;
    browser.wait_for_text("order.created").await;
    assert!(browser.has("th.optional").await, "the Last error column is shown");

    browser
        .goto(&format!("{}/console/#/endpoints/shop", gw.base))
        .await;
    browser
        .wait_for_text("orders: fast, users: standard (the topics’)")
        .await;

    // A reload refused: the Overview says that the file is not what runs, and why.
    gw.write_config(&format!("{yaml}    colour: blue\n"));
    assert!(matches!(
        gw.reloader().reload_from_file().await,
        hookgate::ReloadOutcome::Refused { .. }
    ));
    browser.goto(&format!("{}/console/#/overview", gw.base)).await;
    browser
        .wait_for_text("The config file on disk is not what runs.")
        .await;
    browser
        .wait_for_text("endpoints.shop.colour: unknown field")
        .await;
    browser.screenshot("overview-reload-refused").await;
    gw.write_config(&yaml);
    assert!(matches!(
        gw.reloader().reload_from_file().await,
        hookgate::ReloadOutcome::Applied { .. }
    ));
    browser.goto(&format!("{}/console/#/endpoints", gw.base)).await;
    browser.wait_for_text("1 endpoint").await;
    browser.goto(&format!("{}/console/#/overview", gw.base)).await;
    browser.wait_for_text("delivered in the last hour").await;
    assert!(!browser.page_text().await.contains("not what runs"));
    browser.close().await;
}

/// An ordered endpoint's Ordering tab: the blocked key first with its head's error and the
/// receiver's answer, a skip from its button, and the overview's count of blocked keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ordering_tab_shows_a_blocked_key_and_skips_its_head() {
    let Some(browser) = browser().await else { return };
    let sink = Sink::start().await;
    sink.rule(|body| {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        (v["n"] == 1).then(|| Reply::status(503).with_body("ledger locked"))
    });
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [{ADMIN}]\npolicies:\n  slow:\n    schedule: [0s, 1h]\ntopics:\n  t: {{}}\n\
         endpoints:\n  ledger:\n    url: {}\n    topics: [t]\n    policy: slow\n    ordered: true\n    dead_letter: true\n",
        sink.url("/ledger")
    ))
    .await;
    for n in 1..=3 {
        let body = json!({"type": "entry", "payload": {"n": n}, "ordering_key": "acct-42"});
        let (status, answer) = gw.post("/v1/topics/t/events", body).await;
        assert_eq!(status, 202, "{answer}");
    }
    sink.wait_for(1, WAIT).await;
    gw.settle().await;

    sign_in(&browser, &gw, ADMIN).await;
    browser.wait_for_text("ordering keys blocked").await;
    browser
        .goto(&format!("{}/console/#/endpoints/ledger", gw.base))
        .await;
    browser.click("#ordering-tab").await;
    browser.wait_for_text("Blocked and held keys (1)").await;
    browser.wait_for_text("acct-42").await;
    browser.wait_for_text("ledger locked").await;
    browser.assert_readable().await;
    browser.screenshot("ordering").await;
    browser.click("button[data-action=skip]").await;
    browser.wait_for_text("skip done on").await;
    browser.wait_for_text("No key is blocked").await;
    sink.wait_for(3, WAIT).await;
    let sent: Vec<i64> = sink
        .received()
        .iter()
        .map(|r| r.json()["n"].as_i64().unwrap())
        .collect();
    assert_eq!(sent, [1, 2, 3]);
    browser.close().await;
}

/// The content filter on the endpoint page: as it is edited, the count of the endpoint's
/// recent events it would let through follows; a mistake shows with its path; saving it
/// changes the endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_being_edited_counts_the_recent_events_it_lets_through_and_is_saved() {
    let Some(browser) = browser().await else { return };
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [{ADMIN}]\ntopics:\n  orders: {{}}\n"
    ))
    .await;
    let (status, created) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "shop", "url": sink.url("/shop"), "topics": ["orders"],
                   "filter": {"payload.amount": {"$gte": 100}}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    for amount in [10, 50, 150, 500] {
        gw.ingest("orders", "order.created", json!({"amount": amount}))
            .await;
    }
    sign_in(&browser, &gw, ADMIN).await;
    browser.wait_for_text("delivered in the last hour").await;
    browser
        .goto(&format!("{}/console/#/endpoints/shop", gw.base))
        .await;
    browser
        .wait_for_text("Lets through 2 of the endpoint’s last 4 events.")
        .await;

    browser
        .fill("#filter", r#"{"payload.amount": {"$gte": 40}}"#)
        .await;
    browser.wait_for_text("Lets through 3 of").await;
    browser
        .fill("#filter", r#"{"payload.amount": {"$gte": []}}"#)
        .await;
    browser.wait_for_text("filter.payload.amount.$gte").await;
    browser
        .fill("#filter", r#"{"payload.amount": {"$lte": 10}}"#)
        .await;
    browser.wait_for_text("Lets through 1 of").await;
    browser.screenshot("endpoint-filter").await;
    browser.click("#save-filter").await;
    browser.wait_for_text("Content filter saved.").await;
    let (_, ep) = gw.get("/v1/endpoints/shop").await;
    assert_eq!(ep["filter"], json!({"payload.amount": {"$lte": 10}}));
    browser.close().await;
}
