use super::validate::parse_size;
use super::*;

fn load(text: &str) -> Result<Config, ConfigError> {
    load_str(text, "test.yaml", None, |name| match name {
        "BILLING_SECRET" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
        _ => None,
    })
}

/// Fails unless one of `problems` starts with `start` (`file:line: path: reason`), showing
/// them all.
#[track_caller]
fn assert_problem(problems: &[String], start: &str) {
    assert!(
        problems.iter().any(|l| l.starts_with(start)),
        "no problem starts with {start:?}: {problems:#?}"
    );
}

/// Fails unless `text` has exactly one problem, starting with `start`.
#[track_caller]
fn assert_only_problem(text: &str, start: &str) {
    let p = problems(text);
    assert!(p.len() == 1 && p[0].starts_with(start), "{p:#?}");
}

fn problems(text: &str) -> Vec<String> {
    load(text)
        .unwrap_err()
        .problems
        .iter()
        .map(ToString::to_string)
        .collect()
}

const FULL: &str = r#"
server:
  listen: 127.0.0.1:9090
  api_keys: ["k1"]
  max_body: 512KiB
storage:
  path: /tmp/x.db
delivery:
  timeout: 5s
  allow_networks: [127.0.0.0/8, "::1"]
policies:
  fast:
    schedule: [0s, 1s, 5s]
    deadline: 1h
    jitter: 0
topics:
  orders: { policy: fast }
  users: {}
endpoints:
  billing:
    url: https://billing.example.com/hooks
    topics: [orders, users]
    types: ["order.*"]
    secret: ${BILLING_SECRET}
    headers: { X-Team: billing }
    transform: { plugin: cloud_events, config: { source: shop, depth: 2 } }
    max_per_second: 10
    dead_letter: true
"#;

