//! An operator's action on an ordering key, taken by any node and decided by the node that
//! delivers the endpoint: the node that took the call writes the request and its notice in one
//! commit (`ordering_actions`), the delivering node's cluster task hands it to its scheduler
//! (which decides it in order with the attempts' outcomes, as on one node) and writes the
//! answer, which the asking node reads and removes.

use std::sync::Arc;
use std::time::Duration;

use crate::model::{DeliveryId, Timestamp};
use crate::scheduler::{KeyAction, KeyAnswer, SchedulerHandle};
use crate::store::{ClusterStore, KeyActionRequest};

/// How long the asking node waits for the delivering node's answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// How often it looks for the answer meanwhile.
const ANSWER_POLL: Duration = Duration::from_millis(20);

/// Asks the node that delivers `endpoint` to act on `key`; None when no answer came in time
/// (no node delivers the endpoint now, or the database is out of reach).
pub async fn relay(
    store: Arc<dyn ClusterStore>,
    endpoint: Arc<str>,
    key: &str,
    action: KeyAction,
    expected: Option<DeliveryId>,
    now: Timestamp,
) -> Option<KeyAnswer> {
    let request = KeyActionRequest {
        endpoint,
        key: key.to_owned(),
        action: action.as_str().to_owned(),
        delivery: expected,
    };
    let id = match store.request_key_action(&request, now).await {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(error = %e, "cannot hand an ordering key action to the delivering node");
            return None;
        }
    };
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    loop {
        let give_up = tokio::time::Instant::now() >= deadline;
        match store.take_key_action_answer(id, give_up).await {
            Ok(Some(text)) => return answer_of(&text),
            Ok(None) if give_up => return None,
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "cannot read an ordering key action's answer yet"),
        }
        if give_up {
            return None;
        }
        tokio::time::sleep(ANSWER_POLL).await;
    }
}

/// The delivering node's side: acts on the requests of these notices whose endpoints this
/// node delivers, and writes their answers.
pub(super) async fn answer(
    store: &Arc<dyn ClusterStore>,
    scheduler: &SchedulerHandle,
    delivers: impl Fn(&str) -> bool,
    ids: Vec<i64>,
) {
    for id in ids {
        let request = match store.key_action_request(id).await {
            Ok(Some(request)) if delivers(&request.endpoint) => request,
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read an ordering key action");
                continue;
            }
        };
        let Some(action) = KeyAction::parse(&request.action) else {
            continue;
        };
        let answer = scheduler
            .key_action(request.endpoint, Arc::from(request.key), action, request.delivery)
            .await;
        scheduler.committed(ANSWER_WITHIN).await;
        if let Err(e) = store.answer_key_action(id, &answer_text(&answer)).await {
            tracing::warn!(error = %e, "cannot answer an ordering key action");
        }
    }
}

/// An answer as the table keeps it: `applied:5`, `unchanged:` …
fn answer_text(answer: &KeyAnswer) -> String {
    let id = |d: &Option<DeliveryId>| d.map_or(String::new(), |d| d.0.to_string());
    match answer {
        KeyAnswer::Applied(d) => format!("applied:{}", d.0),
        KeyAnswer::Unchanged { front } => format!("unchanged:{}", id(front)),
        KeyAnswer::InFlight(d) => format!("in_flight:{}", d.0),
        KeyAnswer::NotHeld { front } => format!("not_held:{}", id(front)),
        KeyAnswer::NewRound(d) => format!("new_round:{}", d.0),
        KeyAnswer::NotOwner => "not_owner:".into(),
        KeyAnswer::Stopped => "stopped:".into(),
    }
}

fn answer_of(text: &str) -> Option<KeyAnswer> {
    let (kind, id) = text.split_once(':')?;
    let delivery = id.parse().ok().map(DeliveryId);
    Some(match kind {
        "applied" => KeyAnswer::Applied(delivery?),
        "unchanged" => KeyAnswer::Unchanged { front: delivery },
        "in_flight" => KeyAnswer::InFlight(delivery?),
        "not_held" => KeyAnswer::NotHeld { front: delivery },
        "new_round" => KeyAnswer::NewRound(delivery?),
        "not_owner" => KeyAnswer::NotOwner,
        "stopped" => KeyAnswer::Stopped,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_survives_the_table() {
        for answer in [
            KeyAnswer::Applied(DeliveryId(5)),
            KeyAnswer::Unchanged { front: None },
            KeyAnswer::Unchanged {
                front: Some(DeliveryId(6)),
            },
            KeyAnswer::InFlight(DeliveryId(7)),
            KeyAnswer::NotHeld {
                front: Some(DeliveryId(9)),
            },
            KeyAnswer::NotHeld { front: None },
            KeyAnswer::NewRound(DeliveryId(8)),
            KeyAnswer::NotOwner,
            KeyAnswer::Stopped,
        ] {
            assert_eq!(answer_of(&answer_text(&answer)), Some(answer));
        }
        assert_eq!(answer_of("bogus"), None);
    }
}
