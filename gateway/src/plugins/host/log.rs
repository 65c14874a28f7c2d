//! The `log` import: plugin lines go to the gateway's `tracing` log, tagged with the plugin's
//! name and version, each truncated, at most a fixed number per call.

use std::sync::Arc;

use super::CallState;
use crate::plugins::bindings::log::{Host, Level};

/// Longest log line a plugin may write, in bytes; the rest is cut (at a char boundary) and
/// marked with `…`, so one call cannot flood the log with one huge line.
pub(crate) const LOG_LINE_MAX_BYTES: usize = 1024;

/// A call's log budget and the tags its lines carry.
pub(crate) struct CallLog {
    plugin: Arc<str>,
    version: Arc<str>,
    lines_per_call: u32,
    lines_left: u32,
    /// Lines dropped because the budget ran out; reported once when the call ends.
    dropped_lines: u32,
}

impl CallLog {
    pub(crate) fn new(plugin: Arc<str>, version: Arc<str>, lines_per_call: u32) -> Self {
        CallLog {
            plugin,
            version,
            lines_per_call,
            lines_left: lines_per_call,
            dropped_lines: 0,
        }
    }

    /// A reused instance's next call gets the whole budget again.
    pub(crate) fn begin_call(&mut self) {
        self.lines_left = self.lines_per_call;
        self.dropped_lines = 0;
    }

    /// Says, once, how many lines the call that just ended wrote over its budget.
    pub(crate) fn end_call(&mut self) {
        if self.dropped_lines > 0 {
            tracing::warn!(
                plugin = %self.plugin,
                version = %self.version,
                dropped_lines = self.dropped_lines,
                "plugin wrote more log lines than one call may; the rest were dropped"
            );
            self.dropped_lines = 0;
        }
    }
}

/// Dropped with the store: a call that did not end normally (a trap, a deadline, a cancelled
/// call) is reported here, since its instance is dropped instead of ending the call.
impl Drop for CallLog {
    fn drop(&mut self) {
        self.end_call();
    }
}

/// `msg` cut to at most [`LOG_LINE_MAX_BYTES`] bytes on a char boundary.
pub(crate) fn truncate_line(msg: &str) -> std::borrow::Cow<'_, str> {
    if msg.len() <= LOG_LINE_MAX_BYTES {
        return std::borrow::Cow::Borrowed(msg);
    }
    let mut end = LOG_LINE_MAX_BYTES;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}…", &msg[..end]))
}

impl Host for CallState {
    fn log(&mut self, level: Level, msg: String) -> wasmtime::Result<()> {
        let log = &mut self.log;
        if log.lines_left == 0 {
            log.dropped_lines = log.dropped_lines.saturating_add(1);
            return Ok(());
        }
        log.lines_left -= 1;
        let line = truncate_line(&msg);
        let (plugin, version) = (&*log.plugin, &*log.version);
        match level {
            Level::Debug => tracing::debug!(plugin, version, "{line}"),
            Level::Info => tracing::info!(plugin, version, "{line}"),
            Level::Warn => tracing::warn!(plugin, version, "{line}"),
            Level::Error => tracing::error!(plugin, version, "{line}"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::plugins::PluginLimits;

    #[test]
    fn lines_over_the_per_call_budget_are_counted_and_dropped() {
        let limits = PluginLimits {
            log_lines_per_call: 2,
            ..PluginLimits::default()
        };
        let mut state = CallState::new(
            Arc::from("chatty"),
            Arc::from("0123456789ab"),
            Arc::new(BTreeMap::new()),
            &limits,
            Arc::new(tokio::sync::Semaphore::new(1)),
        );
        state.begin_call(Vec::new());
        for n in 0..5 {
            Host::log(&mut state, Level::Info, format!("line {n}")).unwrap();
        }
        assert_eq!(state.log.lines_left, 0);
        assert_eq!(state.log.dropped_lines, 3);
        state.end_call();
        assert_eq!(state.log.dropped_lines, 0);

        // The next call of a reused instance has the whole budget again.
        state.begin_call(Vec::new());
        assert_eq!(state.log.lines_left, 2);
        Host::log(&mut state, Level::Info, "again".to_owned()).unwrap();
        assert_eq!(state.log.lines_left, 1);
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let long = "é".repeat(LOG_LINE_MAX_BYTES);
        let cut = truncate_line(&long);
        assert!(cut.len() <= LOG_LINE_MAX_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(truncate_line("short"), "short");
    }
}