#[test]
fn a_full_config_loads_with_every_setting() {
    let c = load(FULL).unwrap();
    assert_eq!(c.server.listen.to_string(), "127.0.0.1:9090");
    assert_eq!(c.server.max_body_bytes, 512 * 1024);
    assert_eq!(c.delivery.timeout, Duration::from_secs(5));
    assert_eq!(c.delivery.allow_networks.len(), 2);
    let ep = &c.file_endpoints["billing"];
    assert_eq!(ep.destination.host(), Some("billing.example.com"));
    assert_eq!(ep.secrets[0].expose(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    assert!(ep.subscribes_to("orders", "order.created"));
    assert!(!ep.subscribes_to("orders", "invoice.created"));
    assert!(!ep.subscribes_to("payments", "order.created"));
    let transform = ep.transform.as_ref().unwrap();
    assert_eq!(transform.plugin, "cloud-events");
    assert_eq!(transform.config["source"], "shop");
    assert_eq!(transform.config["depth"], "2");
    assert!(ep.dead_letter);
    // Endpoint policy absent: the topic's policy applies to that topic, standard to others.
    assert_eq!(c.policy_for(ep, "orders").name(), "fast");
    assert_eq!(c.policy_for(ep, "users").name(), "standard");
}

#[test]
fn the_embedded_default_listens_on_loopback_and_stores_under_data() {
    let c = Config::embedded_default();
    assert!(c.server.listen.ip().is_loopback());
    assert_eq!(c.storage.path, PathBuf::from("./data/hookgate.db"));
    // Not `./plugins`, which in a clone of the repository is the bundled plugins' sources.
    assert_eq!(c.plugins.dir, PathBuf::from("./data/plugins"));
    assert_eq!(c.plugins.cache_dir, PathBuf::from("./data/plugin-cache"));
    assert_eq!(c.server.max_body_bytes, 256 * 1024);
    assert_eq!(c.delivery.timeout, Duration::from_secs(10));
    assert!(c.policies.contains_key("standard"));
    // A newcomer's first event has somewhere to go.
    assert!(c.has_topic("default"));
    assert!(c.file_endpoints.is_empty());
}

#[test]
fn worker_threads_are_one_per_cpu_unless_the_file_names_between_1_and_256() {
    assert_eq!(Config::embedded_default().server.workers, None);
    assert_eq!(load("server:\n  workers: 3\n").unwrap().server.workers, Some(3));
    assert_eq!(
        problems("server:\n  workers: 0\n"),
        vec!["test.yaml:2: server.workers: must be at least 1"]
    );
    assert_eq!(
        problems("server:\n  workers: 257\n"),
        vec!["test.yaml:2: server.workers: 257 is more than 256"]
    );
}

#[test]
fn an_unknown_key_names_file_line_and_path() {
    let text = "topics:\n  orders: {}\nendpoints:\n  e:\n    url: http://x.example/\n    topics: [orders]\n    colour: blue\n";
    assert_eq!(
        problems(text),
        vec![
            "test.yaml:7: endpoints.e.colour: unknown field `colour`, expected one of `url`, `topics`, `types`, `policy`, `secret`, `headers`, `transform`, `signer`, `backoff`, `max_per_second`, `max_in_flight`, `timeout`, `ordered`, `dead_letter`, `on_final_failure`, `auth`, `tls`, `proxy`, `signature`, `description`, `tenant`, `channels`, `disabled`, `metadata`, `svix`, `filter`"
        ]
    );
}

#[test]
fn a_wrong_type_names_its_line() {
    assert_only_problem(
        "server:\n  api_keys: 5\n",
        "test.yaml:2: server.api_keys: invalid type",
    );
}

#[test]
fn every_validation_problem_is_reported_at_once() {
    let text = "topics:\n  orders: { policy: nope }\nendpoints:\n  e:\n    url: ftp://x\n    topics: [orders, missing]\n    policy: gone\n    headers: { webhook-id: x }\n    types: ['[']\n";
    let p = problems(text);
    assert_problem(&p, "test.yaml:2: topics.orders.policy: unknown policy `nope`");
    assert_problem(&p, "test.yaml:5: endpoints.e.url: `ftp://x` must start with http");
    assert_problem(&p, "test.yaml:6: endpoints.e.topics[1]: unknown topic `missing`");
    assert_problem(&p, "test.yaml:7: endpoints.e.policy: unknown policy `gone`");
    assert_problem(&p, "test.yaml:8: endpoints.e.headers.webhook-id: ");
    assert_problem(&p, "test.yaml:9: endpoints.e.types[0]: ");
}

/// One duration grammar: `1M` in a schedule is no longer 30 days in disguise, and a
/// humantime spelling the docs never promised is refused with how to write it.
#[test]
fn durations_outside_the_grammar_are_refused_with_their_path() {
    let text = "policies:\n  monthly:\n    schedule: [0s, 1M]\n    deadline: 2 weeks\ndelivery:\n  timeout: 10 seconds\n";
    let p = problems(text);
    assert_problem(
        &p,
        "test.yaml:3: policies.monthly.schedule[1]: `1M`: months are not a unit: use 30d",
    );
    assert_problem(
        &p,
        "test.yaml:4: policies.monthly.deadline: `2 weeks`: weeks are not a unit: use 14d",
    );
    assert_problem(
        &p,
        "test.yaml:6: delivery.timeout: `10 seconds`: units are written short: write 10s",
    );
    assert!(load("policies:\n  p:\n    schedule: [0s, 1h30m, 1d 12h]\n").is_ok());
}

/// `serve --listen` replaces `server.listen` before validation, so the loopback rule holds for
/// it too, and the config remembers it for the next reload of the file.
#[test]
fn the_listen_override_replaces_the_files_and_is_validated_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hookgate.yaml");
    std::fs::write(&path, "server:\n  listen: 127.0.0.1:9000\n").unwrap();
    let overrides = Overrides {
        listen: Some("127.0.0.1:7000".parse().unwrap()),
    };
    let c = super::load_file_with(&path, &overrides).unwrap();
    assert_eq!(c.server.listen.port(), 7000);
    assert_eq!(c.overrides, overrides);
    assert_eq!(super::load_file(&path).unwrap().server.listen.port(), 9000);

    let default = Config::embedded_default_with(&overrides).unwrap();
    assert_eq!(default.server.listen.port(), 7000);
    let everywhere = Overrides {
        listen: Some("0.0.0.0:7000".parse().unwrap()),
    };
    let refused = Config::embedded_default_with(&everywhere)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("the listener 0.0.0.0:7000 is not loopback"),
        "{refused}"
    );
}

