//! Endpoints created through the API: the file's endpoint keys, as JSON, validated by the same
//! validator as the file's endpoints, against the topics and policies of the running config.

use super::endpoint::Known;
use super::raw::RawEndpoint;
use super::shape::{self, Shaped};
use super::validate::Validator;
use super::{Config, EndpointConfig, EndpointSource, Problem, Stored};
use crate::model::{Secret, Timestamp};
use crate::store::ApiEndpointRow;

/// The marker of a stored list of retiring secrets; a row without it holds one secret (as rows
/// did before more than one could retire at a time).
const RETIRING_LIST: &str = "hookgate-retiring:";

/// The secrets being rotated out of a stored endpoint, newest first, each with the end of its
/// overlap. The row keeps them in its one retiring column (sealed like the spec), with the
/// latest end as its time.
pub fn retiring_secrets(stored: Option<&(String, Timestamp)>) -> Vec<(Secret, Timestamp)> {
    let Some((text, until)) = stored else {
        return Vec::new();
    };
    let Some(list) = text.strip_prefix(RETIRING_LIST) else {
        return vec![(Secret::new(text.clone()), *until)];
    };
    let pairs: Vec<(String, i64)> = serde_json::from_str(list).unwrap_or_default();
    pairs
        .into_iter()
        .map(|(secret, until)| (Secret::new(secret), Timestamp::from_millis(until)))
        .collect()
}

/// What [`retiring_secrets`] reads back: none, one secret as it is, or a marked list.
pub fn stored_retiring(secrets: &[(Secret, Timestamp)]) -> Option<(String, Timestamp)> {
    let latest = secrets.iter().map(|(_, until)| *until).max()?;
    if let [(only, until)] = secrets {
        return Some((only.expose().to_owned(), *until));
    }
    let pairs: Vec<(&str, i64)> = secrets
        .iter()
        .map(|(secret, until)| (secret.expose(), until.as_millis()))
        .collect();
    let list = serde_json::to_string(&pairs).expect("strings and numbers serialize");
    Some((format!("{RETIRING_LIST}{list}"), latest))
}

/// The label of an API endpoint's problems, where a file's problems name the file.
const LABEL: &str = "api";

/// Why an endpoint created through the API cannot run: its problems, with paths inside the
/// endpoint (`url`, `topics[0]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub problems: Vec<Problem>,
    /// Every problem is an address the SSRF rules block (the API answers `blocked_address`;
    /// with other problems too, `invalid_endpoint`).
    pub blocked_address: bool,
}

impl From<Problem> for Refused {
    fn from(problem: Problem) -> Self {
        Refused {
            problems: vec![problem],
            blocked_address: false,
        }
    }
}

/// Validates an endpoint created through the API as the running `config` would run it: the
/// validator of the file's endpoints, against the running topics, policies and
/// `delivery.allow_networks`.
pub fn api_endpoint(row: &ApiEndpointRow, config: &Config) -> Result<EndpointConfig, Refused> {
    let prefix = format!("endpoints.{}", row.name);
    let relative = |mut problems: Vec<Problem>| {
        for p in &mut problems {
            p.path = match p.path.strip_prefix(&prefix) {
                Some("") => "name".into(),
                Some(rest) => rest.trim_start_matches('.').to_owned(),
                None => p.path.clone(),
            };
        }
        problems
    };
    let mut shaped = parse_spec(&row.spec)?;
    let mut shape_problems: Vec<Problem> = shaped
        .problems
        .iter()
        .map(|(path, reason)| problem(path, reason.clone()))
        .collect();
    let Some(raw) = shaped.value.take() else {
        return Err(Refused {
            problems: shape_problems,
            blocked_address: false,
        });
    };
    if raw.tls.is_some() {
        shape_problems.push(problem(
            "tls",
            "client certificates are files on the gateway's host: declare such an endpoint in the config file".into(),
        ));
        return Err(Refused {
            problems: shape_problems,
            blocked_address: false,
        });
    }
    let line_of = |_: &str| 0;
    // The endpoint's name is checked by the file's rule, with the file's message.
    let mut v = Validator::new(LABEL, &line_of);
    let known = Known {
        topics: &config.topics,
        policies: &config.policies,
        allow_networks: &config.delivery.allow_networks,
    };
    let endpoint = v.endpoint(&row.name, raw, &known);
    if !v.problems.is_empty() || !shape_problems.is_empty() {
        let found = relative(v.problems);
        shape_problems.extend(found.into_iter().filter(|p| !shaped.covers(&p.path)));
        return Err(Refused {
            blocked_address: v.blocked_addresses == shape_problems.len(),
            problems: shape_problems,
        });
    }
    let mut endpoint = endpoint.expect("an endpoint without problems is built");
    endpoint.source = EndpointSource::Api;
    endpoint.retiring = retiring_secrets(row.retiring.as_ref());
    endpoint.stored = Some(Stored {
        version: row.version,
        created_at: row.created_at,
        updated_at: row.updated_at,
    });
    Ok(endpoint)
}

