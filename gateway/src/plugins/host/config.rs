//! The `config` import: the plugin config of the binding being served, and nothing else.

use super::CallState;
use crate::plugins::bindings::config::Host;

impl Host for CallState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.config.get(&key).cloned())
    }

    fn keys(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(self.config.keys().cloned().collect())
    }
}