/// Topics, endpoints, tenants and channels share one name rule, and one message saying it.
#[test]
fn every_name_of_the_file_follows_the_one_rule() {
    let p = problems(
        "topics:\n  .hidden: {}\n  ok: {}\nendpoints:\n  -e:\n    url: https://e.example/\n    topics: [ok]\n    tenant: _acme\n",
    );
    for (line, path, name) in [
        (2, "topics..hidden", ".hidden"),
        (5, "endpoints.-e", "-e"),
        (8, "endpoints.-e.tenant", "_acme"),
    ] {
        let expected = format!("test.yaml:{line}: {path}: `{name}` must be {NAME_RULE}");
        assert!(p.contains(&expected), "{expected}\n{p:#?}");
    }
    assert!(valid_name("a") && valid_name("0.b_c-d") && valid_name(&"x".repeat(128)));
    assert!(!valid_name("") && !valid_name("..") && !valid_name(&"x".repeat(129)));
}

#[test]
fn a_missing_environment_variable_is_a_problem_with_its_line() {
    assert_only_problem(
        "server:\n  api_keys: [\"${HOOKGATE_TEST_UNSET_KEY}\"]\n",
        "test.yaml:2: environment variable HOOKGATE_TEST_UNSET_KEY is not set",
    );
}

#[test]
fn no_api_keys_are_refused_off_loopback() {
    let p = problems("server:\n  listen: 0.0.0.0:8080\n");
    assert!(
        p[0].starts_with("test.yaml:1: server.api_keys: no API keys"),
        "{p:?}"
    );
    assert!(load("server:\n  listen: 0.0.0.0:8080\n  api_keys: [k]\n").is_ok());
}

#[test]
fn presets_cannot_be_redefined() {
    let p = problems("policies:\n  standard:\n    schedule: [0s]\n");
    assert!(
        p[0].starts_with("test.yaml:2: policies.standard: `standard` is a built-in preset"),
        "{p:?}"
    );
}

#[test]
fn policy_problems_point_into_the_policy() {
    let p = problems("policies:\n  fast:\n    sns:\n      healthyRetryPolicy:\n        numRetries: 101\n");
    assert_problem(
        &p,
        "test.yaml:5: policies.fast.sns.healthyRetryPolicy.numRetries: 101 is above the maximum 100",
    );
}

#[test]
fn secrets_never_appear_in_problems() {
    let p = problems(
        "topics:\n  t: {}\nendpoints:\n  e:\n    url: http://x.example/\n    topics: [t]\n    secret: whsec_!!notbase64!!\n",
    );
    assert_eq!(p.len(), 1);
    assert!(!p[0].contains("notbase64"), "{p:?}");
}

#[test]
fn the_operator_topic_exists_implicitly() {
    let c = load("health:\n  operator_topic: ops\nendpoints:\n  pager:\n    url: http://pager.example/\n    topics: [ops]\n").unwrap();
    assert!(c.has_topic("ops"));
}

#[test]
fn sizes_parse_with_units() {
    assert_eq!(parse_size("256KiB").unwrap(), 262_144);
    assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
    assert_eq!(parse_size("1000").unwrap(), 1000);
    assert!(parse_size("12 parsecs").is_err());
    assert!(parse_size("0").is_err());
}

#[test]
fn the_json_schema_describes_endpoints() {
    let schema = json_schema().to_string();
    assert!(schema.contains("max_per_second"), "{schema}");
    assert!(schema.contains("dead_letter"));
    for key in ["oauth2", "token_url", "client_cert", "proxy", "ed25519"] {
        assert!(schema.contains(key), "{key}");
    }
}

