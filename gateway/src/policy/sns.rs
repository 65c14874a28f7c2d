//! The SNS HTTP/S delivery policy (docs/policies.md, "SNS delivery policies"): the document, its
//! validation and its four retry phases.
//!
//! The document is taken verbatim: the same 9 attributes, camelCase, with SNS's defaults and
//! ranges, so a policy that works on SNS works here unchanged and a typo is an error that
//! names the attribute instead of a silently ignored key.

use std::borrow::Cow;
use std::time::Duration;

use serde_json::{Map, Value};

use super::curves::BackoffFunction;
use super::{Phase, PolicyProblem};

/// The content type SNS sends to HTTP/S endpoints when the request policy names none.
pub const SNS_DEFAULT_CONTENT_TYPE: &str = "text/plain; charset=UTF-8";

/// The hard limit of SNS on the un-jittered delays of an HTTP/S policy, in seconds.
pub const HTTP_POLICY_LIMIT_S: f64 = 3600.0;

/// A validated SNS delivery policy. Counts are retries *after* the first attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct SnsPolicy {
    pub min_delay_s: u32,
    pub max_delay_s: u32,
    pub num_retries: u32,
    pub num_no_delay_retries: u32,
    pub num_min_delay_retries: u32,
    pub num_max_delay_retries: u32,
    pub backoff_function: BackoffFunction,
    /// `throttlePolicy.maxReceivesPerSecond`: an average rate, not a strict cap.
    pub max_receives_per_second: Option<u32>,
    /// `requestPolicy.headerContentType`; `None` when the document has no request policy
    /// (the SNS default applies then, see [`SnsPolicy::content_type`]).
    pub header_content_type: Option<String>,
}

impl SnsPolicy {
    /// The SNS HTTP/S defaults: 3 retries, 20 s apart (the linear curve from 20 to 20 s).
    pub fn http_default() -> SnsPolicy {
        SnsPolicy {
            min_delay_s: 20,
            max_delay_s: 20,
            num_retries: 3,
            num_no_delay_retries: 0,
            num_min_delay_retries: 0,
            num_max_delay_retries: 0,
            backoff_function: BackoffFunction::Linear,
            max_receives_per_second: None,
            header_content_type: None,
        }
    }

    /// The `Content-Type` an HTTP/S request under this policy carries.
    pub fn content_type(&self) -> &str {
        self.header_content_type
            .as_deref()
            .unwrap_or(SNS_DEFAULT_CONTENT_TYPE)
    }

    /// Retries of the backoff phase: `numRetries` minus the three other phases.
    pub fn num_backoff_retries(&self) -> u32 {
        self.num_retries
            .saturating_sub(self.num_no_delay_retries)
            .saturating_sub(self.num_min_delay_retries)
            .saturating_sub(self.num_max_delay_retries)
    }

    /// The un-jittered delay in seconds before retry `k` (1-based: retry 1 is attempt 2) and
    /// its phase, or `None` past `numRetries`.
    ///
    /// Computed from the phase counts, never from a list, so the 100 015 retries of
    /// `sns-aws-managed` cost the same to plan as 3.
    pub fn retry_delay_s(&self, k: u32) -> Option<(f64, Phase)> {
        if k == 0 || k > self.num_retries {
            return None;
        }
        let no_delay_end = self.num_no_delay_retries;
        let pre_backoff_end = no_delay_end + self.num_min_delay_retries;
        let backoff_count = self.num_backoff_retries();
        let backoff_end = pre_backoff_end + backoff_count;
        let min_s = f64::from(self.min_delay_s);
        let max_s = f64::from(self.max_delay_s);
        Some(if k <= no_delay_end {
            (0.0, Phase::NoDelay)
        } else if k <= pre_backoff_end {
            (min_s, Phase::PreBackoff)
        } else if k <= backoff_end {
            let i = k - pre_backoff_end;
            let delay_s = self.backoff_function.delay_s(i, backoff_count, min_s, max_s);
            (delay_s, Phase::Backoff)
        } else {
            (max_s, Phase::PostBackoff)
        })
    }

    /// [`SnsPolicy::retry_delay_s`] as a duration, rounded to the millisecond (the
    /// resolution of [`crate::model::Timestamp`]).
    pub fn retry_delay(&self, k: u32) -> Option<(Duration, Phase)> {
        self.retry_delay_s(k)
            .map(|(delay_s, phase)| (seconds_to_duration(delay_s), phase))
    }

