//! The budget for events held in memory by waiting deliveries.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::Event;

/// Bytes of events held in memory by waiting deliveries up to which a new or retried delivery
/// keeps its event. Past it, an item keeps only its id and reads its event back when due, as
/// after a restart: a backlog of a million then costs about 100 bytes per delivery instead of
/// the whole event (BENCHMARKS.md, "Fixes made": a third of the RSS with 1 000 000
/// pending), while a gateway that keeps up never reads an event back. Events, not
/// deliveries, are counted: the deliveries of a fan-out share one event, and counting each of
/// them made a burst of fan-out deliveries re-read the same event once per endpoint.
const KEEP_EVENT_BYTES_UP_TO: u64 = 32 * 1024 * 1024;

/// An event held in memory by waiting deliveries, counted against [`KEEP_EVENT_BYTES_UP_TO`]
/// once however many deliveries share it, until the last of them lets go.
#[derive(Debug)]
pub(crate) struct HeldEvent {
    pub(super) event: Arc<Event>,
    bytes: u64,
    held_bytes: Arc<AtomicU64>,
}

impl HeldEvent {
    /// Holds `event` if the budget has room; `None` when the delivery should keep only its id.
    pub(super) fn hold(event: Arc<Event>, held_bytes: &Arc<AtomicU64>) -> Option<Arc<HeldEvent>> {
        if held_bytes.load(Ordering::Relaxed) >= KEEP_EVENT_BYTES_UP_TO {
            return None;
        }
        let bytes = footprint(&event);
        held_bytes.fetch_add(bytes, Ordering::Relaxed);
        Some(Arc::new(HeldEvent {
            event,
            bytes,
            held_bytes: held_bytes.clone(),
        }))
    }
}

impl Drop for HeldEvent {
    fn drop(&mut self) {
        self.held_bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Holds the events of deliveries that arrive together: the deliveries of one event (a
/// fan-out) come one after another and share one hold.
pub(super) struct RunHolder {
    held_bytes: Arc<AtomicU64>,
    last: Option<(Arc<Event>, Option<Arc<HeldEvent>>)>,
}

impl RunHolder {
    pub(super) fn new(held_bytes: &Arc<AtomicU64>) -> RunHolder {
        RunHolder {
            held_bytes: held_bytes.clone(),
            last: None,
        }
    }

    /// The hold for `event`: the previous delivery's when it carried the same event.
    pub(super) fn hold(&mut self, event: &Arc<Event>) -> Option<Arc<HeldEvent>> {
        if let Some((last, held)) = &self.last
            && Arc::ptr_eq(last, event)
        {
            return held.clone();
        }
        let held = HeldEvent::hold(event.clone(), &self.held_bytes);
        self.last = Some((event.clone(), held.clone()));
        held
    }
}

/// About what an event costs in memory: the struct, its strings and its payload.
fn footprint(event: &Event) -> u64 {
    let strings = event.id.len()
        + event.topic.len()
        + event.event_type.len()
        + event.content_type.len()
        + event.ordering_key.as_ref().map_or(0, String::len);
    (std::mem::size_of::<Event>() + strings + event.payload.len()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(payload_bytes: usize) -> Arc<Event> {
        Arc::new(Event {
            id: "evt_1".into(),
            topic: "orders".into(),
            event_type: "order.created".into(),
            content_type: "application/json".into(),
            payload: bytes::Bytes::from(vec![b'x'; payload_bytes]),
            ordering_key: None,
            received_at: crate::model::Timestamp::from_millis(0),
            tenant: None,
            trace: None,
            labels: Default::default(),
        })
    }

    #[test]
    fn a_shared_event_is_counted_once_and_released_by_its_last_holder() {
        let held_bytes = Arc::new(AtomicU64::new(0));
        let e = event(1000);
        let held = HeldEvent::hold(e.clone(), &held_bytes).expect("room in the budget");
        let one_event = held_bytes.load(Ordering::Relaxed);
        assert_eq!(one_event, footprint(&e));
        assert!(one_event >= 1000);

        // Ten deliveries of a fan-out share the holder: still one event's worth.
        let siblings: Vec<_> = (0..10).map(|_| held.clone()).collect();
        drop(held);
        assert_eq!(held_bytes.load(Ordering::Relaxed), one_event);
        drop(siblings);
        assert_eq!(held_bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn past_the_budget_a_delivery_keeps_only_its_id() {
        let held_bytes = Arc::new(AtomicU64::new(0));
        let big = event(KEEP_EVENT_BYTES_UP_TO as usize);
        let first = HeldEvent::hold(big, &held_bytes).expect("an empty budget takes one event");
        assert!(HeldEvent::hold(event(10), &held_bytes).is_none());
        drop(first);
        assert!(HeldEvent::hold(event(10), &held_bytes).is_some());
    }
}
