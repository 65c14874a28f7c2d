//! The ordering keys of an ordered endpoint as the store sees them: each key's head (its oldest
//! pending delivery, or the dead letter a held key is stopped behind), how many deliveries wait
//! behind it and since when. Both backends answer from indexes on the deliveries' own
//! `ordering_key` column: the blocked keys from the index of pending deliveries already
//! attempted (a head that failed), each key's head and count from the index of its pending
//! deliveries — never from a scan of the endpoint's backlog.

use crate::model::{DeliveryId, DeliveryStatus, Timestamp};

/// Which keys a listing answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyListing {
    /// Blocked and held keys.
    Blocked,
    /// Keys with deliveries waiting behind their head (whatever their state).
    Waiting,
    /// Every key with a pending delivery or a hold.
    All,
}

/// The state of one ordering key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Its head has not failed, or nothing waits behind it.
    Flowing,
    /// Its head has failed at least once and others wait behind it.
    Blocked,
    /// `on_final_failure: hold` stopped it behind a head that finally failed, until an
    /// operator releases it.
    Held,
}

impl KeyState {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyState::Flowing => "flowing",
            KeyState::Blocked => "blocked",
            KeyState::Held => "held",
        }
    }
}

/// The delivery at the front of a key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyHead {
    pub delivery_id: DeliveryId,
    pub event_id: String,
    pub status: DeliveryStatus,
    /// The round the head is in (an action names the head it acts on by id and round).
    pub round: u32,
    pub attempt_count: u32,
    pub next_attempt_at: Option<Timestamp>,
    pub last_error: Option<String>,
}

/// One key of an endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderingKeyRow {
    pub key: String,
    /// None only for a held key whose dead head has been purged since.
    pub head: Option<KeyHead>,
    /// When the key was held (`on_final_failure: hold`).
    pub held_since: Option<Timestamp>,
    /// Pending deliveries behind the head.
    pub waiting: u64,
    /// When the oldest of those was made.
    pub oldest_waiting_at: Option<Timestamp>,
}

impl OrderingKeyRow {
    pub fn state(&self) -> KeyState {
        if self.held_since.is_some() {
            return KeyState::Held;
        }
        match &self.head {
            Some(head) if head.attempt_count > 0 && self.waiting > 0 => KeyState::Blocked,
            _ => KeyState::Flowing,
        }
    }

    /// Whether a listing of `listing` includes this key.
    pub fn listed_in(&self, listing: KeyListing) -> bool {
        match listing {
            KeyListing::Blocked => self.state() != KeyState::Flowing,
            KeyListing::Waiting => self.waiting > 0,
            KeyListing::All => true,
        }
    }
}

/// A page of an endpoint's keys.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KeyPage {
    pub keys: Vec<OrderingKeyRow>,
    /// The last key looked at, when there may be more after it.
    pub next_after: Option<String>,
}

impl KeyPage {
    /// The rows of the keys looked at (`candidates`, at most `limit` of them, in order) that
    /// `listing` includes.
    pub(crate) fn of(
        candidates: &[String],
        rows: Vec<OrderingKeyRow>,
        listing: KeyListing,
        limit: u32,
    ) -> KeyPage {
        let full = candidates.len() >= limit as usize;
        KeyPage {
            keys: rows.into_iter().filter(|r| r.listed_in(listing)).collect(),
            next_after: if full { candidates.last().cloned() } else { None },
        }
    }
}

/// Builds a key's row from its pending deliveries' first two (head and the oldest waiting one,
/// oldest first), their count, and its hold. A held key's head is its dead letter, and all of
/// its pending deliveries wait.
pub(crate) fn key_row(
    key: String,
    first_pending: Vec<(KeyHead, Timestamp)>,
    pending: u64,
    hold: Option<(Option<KeyHead>, Timestamp)>,
) -> Option<OrderingKeyRow> {
    let mut first = first_pending.into_iter();
    match hold {
        Some((head, held_at)) => Some(OrderingKeyRow {
            key,
            head,
            held_since: Some(held_at),
            waiting: pending,
            oldest_waiting_at: first.next().map(|(_, at)| at),
        }),
        None => {
            let (head, _) = first.next()?;
            Some(OrderingKeyRow {
                key,
                head: Some(head),
                held_since: None,
                waiting: pending.saturating_sub(1),
                oldest_waiting_at: first.next().map(|(_, at)| at),
            })
        }
    }
}