    /// The sum in seconds of every un-jittered delay:
    /// `numMinDelayRetries·min + Σ backoff + numMaxDelayRetries·max` (no-delay retries add 0).
    pub fn total_delay_s(&self) -> f64 {
        let min_s = f64::from(self.min_delay_s);
        let max_s = f64::from(self.max_delay_s);
        f64::from(self.num_min_delay_retries) * min_s
            + self
                .backoff_function
                .total_s(self.num_backoff_retries(), min_s, max_s)
            + f64::from(self.num_max_delay_retries) * max_s
    }

    /// Reads and validates a delivery-policy document: a JSON object (from a YAML mapping) or
    /// a string holding the JSON, pasted verbatim. `path` is where the document sits
    /// (`"sns"`); problem paths extend it. Every problem is reported, not just the first.
    ///
    /// `enforce_http_limit` applies the 3600 s hard limit of SNS for HTTP/S policies; only
    /// the built-in presets, which are SNS's policies for other protocols, are exempt.
    pub fn from_document(
        document: &Value,
        path: &str,
        enforce_http_limit: bool,
    ) -> Result<SnsPolicy, Vec<PolicyProblem>> {
        let parsed = parse_document(document, path)?;
        let top = match &parsed {
            Cow::Borrowed(Value::Object(top)) => top,
            Cow::Owned(Value::Object(top)) => top,
            _ => {
                return Err(vec![PolicyProblem::new(
                    path,
                    "must be a mapping (or a JSON string) with healthyRetryPolicy, throttlePolicy \
                     and requestPolicy",
                )]);
            }
        };
        let mut reader = Reader::default();
        reader.refuse_unknown(
            path,
            top,
            &["healthyRetryPolicy", "throttlePolicy", "requestPolicy"],
        );
        let mut policy = SnsPolicy::http_default();
        let retry_path = join(path, "healthyRetryPolicy");
        let numbers_ok = match reader.section(&retry_path, top.get("healthyRetryPolicy")) {
            Some(retry) => reader.retry_section(&retry_path, retry, &mut policy),
            None => true,
        };
        let throttle_path = join(path, "throttlePolicy");
        if let Some(throttle) = reader.section(&throttle_path, top.get("throttlePolicy")) {
            reader.throttle_section(&throttle_path, throttle, &mut policy);
        }
        let request_path = join(path, "requestPolicy");
        if let Some(request) = reader.section(&request_path, top.get("requestPolicy")) {
            reader.request_section(&request_path, request, &mut policy);
        }
        if enforce_http_limit && numbers_ok && reader.problems.is_empty() {
            let total_s = policy.total_delay_s();
            if total_s > HTTP_POLICY_LIMIT_S + 1e-9 {
                reader.problem(
                    retry_path,
                    format!(
                        "the retries add up to {} s, above the 3600 s limit of an HTTP/S policy",
                        format_seconds(total_s)
                    ),
                );
            }
        }
        if reader.problems.is_empty() {
            Ok(policy)
        } else {
            Err(reader.problems)
        }
    }
}

/// The document as a JSON value: a mapping as it is, a string parsed as the JSON it holds.
fn parse_document<'a>(document: &'a Value, path: &str) -> Result<Cow<'a, Value>, Vec<PolicyProblem>> {
    match document {
        Value::String(text) => serde_json::from_str::<Value>(text)
            .map(Cow::Owned)
            .map_err(|e| vec![PolicyProblem::new(path, format!("is not valid JSON: {e}"))]),
        other => Ok(Cow::Borrowed(other)),
    }
}

/// The six counts and delays of `healthyRetryPolicy`, as read (None: absent and no default,
/// or not a whole number).
struct RetryNumbers {
    min: Option<i64>,
    max: Option<i64>,
    num_retries: Option<i64>,
    no_delay: Option<i64>,
    min_delay: Option<i64>,
    max_delay: Option<i64>,
}