#[test]
fn outbound_auth_tls_proxy_and_signature_load() {
    use crate::delivery::OutboundAuth;
    use crate::delivery::signing::SignatureScheme;
    let c = load("delivery:\n  proxy: http://egress.internal:3128\ntopics:\n  t: {}\nendpoints:\n  a:\n    url: https://a.example/\n    topics: [t]\n    auth: { bearer: tok }\n  b:\n    url: https://b.example/\n    topics: [t]\n    auth: { basic: { username: u, password: p } }\n    proxy: http://other:8080\n  c:\n    url: https://c.example/\n    topics: [t]\n    auth:\n      oauth2: { token_url: https://idp.example/token, client_id: id, client_secret: s, scope: w }\n").unwrap();
    assert_eq!(
        c.delivery.proxy.as_ref().unwrap().to_string(),
        "egress.internal:3128"
    );
    let ep = |name: &str| c.file_endpoints[name].clone();
    assert!(matches!(ep("a").auth(), Some(OutboundAuth::Bearer(t)) if t.expose() == "tok"));
    assert!(matches!(ep("b").auth(), Some(OutboundAuth::Basic { username, .. }) if username == "u"));
    assert_eq!(
        ep("b").route().unwrap().proxy.as_ref().unwrap().to_string(),
        "other:8080"
    );
    assert!(
        ep("a").route().unwrap().proxy.is_none(),
        "delivery.proxy applies in the sender"
    );
    let Some(OutboundAuth::OAuth2(oauth)) = ep("c").auth().cloned() else {
        panic!("oauth2")
    };
    assert_eq!(
        (oauth.client_id.as_str(), oauth.scope.as_deref()),
        ("id", Some("w"))
    );
    assert_eq!(ep("c").signature, SignatureScheme::Hmac);
}

#[test]
fn outbound_problems_name_their_key_and_never_a_credential() {
    let found = problems(
        "topics:\n  t: {}\nendpoints:\n  e:\n    url: http://e.example/\n    topics: [t]\n    headers: { Authorization: x }\n    auth:\n      oauth2: { token_url: ftp://idp/, client_id: '', client_secret: 'hunter2 secret\\n' }\n    tls: { client_cert: /nonexistent/c.pem, client_key: /nonexistent/k.pem }\n    proxy: https://p:1\n",
    );
    let text = found.join("\n");
    for expected in [
        "endpoints.e.auth: `headers` sets Authorization too",
        "endpoints.e.auth.oauth2.token_url: `ftp://idp/`",
        "endpoints.e.auth.oauth2.client_id: may not be empty",
        "endpoints.e.tls: a client certificate needs an https:// URL",
        "endpoints.e.proxy: `https://p:1` must start with http://",
    ] {
        assert!(text.contains(expected), "{expected}\n{text}");
    }
    assert!(!text.contains("hunter2"), "{text}");
    let found = problems(
        "topics:\n  t: {}\nendpoints:\n  e:\n    url: https://e.example/\n    topics: [t]\n    auth: { bearer: \"tok\\nen\" }\n",
    );
    assert!(
        found[0].contains("endpoints.e.auth.bearer: must be non-empty visible ASCII"),
        "{found:?}"
    );
    assert!(!found[0].contains("tok"), "{found:?}");
}

/// A binding whose plugin is not loaded, or is loaded as another kind, is a problem to report
/// (the plugin folder may still change), not a reason to refuse the config.
#[test]
fn bindings_to_missing_plugins_or_plugins_of_another_kind_are_problems() {
    let c = load("topics:\n  t: {}\nendpoints:\n  e:\n    url: http://x.example/\n    topics: [t]\n    transform: { plugin: github-signature }\n    signer: { plugin: not-loaded-yet }\n    backoff: { plugin: decorrelated-jitter }\n").unwrap();
    let worlds = |name: &str| match name {
        "github-signature" => Some("signer"),
        "decorrelated-jitter" => Some("backoff"),
        _ => None,
    };
    let problems: Vec<(String, &str)> = c.file_endpoints["e"]
        .binding_problems(worlds)
        .iter()
        .map(|p| (p.to_string(), p.code()))
        .collect();
    assert_eq!(
        problems,
        [
            (
                "endpoint e binds transform plugin \"github-signature\" which is a signer, not a transformer"
                    .to_owned(),
                "wrong_kind"
            ),
            (
                "endpoint e binds signer plugin \"not-loaded-yet\" which is not loaded".to_owned(),
                "missing"
            ),
        ]
    );
}

