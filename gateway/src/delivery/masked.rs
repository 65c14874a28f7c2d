//! What people see of a destination and of a request: URLs with their credentials as `***`,
//! and the headers the attempt record keeps, with credentials and signatures masked. Every
//! destination kind shows its URL and records its headers through here.

use http::header::{AUTHORIZATION, PROXY_AUTHORIZATION};
use http::{HeaderMap, HeaderName, Uri};

use super::signing::WEBHOOK_SIGNATURE;
use crate::model::MASKED;

/// Headers whose values the attempt record always masks: credentials and signatures.
const ALWAYS_MASKED: [HeaderName; 3] = [AUTHORIZATION, PROXY_AUTHORIZATION, WEBHOOK_SIGNATURE];

/// `https://user:pass@host/x` → `https://***@host/x`: credentials in URLs are secrets.
pub fn masked_uri(url: &Uri) -> String {
    masked_text(&url.to_string())
}

/// A broker URL as text, credentials masked.
pub(super) fn masked_url(url: &url::Url) -> String {
    masked_text(url.as_str())
}

/// The URL text with everything between `://` and the authority's last `@` shown as `***`.
pub(super) fn masked_text(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => text.to_owned(),
    }
}

/// Headers as the attempt record keeps them: values of `masked`, credentials and signatures
/// replaced by [`MASKED`], others as lossy text.
pub(super) fn recorded(headers: &HeaderMap, masked: &[HeaderName]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let hidden = ALWAYS_MASKED.contains(name) || masked.contains(name) || value.is_sensitive();
            let shown = if hidden {
                MASKED.to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            (name.as_str().to_owned(), shown)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn the_record_masks_credentials_signatures_and_named_headers() {
        let mut sent = HeaderMap::new();
        for (name, value) in [
            ("authorization", "Bearer t"),
            ("proxy-authorization", "Basic p"),
            ("webhook-signature", "v1,abc"),
            ("x-api-key", "k"),
            ("webhook-id", "msg_1"),
        ] {
            sent.insert(name, HeaderValue::from_static(value));
        }
        let got = recorded(&sent, &[HeaderName::from_static("x-api-key")]);
        let shown: Vec<(&str, &str)> = got.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            shown,
            vec![
                ("authorization", MASKED),
                ("proxy-authorization", MASKED),
                ("webhook-signature", MASKED),
                ("x-api-key", MASKED),
                ("webhook-id", "msg_1"),
            ]
        );
    }
}