impl Reader {
    /// Reads `healthyRetryPolicy` into `policy`. False when its numbers could not all be
    /// taken (each problem is recorded).
    fn retry_section(
        &mut self,
        retry_path: &str,
        retry: &Map<String, Value>,
        policy: &mut SnsPolicy,
    ) -> bool {
        self.refuse_unknown(
            retry_path,
            retry,
            &[
                "minDelayTarget",
                "maxDelayTarget",
                "numRetries",
                "numNoDelayRetries",
                "numMinDelayRetries",
                "numMaxDelayRetries",
                "backoffFunction",
            ],
        );
        let mut read = |key: &str, default: u32| -> Option<i64> {
            match retry.get(key) {
                None => Some(i64::from(default)),
                Some(value) => self.whole_number(&join(retry_path, key), value),
            }
        };
        let raw = RetryNumbers {
            min: read("minDelayTarget", policy.min_delay_s),
            max: read("maxDelayTarget", policy.max_delay_s),
            num_retries: read("numRetries", policy.num_retries),
            no_delay: read("numNoDelayRetries", 0),
            min_delay: read("numMinDelayRetries", 0),
            max_delay: read("numMaxDelayRetries", 0),
        };
        if let Some(value) = retry.get("backoffFunction") {
            match value.as_str().map(str::parse::<BackoffFunction>) {
                Some(Ok(function)) => policy.backoff_function = function,
                _ => self.problem(
                    join(retry_path, "backoffFunction"),
                    "must be one of linear, arithmetic, geometric, exponential",
                ),
            }
        }
        let checked = self.check_retry_numbers(retry_path, raw);
        match checked {
            RetryNumbers {
                min: Some(min),
                max: Some(max),
                num_retries: Some(n),
                no_delay: Some(a),
                min_delay: Some(b),
                max_delay: Some(c),
            } if min <= max => {
                // Each value passed its range check; a count can still be huge when the
                // sum check failed, but then the document is refused anyway.
                policy.min_delay_s = to_u32(min);
                policy.max_delay_s = to_u32(max);
                policy.num_retries = to_u32(n);
                policy.num_no_delay_retries = to_u32(a);
                policy.num_min_delay_retries = to_u32(b);
                policy.num_max_delay_retries = to_u32(c);
                true
            }
            _ => false,
        }
    }

    /// The range checks of the retry numbers, and the rules between them (min ≤ max, the
    /// phases fit in `numRetries`). Returns the values that passed their range check.
    fn check_retry_numbers(&mut self, retry_path: &str, raw: RetryNumbers) -> RetryNumbers {
        let mut checked = |key: &str, value: Option<i64>, lo: i64, hi: i64| {
            let value = value?;
            self.in_range(&join(retry_path, key), value, lo, hi)
        };
        let max_limit = HTTP_POLICY_LIMIT_S as i64;
        let out = RetryNumbers {
            min: checked("minDelayTarget", raw.min, 1, i64::MAX),
            max: checked("maxDelayTarget", raw.max, 1, max_limit),
            num_retries: checked("numRetries", raw.num_retries, 0, 100),
            no_delay: checked("numNoDelayRetries", raw.no_delay, 0, i64::MAX),
            min_delay: checked("numMinDelayRetries", raw.min_delay, 0, i64::MAX),
            max_delay: checked("numMaxDelayRetries", raw.max_delay, 0, i64::MAX),
        };
        if let (Some(min), Some(max)) = (out.min, out.max)
            && min > max
        {
            self.problem(
                join(retry_path, "minDelayTarget"),
                format!("{min} is above maxDelayTarget {max}"),
            );
        }
        if let (Some(n), Some(a), Some(b), Some(c)) =
            (out.num_retries, out.no_delay, out.min_delay, out.max_delay)
        {
            let phases = a.saturating_add(b).saturating_add(c);
            if phases > n {
                self.problem(
                    retry_path.to_owned(),
                    format!(
                        "numNoDelayRetries + numMinDelayRetries + numMaxDelayRetries add up to \
                         {phases}, above numRetries {n}"
                    ),
                );
            }
        }
        out
    }

    fn throttle_section(
        &mut self,
        throttle_path: &str,
        throttle: &Map<String, Value>,
        policy: &mut SnsPolicy,
    ) {
        self.refuse_unknown(throttle_path, throttle, &["maxReceivesPerSecond"]);
        if let Some(value) = throttle.get("maxReceivesPerSecond") {
            let key_path = join(throttle_path, "maxReceivesPerSecond");
            if let Some(rate) = self.whole_number(&key_path, value)
                && let Some(rate) = self.in_range(&key_path, rate, 1, i64::from(u32::MAX))
            {
                policy.max_receives_per_second = Some(to_u32(rate));
            }
        }
    }