#[test]
fn storage_cap_and_client_timeouts_have_defaults_and_are_checked() {
    let c = load("").unwrap();
    assert_eq!(c.storage.max_size_bytes, None);
    assert_eq!(c.server.header_timeout, Duration::from_secs(10));
    assert_eq!(c.server.body_timeout, Duration::from_secs(30));

    let c =
        load("server:\n  header_timeout: 2s\n  body_timeout: 500ms\nstorage:\n  max_size: 64MiB\n").unwrap();
    assert_eq!(c.storage.max_size_bytes, Some(64 << 20));
    assert_eq!(c.server.header_timeout, Duration::from_secs(2));
    assert_eq!(c.server.body_timeout, Duration::from_millis(500));

    let found = problems("server:\n  header_timeout: 0s\n  body_timeout: soon\nstorage:\n  max_size: 4KiB\n");
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(
        found[0].contains("server.header_timeout: `0s` is too short: at least 100ms (e.g. 10s)"),
        "{found:?}"
    );
    assert!(found[1].contains("server.body_timeout"), "{found:?}");
    assert!(
        found[2].contains("storage.max_size: `4KiB` is below the minimum"),
        "{found:?}"
    );
}

/// Found while writing the `config_load` fuzz target (`fuzz/`): block sequences nest one level
/// per `- `, so a short file can nest a hundred thousand deep; converting (and dropping) such a
/// tree recursed until the stack overflowed and killed the process — `config check`, a reload
/// or the start. Deep nesting is now a problem on its line, found before any tree is built.
#[test]
fn deeply_nested_yaml_is_a_problem_not_a_crash() {
    let deep_block = format!(
        "endpoints:\n  e:\n    headers:\n      {}x\n",
        "- ".repeat(100_000)
    );
    let deep_flow = format!("topics: {}\n", "[".repeat(100_000));
    let deep_mixed = format!("policies:\n  p:\n    sns: {}\n", "- {a: ".repeat(20_000));
    for text in [&deep_block, &deep_flow, &deep_mixed] {
        let found = problems(text);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("test.yaml:"), "{found:?}");
    }
    let found = problems(&deep_block);
    assert!(found[0].contains("nested deeper than 64 levels"), "{found:?}");

    // 64 levels are fine (the plugin config is free-form).
    let ok = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: https://x.example/\n    topics: [t]\n    \
         transform: {{ plugin: p, config: {{ deep: {}1{} }} }}\n",
        "[".repeat(58),
        "]".repeat(58)
    );
    load(&ok).unwrap();
}

use crate::delivery::tests::tls;

#[test]
fn the_config_reads_ca_files_and_refuses_what_is_not_a_ca_certificate() {
    let pki = tls::test_pki();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("ca.pem");
    std::fs::write(&good, &pki.ca_pem).unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "hello\n").unwrap();
    let huge = dir.path().join("huge.pem");
    std::fs::write(&huge, pki.ca_pem.repeat((1 << 20) / pki.ca_pem.len() + 1)).unwrap();
    let yaml = |file: &std::path::Path| format!("delivery:\n  ca_certs: [{}]\n", file.display());

    let config = load_str(&yaml(&good), "t.yaml", None, |_| None).unwrap();
    assert_eq!(config.delivery.extra_roots, vec![pki.ca.clone()]);

    for (file, why) in [
        (junk.as_path(), "no `BEGIN CERTIFICATE`"),
        (huge.as_path(), "larger than 1024 KiB"),
        (dir.path(), "not a regular file"),
        (&dir.path().join("missing.pem"), "No such file"),
    ] {
        let err = load_str(&yaml(file), "t.yaml", None, |_| None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("delivery.ca_certs[0]") && err.contains(why), "{err}");
    }
}

