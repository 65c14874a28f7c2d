//! The applications that messages are sent to, kept for a moment: a message's application is
//! found without a store read when the same application had a message less than a second ago.
//! Only message creation reads through it; every other Svix call reads the store.

use std::time::{Duration, Instant};

use quick_cache::sync::Cache;

use crate::store::ApplicationRow;

/// How long a looked-up application answers for its key without a store read. A change made
/// through this node forgets every entry at once; a change made through another node of a
/// cluster (a rename of its uid, a delete) is seen here within this time.
pub(crate) const FRESH_FOR: Duration = Duration::from_secs(1);
/// Applications kept at most: the busiest ones, however many there are.
const ENTRIES: usize = 16_384;

/// Applications by the key a path named them with (`id`, `uid` or tenant).
pub(crate) struct AppCache {
    entries: Cache<String, (Instant, ApplicationRow)>,
}

impl Default for AppCache {
    fn default() -> Self {
        AppCache {
            entries: Cache::new(ENTRIES),
        }
    }
}

impl std::fmt::Debug for AppCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppCache")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl AppCache {
    /// The application of `key` looked up less than [`FRESH_FOR`] before `now`.
    pub(crate) fn get(&self, key: &str, now: Instant) -> Option<ApplicationRow> {
        let (at, row) = self.entries.get(key)?;
        (now.saturating_duration_since(at) < FRESH_FOR).then_some(row)
    }

    /// Keeps `row`, just read from the store at `at`, for `key`.
    pub(crate) fn put(&self, key: &str, row: ApplicationRow, at: Instant) {
        self.entries.insert(key.to_owned(), (at, row));
    }

    /// Forgets every application: one was changed or deleted through this node.
    pub(crate) fn forget_all(&self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    fn app(tenant: &str) -> ApplicationRow {
        ApplicationRow {
            id: format!("app_{tenant}"),
            uid: Some(tenant.to_owned()),
            tenant: tenant.to_owned(),
            name: tenant.to_owned(),
            metadata: "{}".into(),
            rate_limit: None,
            created_at: Timestamp::from_millis(0),
            updated_at: Timestamp::from_millis(0),
        }
    }

    #[test]
    fn an_application_answers_for_its_key_for_a_second_and_until_a_change_here() {
        let cache = AppCache::default();
        let start = Instant::now();
        assert_eq!(cache.get("acme", start), None);
        cache.put("acme", app("acme"), start);
        assert_eq!(
            cache.get("acme", start + Duration::from_millis(999)),
            Some(app("acme"))
        );
        assert_eq!(cache.get("acme", start + FRESH_FOR), None, "stale after a second");
        assert_eq!(
            cache.get("app_acme", start),
            None,
            "only under the key it was read by"
        );
        cache.put("acme", app("acme"), start);
        cache.forget_all();
        assert_eq!(cache.get("acme", start), None, "a change here forgets it at once");
    }
}