#[cfg(test)]
pub(crate) mod contract {
    //! What both backends answer for the same history.

    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::model::{Attempt, ErrorKind, Event, EventLabels};
    use crate::store::{
        AttemptWrite, IngestBatch, IngestItem, IngestOutcome, ReadyDelivery, StateChange, Store, Target,
    };

    fn event(id: &str, key: Option<&str>) -> IngestItem {
        IngestItem {
            event: Arc::new(Event {
                id: id.into(),
                topic: "t".into(),
                event_type: "x".into(),
                content_type: "application/json".into(),
                payload: Bytes::from_static(b"{}"),
                ordering_key: key.map(str::to_owned),
                received_at: Timestamp::from_millis(10),
                tenant: None,
                trace: None,
                labels: EventLabels::default(),
            }),
            endpoints: vec![Target::untenanted("e")],
        }
    }

    async fn ingest(store: &dyn Store, items: Vec<IngestItem>, now: i64) -> Vec<ReadyDelivery> {
        let batch = IngestBatch {
            items,
            idempotency: None,
            now: Timestamp::from_millis(now),
        };
        match store.ingest(batch).await.unwrap() {
            IngestOutcome::Committed(ready) => ready,
            IngestOutcome::AlreadyDone(_) => panic!("a fresh batch is committed"),
        }
    }

    pub(crate) fn failed(
        delivery: DeliveryId,
        n: u32,
        status: DeliveryStatus,
        next: Option<i64>,
    ) -> StateChange {
        StateChange::Attempt(AttemptWrite {
            delivery,
            round: 1,
            attempt: Attempt {
                n,
                started_at: Timestamp::from_millis(100),
                duration_ms: 1,
                status_code: Some(503),
                error_kind: Some(ErrorKind::HttpStatus),
                error: Some("HTTP 503".into()),
                exchange: Default::default(),
                trace_id: None,
            },
            plugin_note: None,
            status,
            next_attempt_at: next.map(Timestamp::from_millis),
            last_error: Some("HTTP 503".into()),
        })
    }

    /// The first ten keys of endpoint `e` that `listing` shows.
    async fn listed(store: &dyn Store, listing: KeyListing) -> Vec<OrderingKeyRow> {
        store.ordering_keys("e", listing, None, 10).await.unwrap().keys
    }

    fn keys(rows: &[OrderingKeyRow]) -> Vec<(&str, KeyState, u64)> {
        rows.iter()
            .map(|r| (r.key.as_str(), r.state(), r.waiting))
            .collect()
    }