#[test]
fn a_broker_url_chooses_the_destination_and_http_only_keys_are_refused_on_it() {
    let ok = load(
        "delivery:\n  allow_networks: [127.0.0.0/8]\ntopics:\n  t: {}\nendpoints:\n  n:\n    url: nats://u:hunter2@127.0.0.1:4222/orders.created\n    topics: [t]\n",
    )
    .unwrap();
    let ep = &ok.file_endpoints["n"];
    assert_eq!(ep.destination.kind(), "nats");
    assert_eq!(ep.destination.target().unwrap(), "subject orders.created");
    assert!(!format!("{ep:?}").contains("hunter2"));

    let p = problems(
        "delivery:\n  allow_networks: [127.0.0.0/8]\ntopics:\n  t: {}\nendpoints:\n  r:\n    url: redis://127.0.0.1/0?stream=s\n    topics: [t]\n    auth: { bearer: x }\n    proxy: http://127.0.0.1:3128\n  bad:\n    url: amqp://u:hunter2@h/%2f?queue=x\n    topics: [t]\n",
    );
    assert!(
        p.iter()
            .any(|l| l.contains("endpoints.r.auth: applies to http(s) endpoints only")),
        "{p:#?}"
    );
    assert!(p.iter().any(|l| l.contains("endpoints.r.proxy:")), "{p:#?}");
    assert!(
        p.iter()
            .any(|l| l.contains("endpoints.bad.url:") && l.contains("unknown query key `queue`")),
        "{p:#?}"
    );
    assert!(!p.iter().any(|l| l.contains("hunter2")), "{p:#?}");
}

/// Every mistake of one file in one run, whatever its kind: unknown keys (two typos), a value
/// of the wrong type, a bad duration, an unknown topic and an unknown policy.
#[test]
fn config_check_lists_mistakes_of_every_kind_at_once() {
    let text = "\
server:
  listne: 127.0.0.1:9000
  shutdown_grace: ten seconds
topics:
  orders: { polcy: fast }
delivery:
  max_in_flight: lots
endpoints:
  billing:
    url: https://billing.example.com/
    topics: [orders, invoices]
    policy: quick
    timout: 5s
";
    assert_eq!(
        problems(text),
        [
            "test.yaml:2: server.listne: unknown field `listne`, expected one of `listen`, `api_keys`, `console_keys`, `public_url`, `max_body`, `shutdown_grace`, `rate_limit_per_key`, `header_timeout`, `body_timeout`, `workers`",
            "test.yaml:3: server.shutdown_grace: `ten seconds` is not a duration: write whole numbers with units ms, s, m, h or d, e.g. 500ms, 30s, 10m, 1h 30m or 3d",
            "test.yaml:5: topics.orders.polcy: unknown field `polcy`, expected `policy` or `description`",
            "test.yaml:7: delivery.max_in_flight: invalid type: string \"lots\", expected u32",
            "test.yaml:11: endpoints.billing.topics[1]: unknown topic `invoices` (declared: orders, svix)",
            "test.yaml:12: endpoints.billing.policy: unknown policy `quick` (known: sns-aws-managed, sns-customer-managed, sns-http-default, standard)",
            "test.yaml:13: endpoints.billing.timout: unknown field `timout`, expected one of `url`, `topics`, `types`, `policy`, `secret`, `headers`, `transform`, `signer`, `backoff`, `max_per_second`, `max_in_flight`, `timeout`, `ordered`, `dead_letter`, `on_final_failure`, `auth`, `tls`, `proxy`, `signature`, `description`, `tenant`, `channels`, `disabled`, `metadata`, `svix`, `filter`",
        ]
    );
}

