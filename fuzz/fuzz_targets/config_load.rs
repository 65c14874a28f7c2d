//! The YAML config loader on arbitrary text: `hookgate config check`, a reload and the start
//! all feed it files written by people. It must answer with a config or with problems (each
//! naming the file and a reason), never panic, overflow the stack or hang.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    // No environment: every `${NAME}` is unset (or takes its `:-fallback`).
    match hookgate::config::load_str(text, "fuzz.yaml", None, |_| None) {
        Ok(config) => {
            for endpoint in config.file_endpoints.values() {
                for topic in &endpoint.topics {
                    let _ = config.policy_for(endpoint, topic);
                }
            }
        }
        Err(error) => {
            assert!(!error.problems.is_empty(), "an error without problems");
            for problem in &error.problems {
                assert_eq!(problem.file, "fuzz.yaml");
                assert!(!problem.reason.is_empty(), "a problem without a reason: {problem:?}");
            }
            let _ = error.to_string();
        }
    }
});
