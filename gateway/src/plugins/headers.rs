//! Which request headers a plugin may touch. Pure rules, applied by the attempt pipeline.
//!
//! - Connection-level headers describe one hop, not the message, and hyper writes its own
//!   framing: whatever a plugin answers, `connection`, `keep-alive`, `proxy-connection`,
//!   `transfer-encoding`, `te`, `trailer`, `upgrade`, `host`, `content-length`, `expect`,
//!   `proxy-authenticate`, `proxy-authorization`, and every header the answer's own
//!   `connection` header names, are dropped.
//! - A transform's answer loses the gateway's own names (`webhook-*` standard headers,
//!   `hookgate-*`, `traceparent`); the endpoint's configured headers and the standard headers
//!   are set after it and win.
//! - A transform chooses the request's method with a `hookgate-method` header in its answer:
//!   `POST` (the default), `PUT` or `PATCH`, methods that carry a body, so that the
//!   receiver still gets the message; the header itself is never sent.
//! - A signer only adds: a name the request already has (the endpoint's configured headers,
//!   `content-type`, the standard headers), a standard name even when absent (`webhook-*`,
//!   `hookgate-*`) and `authorization` are refused, and the attempt fails.

use http::{HeaderMap, HeaderName, HeaderValue, Method, header};

/// Headers dropped from every plugin answer: hop-by-hop and framing headers, which only the
/// gateway's HTTP client may write, and `expect`, which would make the receiver wait for a
/// `100 Continue` dance the gateway does not do.
const CONNECTION_LEVEL: [HeaderName; 12] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::HOST,
    header::CONTENT_LENGTH,
    header::EXPECT,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
];

/// Whether `name` is one of the gateway's standard headers (`webhook-id`,
/// `webhook-timestamp`, `webhook-signature`, any other `webhook-*`, `hookgate-*`, and
/// `traceparent`, which names the attempt's span).
pub fn is_standard(name: &HeaderName) -> bool {
    let name = name.as_str();
    name.starts_with("webhook-") || name.starts_with("hookgate-") || name == "traceparent"
}

/// `headers` without connection-level headers and without the headers its own `connection`
/// header names.
pub fn without_connection_level(mut headers: HeaderMap) -> HeaderMap {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in CONNECTION_LEVEL.iter().chain(&named) {
        headers.remove(name);
    }
    headers
}

/// A transform's answer as the request's base: connection-level headers and the gateway's
/// standard names dropped. The caller sets the endpoint's and the standard headers after it.
pub fn transform_answer(headers: HeaderMap) -> HeaderMap {
    let mut headers = without_connection_level(headers);
    let standard: Vec<HeaderName> = headers.keys().filter(|n| is_standard(n)).cloned().collect();
    for name in standard {
        headers.remove(name);
    }
    headers
}

/// The header in a transform's answer that chooses the request's method.
pub const METHOD: HeaderName = HeaderName::from_static("hookgate-method");

/// What is wrong with the headers a plugin answered: the attempt fails with `plugin_error`,
/// this in its detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("an invalid header name `{0}`")]
    InvalidName(String),
    #[error("an invalid value for header `{0}`")]
    InvalidValue(String),
    #[error("it answered more than one `hookgate-method` header")]
    MethodRepeated,
    /// The method as answered (lossily decoded).
    #[error("it answered method `{0}`; a transform may choose POST, PUT or PATCH")]
    MethodNotAllowed(String),
}

/// Headers as a plugin sees them: names and raw values, in order, repeated names repeated.
pub fn to_plugin(headers: &HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// The headers a plugin answered, each name and value checked.
pub fn from_plugin(list: &[(String, Vec<u8>)]) -> Result<HeaderMap, AnswerError> {
    let mut map = HeaderMap::with_capacity(list.len());
    for (name, value) in list {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| AnswerError::InvalidName(name.clone()))?;
        let value =
            HeaderValue::from_bytes(value).map_err(|_| AnswerError::InvalidValue(name.to_string()))?;
        map.append(name, value);
    }
    Ok(map)
}