/// What follows from a mistake already reported is not reported again: an endpoint that lost
/// its `topics` to a wrong type says so once, not also that it has no topic.
#[test]
fn a_mistake_of_shape_is_not_reported_twice() {
    let found = problems(
        "topics:\n  t: {}\nendpoints:\n  e:\n    url: https://e.example/\n    topics: t\n  f:\n    url: https://f.example/\n    topics: [t]\n    colour: 1\n",
    );
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("test.yaml:6: endpoints.e.topics: invalid type"),
        "{found:?}"
    );
    assert!(
        found[1].starts_with("test.yaml:10: endpoints.f.colour: unknown field"),
        "{found:?}"
    );
}

/// Each duration key has its span and one plain sentence with an example; a bare number (which
/// YAML reads as a number) lacks a unit, not a type.
#[test]
fn durations_out_of_their_span_or_without_a_unit_are_one_plain_sentence() {
    let text = "\
server:
  header_timeout: 10
cluster:
  lease: 0s
delivery:
  timeout: 0s
health:
  pause_after: 99999d
retention:
  events: 1d
policies:
  p:
    schedule: [0s, 5, 400d]
topics:
  t: {}
endpoints:
  e:
    url: https://e.example/
    topics: [t]
    timeout: 1h
";
    assert_eq!(
        problems(text),
        [
            "test.yaml:2: server.header_timeout: `10` has no unit: write 10ms, 10s, 10m, 10h or 10d",
            "test.yaml:4: cluster.lease: `0s` is too short: at least 1s (e.g. 15s)",
            "test.yaml:6: delivery.timeout: `0s` is too short: at least 100ms (e.g. 10s)",
            "test.yaml:8: health.pause_after: `99999d` is too long: at most 365d (e.g. 3d)",
            "test.yaml:10: retention.events: `1d` is too short: at least 7d, the window replay needs (e.g. 30d)",
            "test.yaml:13: policies.p.schedule[1]: `5` has no unit: write 5ms, 5s, 5m, 5h or 5d",
            "test.yaml:13: policies.p.schedule[2]: `400d` is too long: at most 365d",
            "test.yaml:20: endpoints.e.timeout: `1h` is too long: at most 15m (e.g. 10s)",
        ]
    );
    let c = load("server:\n  shutdown_grace: 0s\ndelivery:\n  timeout: 15m\n").unwrap();
    assert_eq!(c.server.shutdown_grace, Duration::ZERO, "no grace is a choice");
    assert_eq!(c.delivery.timeout, Duration::from_secs(900));
}