/// The stored JSON as the file's endpoint keys, every mistake of shape found (each names the
/// key's path); a text that is not JSON is one problem.
fn parse_spec(spec: &str) -> Result<Shaped<RawEndpoint>, Problem> {
    // Most specs are right (every stored one was checked when it was written): read straight
    // into the keys, without the tree that finding every mistake needs. A start compiles a
    // million of them.
    if let Ok(raw) = serde_json::from_str::<RawEndpoint>(spec) {
        return Ok(Shaped {
            value: Some(raw),
            problems: Vec::new(),
            removed: Vec::new(),
        });
    }
    let tree: serde_json::Value = serde_json::from_str(spec).map_err(|e| {
        // The position in a JSON text the caller did not write as such says nothing.
        let reason = e.to_string();
        problem(
            "",
            reason.split(" at line ").next().unwrap_or_default().to_owned(),
        )
    })?;
    Ok(shape::read(tree))
}

fn problem(path: &str, reason: String) -> Problem {
    Problem {
        file: LABEL.into(),
        line: 0,
        path: path.into(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    fn config() -> Config {
        super::super::load_str(
            "topics:\n  orders: {}\ndelivery:\n  allow_networks: [127.0.0.0/8]\nendpoints:\n  billing:\n    url: http://127.0.0.1/b\n    topics: [orders]\n",
            "hookgate.yaml",
            None,
            |_| None,
        )
        .unwrap()
    }

    fn row(name: &str, spec: serde_json::Value) -> ApiEndpointRow {
        ApiEndpointRow {
            name: name.into(),
            tenant: None,
            spec: spec.to_string(),
            uid: None,
            retiring: None,
            version: 1,
            created_at: Timestamp::EPOCH,
            updated_at: Timestamp::EPOCH,
        }
    }

    fn problems(result: Result<EndpointConfig, Refused>) -> Vec<(String, String)> {
        match result {
            Err(refused) => refused.problems.into_iter().map(|p| (p.path, p.reason)).collect(),
            Ok(ep) => panic!("expected problems, got {}", ep.name),
        }
    }

    #[test]
    fn an_api_endpoint_is_validated_like_the_files_with_paths_inside_the_endpoint() {
        let c = config();
        let ok = api_endpoint(
            &row(
                "acme-1",
                serde_json::json!({"url": "http://127.0.0.1/x", "topics": ["orders"], "tenant": "acme"}),
            ),
            &c,
        )
        .unwrap();
        assert_eq!(ok.source, EndpointSource::Api);
        assert_eq!(ok.tenant.as_deref(), Some("acme"));

        let found = problems(api_endpoint(
            &row(
                "x",
                serde_json::json!({"url": "ftp://h", "topics": ["nope"], "policy": "gone", "max_per_second": -1}),
            ),
            &c,
        ));
        let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            ["url", "topics[0]", "policy", "max_per_second"],
            "{found:?}"
        );

        let unknown = problems(api_endpoint(
            &row(
                "x",
                serde_json::json!({"url": "http://h", "topics": ["orders"], "colour": 1}),
            ),
            &c,
        ));
        assert!(unknown[0].1.contains("unknown field `colour`"), "{unknown:?}");
        // One rule and one message for a name, the file's (the API used to add a second rule
        // of its own to the same error).
        let too_long = "x".repeat(129);
        for name in ["-x", "..", too_long.as_str()] {
            let bad_name = problems(api_endpoint(
                &row(name, serde_json::json!({"url": "http://h", "topics": ["orders"]})),
                &c,
            ));
            assert_eq!(
                bad_name,
                [(
                    "name".to_owned(),
                    format!("`{name}` must be {}", super::super::NAME_RULE)
                )],
                "{name}"
            );
        }
        assert!(
            api_endpoint(
                &row(
                    &"x".repeat(128),
                    serde_json::json!({"url": "http://h", "topics": ["orders"]})
                ),
                &c
            )
            .is_ok()
        );
        let tls = problems(api_endpoint(
            &row(
                "x",
                serde_json::json!({"url": "https://h", "topics": ["orders"], "tls": {"client_cert": "/etc/passwd", "client_key": "/etc/shadow"}}),
            ),
            &c,
        ));
        assert_eq!(tls[0].0, "tls");
    }

    #[test]
    fn an_ip_literal_in_a_blocked_range_is_refused_unless_allowed() {
        let c = config();
        for url in [
            "http://10.0.0.1/x",
            "http://[::1]/x",
            "http://169.254.169.254/latest",
            "nats://10.0.0.1:4222/orders",
            "redis://[fd00::1]/0?stream=s",
        ] {
            let refused = api_endpoint(
                &row("x", serde_json::json!({"url": url, "topics": ["orders"]})),
                &c,
            )
            .unwrap_err();
            assert!(refused.blocked_address, "{url}");
            assert_eq!(refused.problems[0].path, "url", "{url}");
            assert!(
                refused.problems[0].reason.contains("delivery.allow_networks"),
                "{refused:?}"
            );
        }
        for spec in [
            serde_json::json!({"url": "ftp://h", "topics": ["orders"]}),
            serde_json::json!({"url": "http://10.0.0.1/x", "topics": ["nope"]}),
        ] {
            let refused = api_endpoint(&row("x", spec.clone()), &c).unwrap_err();
            assert!(
                !refused.blocked_address,
                "blocked_address only when the address is all that is wrong: {spec}"
            );
        }
        for url in [
            "http://127.0.0.1:9/x",
            "http://example.com/x",
            "mqtt://127.0.0.1:1883/a/b",
        ] {
            api_endpoint(
                &row("x", serde_json::json!({"url": url, "topics": ["orders"]})),
                &c,
            )
            .unwrap_or_else(|e| panic!("{url}: {e:?}"));
        }
    }
}