/// The method a transform's answer chooses: `POST` without a `hookgate-method` header, else
/// its value (`PUT`, `PATCH`, any case), or what is wrong with it.
pub fn transform_method(headers: &HeaderMap) -> Result<Method, AnswerError> {
    let mut values = headers.get_all(METHOD).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return match headers.contains_key(METHOD) {
            true => Err(AnswerError::MethodRepeated),
            false => Ok(Method::POST),
        };
    };
    let name = value.to_str().unwrap_or("").trim().to_ascii_uppercase();
    match name.as_str() {
        "POST" => Ok(Method::POST),
        "PUT" => Ok(Method::PUT),
        "PATCH" => Ok(Method::PATCH),
        _ => Err(AnswerError::MethodNotAllowed(
            String::from_utf8_lossy(value.as_bytes()).into_owned(),
        )),
    }
}

/// A signer's answer that names a header it may not set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the signer answered header `{name}`, which is the gateway's ({why}); a signer may only add new headers"
)]
pub struct ForgedHeader {
    pub name: String,
    pub why: &'static str,
}

/// The headers a signer's answer adds to `request`: connection-level ones dropped, and an
/// error for the first header that the request already has or that is the gateway's.
pub fn signer_answer(request: &HeaderMap, answer: HeaderMap) -> Result<HeaderMap, ForgedHeader> {
    let answer = without_connection_level(answer);
    for name in answer.keys() {
        let why = if is_standard(name) {
            Some("a standard header")
        } else if name == header::AUTHORIZATION {
            Some("a credential")
        } else if request.contains_key(name) {
            Some("already in the request")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(ForgedHeader {
                name: name.as_str().to_owned(),
                why,
            });
        }
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn names(map: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn connection_level_headers_and_those_connection_names_are_dropped() {
        let answer = map(&[
            ("content-type", "application/json"),
            ("x-kept", "1"),
            ("connection", "close, X-Secret-Hop"),
            ("connection", "x-second"),
            ("x-secret-hop", "leak"),
            ("x-second", "leak"),
            ("expect", "100-continue"),
            ("transfer-encoding", "chunked"),
            ("content-length", "1"),
            ("host", "evil.example"),
            ("keep-alive", "timeout=5"),
            ("upgrade", "h2c"),
            ("te", "trailers"),
            ("trailer", "x"),
            ("proxy-authorization", "Basic x"),
        ]);
        assert_eq!(
            names(&without_connection_level(answer)),
            ["content-type", "x-kept"]
        );
    }

    #[test]
    fn a_transform_answer_loses_the_standard_names() {
        let answer = map(&[
            ("webhook-id", "forged"),
            ("Hookgate-Delivery-Attempt", "99"),
            ("authorization", "Bearer mine"),
            ("x-custom", "1"),
        ]);
        assert_eq!(names(&transform_answer(answer)), ["authorization", "x-custom"]);
    }

    #[test]
    fn a_transform_chooses_post_put_or_patch() {
        assert_eq!(transform_method(&map(&[("x", "1")])), Ok(Method::POST));
        assert_eq!(
            transform_method(&map(&[("hookgate-method", "put")])),
            Ok(Method::PUT)
        );
        assert_eq!(
            transform_method(&map(&[("Hookgate-Method", "PATCH")])),
            Ok(Method::PATCH)
        );
        assert!(transform_method(&map(&[("hookgate-method", "GET")])).is_err());
        assert!(transform_method(&map(&[("hookgate-method", "DELETE")])).is_err());
        let twice = map(&[("hookgate-method", "PUT"), ("hookgate-method", "PUT")]);
        assert!(transform_method(&twice).is_err());
        // The header itself is the gateway's and never sent.
        assert_eq!(
            names(&transform_answer(map(&[("hookgate-method", "PUT")]))),
            [] as [&str; 0]
        );
    }

    #[test]
    fn a_signer_may_only_add_new_names() {
        let request = map(&[
            ("content-type", "application/json"),
            ("x-team", "billing"),
            ("webhook-id", "evt_1"),
        ]);
        let added = signer_answer(
            &request,
            map(&[("x-hub-signature-256", "sha256=ab"), ("expect", "100-continue")]),
        )
        .unwrap();
        assert_eq!(names(&added), ["x-hub-signature-256"]);
        let refused = |name: &str| {
            signer_answer(&request, map(&[("x-ok", "1"), (name, "forged")]))
                .unwrap_err()
                .why
        };
        assert_eq!(refused("webhook-id"), "a standard header");
        assert_eq!(refused("webhook-signature"), "a standard header");
        assert_eq!(refused("hookgate-delivery-attempt"), "a standard header");
        assert_eq!(refused("Authorization"), "a credential");
        assert_eq!(refused("x-team"), "already in the request");
        assert_eq!(refused("content-type"), "already in the request");
    }
}