    fn request_section(&mut self, request_path: &str, request: &Map<String, Value>, policy: &mut SnsPolicy) {
        self.refuse_unknown(request_path, request, &["headerContentType"]);
        if let Some(value) = request.get("headerContentType") {
            let key_path = join(request_path, "headerContentType");
            match value {
                Value::String(content_type) if is_supported_content_type(content_type) => {
                    policy.header_content_type = Some(content_type.clone());
                }
                _ => self.problem(
                    key_path,
                    "must be application/json or text/plain (parameters such as \
                     `; charset=UTF-8` may follow)",
                ),
            }
        }
    }
}

/// `application/json` or `text/plain`, optionally with parameters: the content types SNS
/// allows in `headerContentType` for a (non-raw) HTTP/S subscription.
fn is_supported_content_type(content_type: &str) -> bool {
    let media_type = content_type.split(';').next().unwrap_or("").trim();
    media_type.eq_ignore_ascii_case("application/json") || media_type.eq_ignore_ascii_case("text/plain")
}

/// Collects problems while reading a document.
#[derive(Default)]
struct Reader {
    problems: Vec<PolicyProblem>,
}

impl Reader {
    fn problem(&mut self, path: String, message: impl Into<String>) {
        self.problems.push(PolicyProblem {
            path,
            message: message.into(),
        });
    }

    /// A section of the document: a mapping, or absent (`null` counts as absent, as in the
    /// effective policies SNS itself prints).
    fn section<'v>(&mut self, path: &str, value: Option<&'v Value>) -> Option<&'v Map<String, Value>> {
        match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(_) => {
                self.problem(path.to_owned(), "must be a mapping");
                None
            }
        }
    }

    fn refuse_unknown(&mut self, path: &str, map: &Map<String, Value>, known: &[&str]) {
        for key in map.keys().filter(|key| !known.contains(&key.as_str())) {
            let message = match known.iter().find(|k| loosely_equal(k, key)) {
                Some(intended) => format!("unknown attribute; did you mean {intended}?"),
                None if key == "http" => "unknown attribute: this is the topic-level wrapper of the AWS \
                                          API; write its inner policies as healthyRetryPolicy, \
                                          throttlePolicy and requestPolicy"
                    .to_owned(),
                None => format!("unknown attribute; expected one of {}", known.join(", ")),
            };
            self.problem(join(path, key), message);
        }
    }

    /// A whole number, from a JSON integer or a float without a fraction (`20.0`).
    fn whole_number(&mut self, path: &str, value: &Value) -> Option<i64> {
        let number = match value {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite() && f.fract() == 0.0)
                    .map(|f| f as i64)
            }),
            _ => None,
        };
        if number.is_none() {
            self.problem(path.to_owned(), format!("must be a whole number, not {value}"));
        }
        number
    }

    fn in_range(&mut self, path: &str, value: i64, min: i64, max: i64) -> Option<i64> {
        if value < min {
            self.problem(path.to_owned(), format!("{value} is below the minimum {min}"));
            None
        } else if value > max {
            self.problem(path.to_owned(), format!("{value} is above the maximum {max}"));
            None
        } else {
            Some(value)
        }
    }
}

