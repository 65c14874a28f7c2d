//! The HTTP client of the commands that talk to a running server: the operator commands to
//! the gateway's API, `import svix` to both sides' Svix API. JSON in, status and body out.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

/// How long a command waits for one answer.
const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// A server's base URL, the bearer token its calls carry, and the connections to it.
pub(super) struct JsonClient {
    base: String,
    bearer: Option<String>,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

/// Why a call did not give the answer a command wanted.
#[derive(Debug, thiserror::Error)]
pub(super) enum CallError {
    #[error("a request this command could not build: {0}")]
    Request(#[from] http::Error),
    #[error("{base} did not answer within 30 s")]
    Timeout { base: String },
    #[error("cannot reach {base}: {detail}")]
    Unreachable { base: String, detail: String },
    /// The server's error answer: its status, what it calls the error, and its words.
    #[error("{status}: {code}: {message}")]
    Refused {
        status: StatusCode,
        code: String,
        message: String,
    },
    #[error("{status}: an answer this command does not understand: {detail}")]
    Unreadable { status: StatusCode, detail: String },
}

impl JsonClient {
    pub(super) fn new(base: &str, bearer: Option<String>) -> JsonClient {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .build();
        JsonClient {
            base: base.trim_end_matches('/').to_owned(),
            bearer,
            client: Client::builder(TokioExecutor::new()).build(https),
        }
    }

    pub(super) fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request, with `body` as JSON and the `extra` headers; the answer's status and
    /// body, whatever the status.
    pub(super) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        extra: &[(&str, &str)],
    ) -> Result<(StatusCode, Bytes), CallError> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(header::ACCEPT, "application/json");
        if let Some(token) = &self.bearer {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let payload = match body {
            Some(v) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let request = request.body(Full::new(payload))?;
        let unreachable = |e: &dyn std::fmt::Display| CallError::Unreachable {
            base: self.base.clone(),
            detail: e.to_string(),
        };
        let response = tokio::time::timeout(ANSWER_WAIT, self.client.request(request))
            .await
            .map_err(|_| CallError::Timeout {
                base: self.base.clone(),
            })?
            .map_err(|e| unreachable(&e))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(&e))?;
        Ok((status, bytes.to_bytes()))
    }
}

/// A path segment (a name, an id) as it may stand in a URL.
pub(super) fn segment(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}