/// The config file refuses an endpoint the API refuses: an IP literal in a range the SSRF
/// rules block, unless `delivery.allow_networks` lists it (the OAuth2 token URL likewise).
/// Host names are judged when they resolve, at every attempt.
#[test]
fn an_endpoint_at_a_blocked_address_is_refused_unless_allowed() {
    let endpoints = "\
topics:
  t: {}
endpoints:
  private:
    url: http://10.0.0.1/hooks
    topics: [t]
  loopback6:
    url: http://[::1]:9000/hooks
    topics: [t]
  metadata:
    url: https://e.example/
    topics: [t]
    auth:
      oauth2: { token_url: http://169.254.169.254/token, client_id: id, client_secret: s }
  named:
    url: http://localhost:9000/hooks
    topics: [t]
";
    assert_eq!(
        problems(endpoints),
        [
            "test.yaml:5: endpoints.private.url: `http://10.0.0.1/hooks`: 10.0.0.1 is private network (RFC 1918); webhooks may not target it unless delivery.allow_networks lists it",
            "test.yaml:8: endpoints.loopback6.url: `http://[::1]:9000/hooks`: ::1 is loopback; webhooks may not target it unless delivery.allow_networks lists it",
            "test.yaml:14: endpoints.metadata.auth.oauth2.token_url: `http://169.254.169.254/token`: 169.254.169.254 is cloud metadata service (169.254.169.254); webhooks may not target it unless delivery.allow_networks lists it",
        ]
    );
    let allowed =
        format!("delivery:\n  allow_networks: [10.0.0.0/8, \"::1\", 169.254.169.254/32]\n{endpoints}");
    assert_eq!(load(&allowed).unwrap().file_endpoints.len(), 4);
}

/// The schema an editor shows says each duration key's range, as the validator enforces it.
#[test]
fn the_schema_gives_each_duration_keys_range() {
    use super::defaults::limits;
    let schema = json_schema();
    let description = |def: &str, key: &str| {
        schema["$defs"][def]["properties"][key]["description"]
            .as_str()
            .unwrap_or_else(|| panic!("{def}.{key} has no description"))
            .to_owned()
    };
    let keys = [
        ("RawServer", "shutdown_grace", limits::SHUTDOWN_GRACE),
        ("RawServer", "header_timeout", limits::HEADER_TIMEOUT),
        ("RawServer", "body_timeout", limits::BODY_TIMEOUT),
        ("RawCluster", "lease", limits::CLUSTER_LEASE),
        ("RawPlugins", "call_timeout", limits::PLUGIN_CALL_TIMEOUT),
        (
            "RawPlugins",
            "call_wall_timeout",
            limits::PLUGIN_CALL_WALL_TIMEOUT,
        ),
        ("RawDelivery", "timeout", limits::DELIVERY_TIMEOUT),
        ("RawEndpoint", "timeout", limits::DELIVERY_TIMEOUT),
        ("RawHealth", "pause_after", limits::PAUSE_AFTER),
        ("RawHealth", "disable_after", limits::DISABLE_AFTER),
        ("RawHealth", "key_blocked_after", limits::KEY_BLOCKED_AFTER),
        ("RawRetention", "deliveries", limits::RETAIN_DELIVERIES),
        ("RawRetention", "events", limits::RETAIN_EVENTS),
        ("RawRetention", "idempotency", limits::RETAIN_IDEMPOTENCY_KEYS),
    ];
    for (def, key, span) in keys {
        let text = description(def, key);
        for bound in [span.min, span.max] {
            let written = format!("`{}`", crate::policy::humanize_duration(bound));
            assert!(text.contains(&written), "{def}.{key}: {written} not in {text:?}");
        }
    }
}

#[test]
fn a_content_filter_is_compiled_at_load_and_its_mistakes_name_file_line_and_path() {
    let c = load(
        r#"
topics:
  orders: {}
endpoints:
  big:
    url: https://big.example.com/hooks
    topics: [orders]
    filter:
      payload.amount: { $gte: 1000 }
      $or:
        - { type: order.paid }
        - { data: { status: shipped } }
  everything:
    url: https://all.example.com/hooks
    topics: [orders]
    filter: {}
"#,
    )
    .unwrap();
    let filter = c.file_endpoints["big"].filter.as_ref().expect("compiled");
    let view = |amount: i64, event_type: &str| serde_json::json!({"type": event_type, "payload": {"amount": amount, "status": "new"}});
    assert!(filter.matches(&view(1500, "order.paid")));
    assert!(!filter.matches(&view(500, "order.paid")));
    assert!(!filter.matches(&view(1500, "order.created")));
    assert!(
        c.file_endpoints["everything"].filter.is_none(),
        "`{{}}` is no filter"
    );

    let found = problems(
        r#"
topics:
  orders: {}
endpoints:
  big:
    url: https://big.example.com/hooks
    topics: [orders]
    filter:
      payload:
        amount:
          $gte: [1000]
      paylaod.status: paid
      $or:
        - { type: { $regex: "(" } }
"#,
    );
    assert!(
        found.contains(&"test.yaml:11: endpoints.big.filter.payload.amount.$gte: `$gte` compares with a number or a string, not a list".to_owned()),
        "{found:#?}"
    );
    assert_problem(
        &found,
        "test.yaml:12: endpoints.big.filter.paylaod.status: unknown field `paylaod`",
    );
    assert_problem(
        &found,
        "test.yaml:14: endpoints.big.filter.$or[0].type.$regex: not a valid regex",
    );
}
