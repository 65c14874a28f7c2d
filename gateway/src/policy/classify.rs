//! What one attempt's outcome means for the delivery (README "How delivery works").

use crate::model::{ErrorKind, Outcome};

use super::RetryOn;

/// The verdict on one attempt's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Classification {
    /// A 2xx in time: the delivery is done.
    Success,
    /// Worth another attempt, if the policy has one left.
    Retryable,
    /// Retrying cannot help: the delivery fails (or is dead-lettered) now.
    Permanent,
    /// 410 Gone: the receiver wants no more events. Fails the delivery and, through the health
    /// machine, disables the endpoint at once (README "Endpoint health").
    Gone,
}

/// Classifies an outcome under a policy's `retry_on` (README "How delivery works").
///
/// - `all` retries every failure except 410 Gone: a 3xx, a 4xx, a blocked address
///   may all be a receiver's passing mistake, and the schedule is bounded anyway.
/// - `sns` retries what SNS retries: 5xx, 429, timeouts and connection errors (connect, DNS,
///   TLS, and `auth`: the token server's failure kept the request from being sent), and a
///   broker's `rejected` (its 5xx); every
///   other failure is permanent. A 410 is `Gone` under `sns` too, so the health
///   machine still disables the endpoint.
///
/// Under both, a plugin error is retryable (the plugin may be dropped in or fixed;
/// docs/writing-a-plugin.md), and `endpoint_paused` / `endpoint_removed` are permanent: the README
/// ("Endpoint health") says such deliveries are not sent later by themselves; so is
/// `payload_expunged` (there is nothing left to send).
pub fn classify(retry_on: RetryOn, outcome: &Outcome) -> Classification {
    let Outcome::Failed { kind, status, .. } = outcome else {
        return Classification::Success;
    };
    if outcome.is_gone() {
        return Classification::Gone;
    }
    match kind {
        ErrorKind::EndpointPaused | ErrorKind::EndpointRemoved | ErrorKind::PayloadExpunged => {
            Classification::Permanent
        }
        ErrorKind::PluginError => Classification::Retryable,
        _ if retry_on == RetryOn::All => Classification::Retryable,
        ErrorKind::Timeout | ErrorKind::Connect | ErrorKind::Dns | ErrorKind::Tls | ErrorKind::Auth => {
            Classification::Retryable
        }
        // A broker's refusal is its 5xx: it may take the message once its queue, stream or
        // permissions are fixed.
        ErrorKind::Rejected => Classification::Retryable,
        ErrorKind::HttpStatus => match status {
            Some(429) | Some(500..=599) => Classification::Retryable,
            _ => Classification::Permanent,
        },
        ErrorKind::Redirect | ErrorKind::BlockedAddress => Classification::Permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(kind: ErrorKind, status: Option<u16>) -> Outcome {
        Outcome::Failed {
            kind,
            status,
            retry_after: None,
            detail: String::new(),
        }
    }

    fn http(status: u16) -> Outcome {
        failed(ErrorKind::HttpStatus, Some(status))
    }

    use Classification::{Gone, Permanent, Retryable, Success};

    /// (outcome, under `all`, under `sns`)
    fn table() -> Vec<(Outcome, Classification, Classification)> {
        vec![
            (Outcome::Delivered { status: Some(200) }, Success, Success),
            (Outcome::Delivered { status: Some(204) }, Success, Success),
            (http(500), Retryable, Retryable),
            (http(502), Retryable, Retryable),
            (http(503), Retryable, Retryable),
            (http(599), Retryable, Retryable),
            (http(429), Retryable, Retryable),
            (http(400), Retryable, Permanent),
            (http(401), Retryable, Permanent),
            (http(403), Retryable, Permanent),
            (http(404), Retryable, Permanent),
            (http(408), Retryable, Permanent),
            (http(422), Retryable, Permanent),
            (http(410), Gone, Gone),
            (failed(ErrorKind::Redirect, Some(301)), Retryable, Permanent),
            (failed(ErrorKind::Redirect, Some(307)), Retryable, Permanent),
            (failed(ErrorKind::Timeout, None), Retryable, Retryable),
            (failed(ErrorKind::Connect, None), Retryable, Retryable),
            (failed(ErrorKind::Dns, None), Retryable, Retryable),
            (failed(ErrorKind::Tls, None), Retryable, Retryable),
            (failed(ErrorKind::PluginError, None), Retryable, Retryable),
            (failed(ErrorKind::Auth, None), Retryable, Retryable),
            (failed(ErrorKind::Rejected, None), Retryable, Retryable),
            (failed(ErrorKind::BlockedAddress, None), Retryable, Permanent),
            (failed(ErrorKind::EndpointPaused, None), Permanent, Permanent),
            (failed(ErrorKind::EndpointRemoved, None), Permanent, Permanent),
            (failed(ErrorKind::PayloadExpunged, None), Permanent, Permanent),
        ]
    }

    #[test]
    fn retry_on_all_retries_everything_but_gone_and_a_paused_or_removed_endpoint() {
        for (outcome, expected, _) in table() {
            assert_eq!(classify(RetryOn::All, &outcome), expected, "{outcome:?}");
        }
    }

    #[test]
    fn retry_on_sns_retries_only_5xx_429_timeouts_connection_and_plugin_errors() {
        for (outcome, _, expected) in table() {
            assert_eq!(classify(RetryOn::Sns, &outcome), expected, "{outcome:?}");
        }
    }
}
