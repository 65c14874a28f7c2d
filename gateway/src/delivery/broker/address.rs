//! A broker URL's parts that every broker kind reads the same way: the URL itself (a host, no
//! fragment), the broker's address with its credentials, the path decoded, and the query keys
//! a kind knows. Each kind reads the rest of its URL form in its own file.

use std::fmt;

use crate::model::Secret;

use super::super::UrlError;
use super::super::masked::{masked_text, masked_url};

/// `text` as a broker URL: one with a host and without a `#fragment`.
pub(in crate::delivery) fn broker_url(text: &str) -> Result<url::Url, UrlError> {
    let url = url::Url::parse(text).map_err(|e| UrlError::NotAUrl {
        url: masked_text(text),
        reason: e.to_string(),
    })?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(UrlError::NoHost(masked_text(text)));
    }
    if url.fragment().is_some() {
        return Err(UrlError::Fragment(masked_text(text)));
    }
    Ok(url)
}

/// What every broker kind reads first from its `url`: the broker's address (TLS when the
/// scheme is `tls_scheme`, the port of `ports` for plain or TLS when the URL names none) and
/// the URL as shown, with its credentials masked; and a refusal of query keys not in `keys`.
pub(in crate::delivery) fn opened(
    url: &url::Url,
    tls_scheme: &str,
    [plain, secure]: [u16; 2],
    keys: &[&str],
) -> Result<(BrokerAddress, String), UrlError> {
    let tls = url.scheme() == tls_scheme;
    let server = BrokerAddress::from_url(url, tls, if tls { secure } else { plain })?;
    known_query_keys(url, keys)?;
    Ok((server, masked_url(url)))
}

/// A broker's address and credentials, from a URL's authority. Endpoints with the same
/// address (credentials included) share one connection.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BrokerAddress {
    /// From the scheme: `tls`, `amqps`, `rediss`, `mqtts`.
    pub tls: bool,
    /// As written; an IPv6 literal keeps its brackets.
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<Secret>,
}

impl BrokerAddress {
    /// The address of `url`, with `default_port` when it names none.
    pub(in crate::delivery) fn from_url(
        url: &url::Url,
        tls: bool,
        default_port: u16,
    ) -> Result<Self, UrlError> {
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| UrlError::CredentialsNotUtf8)
        };
        let username = match url.username() {
            "" => None,
            user => Some(decode(user)?),
        };
        let password = match url.password() {
            None => None,
            Some(pass) => Some(Secret::new(decode(pass)?)),
        };
        Ok(BrokerAddress {
            tls,
            host: url.host_str().unwrap_or_default().to_owned(),
            port: url.port().unwrap_or(default_port),
            username,
            password,
        })
    }

    /// The host without IPv6 brackets, as a resolver or TLS takes it.
    pub fn bare_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }
}

impl fmt::Debug for BrokerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerAddress")
            .field("tls", &self.tls)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl fmt::Display for BrokerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A URL path segment list, percent-decoded, without the leading `/`.
pub(in crate::delivery) fn decoded_path(url: &url::Url) -> Result<String, UrlError> {
    let path = url.path().strip_prefix('/').unwrap_or(url.path());
    percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| UrlError::PathNotUtf8)
}

/// Refuses query keys a kind does not know, so that a typo is a config error, not a silent
/// default.
fn known_query_keys(url: &url::Url, known: &[&str]) -> Result<(), UrlError> {
    for (key, _) in url.query_pairs() {
        if !known.contains(&key.as_ref()) {
            return Err(UrlError::UnknownQueryKey {
                url: masked_text(url.as_str()),
                key: key.into_owned(),
                known: if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                },
            });
        }
    }
    Ok(())
}
