//! Endpoints created through the API: the file's endpoint keys, as JSON, validated by the same
//! validator as the file's endpoints, against the topics and policies of the running config.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::endpoint::Known;
use super::raw::RawEndpoint;
use super::shape::{self, Shaped};
use super::validate::Validator;
use super::{Config, ConfigError, EndpointConfig, EndpointSource, Problem};
use crate::model::Secret;
use crate::store::ApiEndpointRow;

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
    let mut v = Validator::new(LABEL, &line_of);
    if !valid_api_name(&row.name) {
        v.problem(
            &prefix,
            format!(
                "`{}` must be 1-64 characters of a-z, A-Z, 0-9, `.`, `_`, `-`, starting with a letter or digit",
                row.name
            ),
        );
    }
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
    endpoint.retiring = row
        .retiring
        .as_ref()
        .map(|(secret, until)| (Secret::new(secret.clone()), *until));
    Ok(endpoint)
}

/// The stored JSON as the file's endpoint keys, every mistake of shape found (each names the
/// key's path); a text that is not JSON is one problem.
fn parse_spec(spec: &str) -> Result<Shaped<RawEndpoint>, Problem> {
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

/// Names of endpoints created through the API: they travel in URLs and cluster notices.
fn valid_api_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

impl Config {
    /// This config with the endpoints created through the API in place of those it had: each
    /// validated against this config's topics and policies. A name the file uses too, or an
    /// endpoint the file no longer supports (its topic removed, say), is a problem of the file.
    pub fn with_api_endpoints(mut self, rows: Arc<[ApiEndpointRow]>) -> Result<Config, ConfigError> {
        self.endpoints.retain(|_, ep| ep.source == EndpointSource::Config);
        let file = self
            .source
            .as_ref()
            .map_or_else(|| "<embedded default>".to_owned(), |p| p.display().to_string());
        let mut problems = Vec::new();
        let mut added = BTreeMap::new();
        for row in rows.iter() {
            if self.endpoints.contains_key(row.name.as_str()) {
                problems.push(Problem {
                    file: file.clone(),
                    line: 0,
                    path: format!("endpoints.{}", row.name),
                    reason: format!(
                        "the name is taken by an endpoint created through the API (GET /v1/endpoints/{}); \
                         rename this one or delete that one",
                        row.name
                    ),
                });
                continue;
            }
            match api_endpoint(row, &self) {
                Ok(ep) => {
                    added.insert(ep.name.clone(), Arc::new(ep));
                }
                Err(found) => {
                    problems.extend(found.problems.into_iter().map(|p| Problem {
                        file: file.clone(),
                        line: 0,
                        path: String::new(),
                        reason: format!(
                            "the endpoint `{}` created through the API would not work with this file: {}: {}",
                            row.name, p.path, p.reason
                        ),
                    }));
                }
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError { problems });
        }
        self.endpoints.extend(added);
        self.api_endpoints = rows;
        Ok(self)
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
            retiring: None,
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
        let bad_name = problems(api_endpoint(
            &row("-x", serde_json::json!({"url": "http://h", "topics": ["orders"]})),
            &c,
        ));
        assert_eq!(bad_name[0].0, "name");
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

    #[test]
    fn a_name_taken_by_the_file_or_a_topic_the_file_dropped_refuses_the_merge() {
        let rows: Arc<[ApiEndpointRow]> = Arc::from(vec![row(
            "billing",
            serde_json::json!({"url": "http://127.0.0.1/x", "topics": ["orders"]}),
        )]);
        let err = config().with_api_endpoints(rows).unwrap_err();
        assert!(
            err.to_string().contains("endpoints.billing: the name is taken"),
            "{err}"
        );

        let rows: Arc<[ApiEndpointRow]> = Arc::from(vec![row(
            "shop",
            serde_json::json!({"url": "http://127.0.0.1/x", "topics": ["invoices"]}),
        )]);
        let err = config().with_api_endpoints(rows).unwrap_err();
        assert!(
            err.to_string().contains("`shop` created through the API"),
            "{err}"
        );

        let rows: Arc<[ApiEndpointRow]> = Arc::from(vec![row(
            "shop",
            serde_json::json!({"url": "http://127.0.0.1/x", "topics": ["orders"]}),
        )]);
        let merged = config().with_api_endpoints(rows).unwrap();
        assert_eq!(merged.endpoints.len(), 2);
        assert_eq!(merged.endpoints["shop"].source, EndpointSource::Api);
        let again = merged.with_api_endpoints(Arc::from(Vec::new())).unwrap();
        assert_eq!(
            again.endpoints.len(),
            1,
            "API endpoints are replaced, not added to"
        );
    }
}