    /// Key `a` is blocked behind a failed head, `b` flows, `c`'s only delivery failed (nothing
    /// waits: flowing), `d` is held behind a dead head with one delivery waiting, and an event
    /// without a key is no key at all.
    pub(crate) async fn ordering_keys(store: &dyn Store) {
        let ready = ingest(
            store,
            vec![
                event("a1", Some("a")),
                event("b1", Some("b")),
                event("a2", Some("a")),
                event("c1", Some("c")),
                event("n1", None),
                event("d1", Some("d")),
            ],
            20,
        )
        .await;
        let later = ingest(store, vec![event("a3", Some("a")), event("d2", Some("d"))], 30).await;
        let id = |i: usize| ready[i].id;
        store
            .apply(
                vec![
                    failed(id(0), 1, DeliveryStatus::Pending, Some(500)),
                    failed(id(0), 2, DeliveryStatus::Pending, Some(900)),
                    failed(id(3), 1, DeliveryStatus::Pending, Some(500)),
                    failed(id(5), 1, DeliveryStatus::Dead, None),
                    StateChange::Hold {
                        endpoint: Arc::from("e"),
                        key: "d".into(),
                        delivery: id(5),
                        at: Timestamp::from_millis(150),
                    },
                ]
                .into(),
            )
            .await
            .unwrap();

        let blocked = listed(store, KeyListing::Blocked).await;
        assert_eq!(
            keys(&blocked),
            [("a", KeyState::Blocked, 2), ("d", KeyState::Held, 1)]
        );
        let a = &blocked[0];
        let head = a.head.as_ref().unwrap();
        assert_eq!(head.delivery_id, id(0));
        assert_eq!(head.event_id, "a1");
        assert_eq!(head.attempt_count, 2);
        assert_eq!(head.next_attempt_at, Some(Timestamp::from_millis(900)));
        assert_eq!(head.last_error.as_deref(), Some("HTTP 503"));
        assert_eq!(a.oldest_waiting_at, Some(Timestamp::from_millis(20)));
        let d = &blocked[1];
        assert_eq!(d.head.as_ref().unwrap().delivery_id, id(5));
        assert_eq!(d.head.as_ref().unwrap().status, DeliveryStatus::Dead);
        assert_eq!(d.held_since, Some(Timestamp::from_millis(150)));
        assert_eq!(d.oldest_waiting_at, Some(Timestamp::from_millis(30)));

        let all = listed(store, KeyListing::All).await;
        assert_eq!(
            keys(&all),
            [
                ("a", KeyState::Blocked, 2),
                ("b", KeyState::Flowing, 0),
                ("c", KeyState::Flowing, 0),
                ("d", KeyState::Held, 1)
            ]
        );
        let waiting = listed(store, KeyListing::Waiting).await;
        assert_eq!(
            keys(&waiting),
            [("a", KeyState::Blocked, 2), ("d", KeyState::Held, 1)]
        );
        // Pages follow the keys' order.
        let first = store.ordering_keys("e", KeyListing::All, None, 2).await.unwrap();
        assert_eq!(first.next_after.as_deref(), Some("b"));
        let page = store
            .ordering_keys("e", KeyListing::All, first.next_after, 2)
            .await
            .unwrap();
        assert_eq!(
            keys(&page.keys),
            [("c", KeyState::Flowing, 0), ("d", KeyState::Held, 1)]
        );
        let other = store
            .ordering_keys("other", KeyListing::All, None, 10)
            .await
            .unwrap();
        assert_eq!(other, KeyPage::default());

        // The head delivered: the next one is the head, nothing failed, the key flows.
        let mut ok = failed(id(0), 3, DeliveryStatus::Succeeded, None);
        if let StateChange::Attempt(w) = &mut ok {
            w.last_error = None;
        }
        store.apply(vec![ok].into()).await.unwrap();
        let all = listed(store, KeyListing::All).await;
        assert_eq!(all[0].head.as_ref().unwrap().delivery_id, id(2));
        assert_eq!(all[0].state(), KeyState::Flowing);
        assert_eq!(all[0].oldest_waiting_at, Some(Timestamp::from_millis(30)));
        assert_eq!(all[0].head.as_ref().unwrap().event_id, "a2");
        assert_eq!(later.len(), 2);

        // Released: the hold is gone, the dead head stays dead, the waiting one is the head.
        store
            .apply(
                vec![StateChange::Release {
                    endpoint: Arc::from("e"),
                    key: "d".into(),
                    delivery: id(5),
                }]
                .into(),
            )
            .await
            .unwrap();
        let blocked = store
            .ordering_keys("e", KeyListing::Blocked, None, 10)
            .await
            .unwrap();
        assert!(blocked.keys.is_empty(), "{blocked:?}");
        assert!(store.held_keys().await.unwrap().is_empty());
    }
}