/// `minDelayTarget` vs `mindelaytarget` or `min_delay_target`: the same word, for a hint.
fn loosely_equal(a: &str, b: &str) -> bool {
    let fold = |s: &str| {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect::<String>()
    };
    fold(a) == fold(b)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn to_u32(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Seconds for a message: whole when they are (near) whole, else with one decimal.
fn format_seconds(seconds: f64) -> String {
    if (seconds - seconds.round()).abs() < 0.05 {
        format!("{:.0}", seconds.round())
    } else {
        format!("{seconds:.1}")
    }
}

/// Seconds as a duration rounded to the millisecond.
pub(crate) fn seconds_to_duration(seconds: f64) -> Duration {
    if seconds.is_finite() && seconds > 0.0 {
        Duration::from_millis((seconds * 1000.0).round() as u64)
    } else {
        Duration::ZERO
    }
}

/// The delivery policy of the SNS documentation, used across the policy tests:
/// 3 no-delay, 2 at 1 s, 10 exponential 1 → 60 s, 35 at 60 s; 10/s; JSON.
#[cfg(test)]
pub(crate) fn seed_example_document() -> Value {
    serde_json::json!({
        "healthyRetryPolicy": {
            "minDelayTarget": 1, "maxDelayTarget": 60, "numRetries": 50,
            "numNoDelayRetries": 3, "numMinDelayRetries": 2, "numMaxDelayRetries": 35,
            "backoffFunction": "exponential"
        },
        "throttlePolicy": { "maxReceivesPerSecond": 10 },
        "requestPolicy": { "headerContentType": "application/json" }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(document: Value) -> Vec<(String, String)> {
        match SnsPolicy::from_document(&document, "sns", true) {
            Ok(policy) => panic!("expected problems, got {policy:?}"),
            Err(problems) => problems.into_iter().map(|p| (p.path, p.message)).collect(),
        }
    }

    fn one_problem(document: Value) -> (String, String) {
        let found = problems(document);
        assert_eq!(found.len(), 1, "{found:?}");
        found.into_iter().next().unwrap_or_default()
    }

    fn retry(fields: Value) -> Value {
        json!({ "healthyRetryPolicy": fields })
    }

    #[test]
    fn the_seed_example_is_read_verbatim_with_all_nine_attributes() {
        let policy = SnsPolicy::from_document(&seed_example_document(), "sns", true).unwrap();
        assert_eq!(
            policy,
            SnsPolicy {
                min_delay_s: 1,
                max_delay_s: 60,
                num_retries: 50,
                num_no_delay_retries: 3,
                num_min_delay_retries: 2,
                num_max_delay_retries: 35,
                backoff_function: BackoffFunction::Exponential,
                max_receives_per_second: Some(10),
                header_content_type: Some("application/json".into()),
            }
        );
        assert_eq!(policy.num_backoff_retries(), 10);
        assert_eq!(policy.total_delay_s().round(), 2205.0);
    }

    #[test]
    fn a_json_string_is_read_like_the_mapping() {
        let text = serde_json::to_string_pretty(&seed_example_document()).unwrap();
        assert_eq!(
            SnsPolicy::from_document(&Value::String(text), "sns", true),
            SnsPolicy::from_document(&seed_example_document(), "sns", true)
        );
    }

    #[test]
    fn an_empty_document_is_the_sns_http_default() {
        let policy = SnsPolicy::from_document(&json!({}), "sns", true).unwrap();
        assert_eq!(policy, SnsPolicy::http_default());
        assert_eq!(policy.content_type(), "text/plain; charset=UTF-8");
        assert_eq!(policy.max_receives_per_second, None);
        let delays: Vec<_> = (1..=3).map(|k| policy.retry_delay_s(k).unwrap()).collect();
        assert_eq!(delays, vec![(20.0, Phase::Backoff); 3]);
        assert_eq!(policy.retry_delay_s(4), None);
    }

    #[test]
    fn null_sections_count_as_absent() {
        let document = json!({ "healthyRetryPolicy": null, "throttlePolicy": null, "requestPolicy": null });
        assert_eq!(
            SnsPolicy::from_document(&document, "sns", true).unwrap(),
            SnsPolicy::http_default()
        );
    }

    #[test]
    fn the_phases_come_in_order_no_delay_pre_backoff_backoff_post_backoff() {
        let policy = SnsPolicy::from_document(&seed_example_document(), "sns", true).unwrap();
        let phases: Vec<Phase> = (1..=50).map(|k| policy.retry_delay_s(k).unwrap().1).collect();
        let mut expected = vec![Phase::NoDelay; 3];
        expected.extend([Phase::PreBackoff; 2]);
        expected.extend([Phase::Backoff; 10]);
        expected.extend([Phase::PostBackoff; 35]);
        assert_eq!(phases, expected);
        assert_eq!(policy.retry_delay_s(1).unwrap().0, 0.0);
        assert_eq!(policy.retry_delay_s(4).unwrap().0, 1.0);
        assert_eq!(policy.retry_delay_s(6).unwrap().0, 1.0);
        assert!((policy.retry_delay_s(15).unwrap().0 - 60.0).abs() < 1e-9);
        assert_eq!(policy.retry_delay_s(50).unwrap().0, 60.0);
        assert_eq!(policy.retry_delay_s(51), None);
        assert_eq!(policy.retry_delay_s(0), None);
    }

    #[test]
    fn num_retries_above_100_is_refused() {
        assert_eq!(
            one_problem(retry(json!({ "numRetries": 101 }))),
            (
                "sns.healthyRetryPolicy.numRetries".into(),
                "101 is above the maximum 100".into()
            )
        );
    }

    #[test]
    fn negative_counts_are_refused() {
        for key in [
            "numRetries",
            "numNoDelayRetries",
            "numMinDelayRetries",
            "numMaxDelayRetries",
        ] {
            assert_eq!(
                one_problem(retry(json!({ key: -1 }))),
                (
                    format!("sns.healthyRetryPolicy.{key}"),
                    "-1 is below the minimum 0".into()
                )
            );
        }
    }

    #[test]
    fn min_delay_below_one_second_is_refused() {
        assert_eq!(
            one_problem(retry(json!({ "minDelayTarget": 0 }))),
            (
                "sns.healthyRetryPolicy.minDelayTarget".into(),
                "0 is below the minimum 1".into()
            )
        );
    }

    #[test]
    fn max_delay_above_3600_s_is_refused() {
        assert_eq!(
            one_problem(retry(
                json!({ "minDelayTarget": 1, "maxDelayTarget": 3601, "numRetries": 0 })
            )),
            (
                "sns.healthyRetryPolicy.maxDelayTarget".into(),
                "3601 is above the maximum 3600".into()
            )
        );
    }

    #[test]
    fn min_delay_above_max_delay_is_refused() {
        assert_eq!(
            one_problem(retry(json!({ "minDelayTarget": 30, "maxDelayTarget": 10 }))),
            (
                "sns.healthyRetryPolicy.minDelayTarget".into(),
                "30 is above maxDelayTarget 10".into()
            )
        );
        // maxDelayTarget defaults to 20, so a lone minDelayTarget of 30 is above it as well.
        assert_eq!(
            one_problem(retry(json!({ "minDelayTarget": 30 }))).1,
            "30 is above maxDelayTarget 20"
        );
    }

    #[test]
    fn phase_counts_adding_up_to_more_than_num_retries_are_refused() {
        assert_eq!(
            one_problem(retry(json!({
                "numRetries": 10, "numNoDelayRetries": 5, "numMinDelayRetries": 4,
                "numMaxDelayRetries": 3
            }))),
            (
                "sns.healthyRetryPolicy".into(),
                "numNoDelayRetries + numMinDelayRetries + numMaxDelayRetries add up to 12, \
                 above numRetries 10"
                    .into()
            )
        );
    }

    #[test]
    fn an_unknown_backoff_function_is_refused() {
        assert_eq!(
            one_problem(retry(json!({ "backoffFunction": "cubic" }))),
            (
                "sns.healthyRetryPolicy.backoffFunction".into(),
                "must be one of linear, arithmetic, geometric, exponential".into()
            )
        );
    }

    #[test]
    fn a_throttle_below_one_per_second_is_refused() {
        assert_eq!(
            one_problem(json!({ "throttlePolicy": { "maxReceivesPerSecond": 0 } })),
            (
                "sns.throttlePolicy.maxReceivesPerSecond".into(),
                "0 is below the minimum 1".into()
            )
        );
    }

    #[test]
    fn an_unsupported_content_type_is_refused_and_parameters_are_allowed() {
        assert_eq!(
            one_problem(json!({ "requestPolicy": { "headerContentType": "application/xml" } })),
            (
                "sns.requestPolicy.headerContentType".into(),
                "must be application/json or text/plain (parameters such as `; charset=UTF-8` may follow)"
                    .into()
            )
        );
        let document = json!({ "requestPolicy": { "headerContentType": "application/json; charset=utf-8" } });
        let policy = SnsPolicy::from_document(&document, "sns", true).unwrap();
        assert_eq!(policy.content_type(), "application/json; charset=utf-8");
    }

    #[test]
    fn fractional_and_textual_numbers_are_refused_but_whole_floats_pass() {
        assert_eq!(
            one_problem(retry(json!({ "numRetries": 2.5 }))),
            (
                "sns.healthyRetryPolicy.numRetries".into(),
                "must be a whole number, not 2.5".into()
            )
        );
        assert_eq!(
            one_problem(retry(json!({ "numRetries": "5" }))).1,
            "must be a whole number, not \"5\""
        );
        let policy = SnsPolicy::from_document(&retry(json!({ "numRetries": 5.0 })), "sns", true).unwrap();
        assert_eq!(policy.num_retries, 5);
    }

    #[test]
    fn unknown_attributes_are_refused_with_their_path() {
        assert_eq!(
            one_problem(json!({ "sicklyRetryPolicy": {} })),
            (
                "sns.sicklyRetryPolicy".into(),
                "unknown attribute; expected one of healthyRetryPolicy, throttlePolicy, requestPolicy".into()
            )
        );
        assert_eq!(
            one_problem(retry(json!({ "numRetrys": 3 }))).0,
            "sns.healthyRetryPolicy.numRetrys"
        );
        assert_eq!(
            one_problem(json!({ "throttlePolicy": { "maxReceivesPerMinute": 3 } })).0,
            "sns.throttlePolicy.maxReceivesPerMinute"
        );
        assert_eq!(
            one_problem(json!({ "requestPolicy": { "headerContentEncoding": "gzip" } })).0,
            "sns.requestPolicy.headerContentEncoding"
        );
    }

    #[test]
    fn a_misspelt_case_gets_a_did_you_mean_hint() {
        assert_eq!(
            one_problem(retry(json!({ "mindelaytarget": 5 }))),
            (
                "sns.healthyRetryPolicy.mindelaytarget".into(),
                "unknown attribute; did you mean minDelayTarget?".into()
            )
        );
    }

    #[test]
    fn the_aws_topic_level_wrapper_gets_an_explanation() {
        let (path, message) = one_problem(json!({ "http": { "defaultHealthyRetryPolicy": {} } }));
        assert_eq!(path, "sns.http");
        assert!(message.contains("topic-level wrapper"), "{message}");
    }

    #[test]
    fn policies_longer_than_3600_s_are_refused_with_their_total() {
        // 5 at 100 s + linear 10 → 600 s (3500 s) + 1 at 600 s = 4600 s.
        let (path, message) = one_problem(retry(json!({
            "minDelayTarget": 100, "maxDelayTarget": 600, "numRetries": 16,
            "numMinDelayRetries": 5, "numMaxDelayRetries": 1
        })));
        assert_eq!(path, "sns.healthyRetryPolicy");
        assert_eq!(
            message,
            "the retries add up to 4600 s, above the 3600 s limit of an HTTP/S policy"
        );
    }

    #[test]
    fn exactly_3600_s_is_allowed() {
        let document = retry(json!({ "minDelayTarget": 3600, "maxDelayTarget": 3600, "numRetries": 1 }));
        let policy = SnsPolicy::from_document(&document, "sns", true).unwrap();
        assert_eq!(policy.total_delay_s(), 3600.0);
    }

    #[test]
    fn presets_may_exceed_the_http_limit() {
        let document = retry(json!({ "minDelayTarget": 600, "maxDelayTarget": 600, "numRetries": 10 }));
        assert!(SnsPolicy::from_document(&document, "sns", false).is_ok());
        assert!(SnsPolicy::from_document(&document, "sns", true).is_err());
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let found = problems(json!({
            "healthyRetryPolicy": { "numRetries": 101, "backoffFunction": "cubic", "extra": 1 },
            "throttlePolicy": { "maxReceivesPerSecond": 0 },
            "requestPolicy": { "headerContentType": "image/png" },
            "other": true
        }));
        let paths: Vec<&str> = found.iter().map(|(path, _)| path.as_str()).collect();
        for expected in [
            "sns.other",
            "sns.healthyRetryPolicy.extra",
            "sns.healthyRetryPolicy.numRetries",
            "sns.healthyRetryPolicy.backoffFunction",
            "sns.throttlePolicy.maxReceivesPerSecond",
            "sns.requestPolicy.headerContentType",
        ] {
            assert!(paths.contains(&expected), "{expected} missing from {paths:?}");
        }
        assert_eq!(found.len(), 6, "{found:?}");
    }

    #[test]
    fn malformed_json_text_and_non_mappings_are_refused() {
        assert_eq!(one_problem(Value::String("{ not json".into())).0, "sns");
        assert!(
            one_problem(Value::String("{ not json".into()))
                .1
                .starts_with("is not valid JSON")
        );
        assert_eq!(
            one_problem(json!([1, 2])).1,
            "must be a mapping (or a JSON string) with healthyRetryPolicy, throttlePolicy and requestPolicy"
        );
        assert_eq!(
            one_problem(json!({ "healthyRetryPolicy": 3 })),
            ("sns.healthyRetryPolicy".into(), "must be a mapping".into())
        );
    }

    #[test]
    fn delays_are_rounded_to_the_millisecond() {
        assert_eq!(seconds_to_duration(5.0544), Duration::from_millis(5054));
        assert_eq!(seconds_to_duration(-1.0), Duration::ZERO);
        assert_eq!(seconds_to_duration(f64::NAN), Duration::ZERO);
    }
}
