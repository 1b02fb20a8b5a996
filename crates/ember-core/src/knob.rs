//! Measurement knobs: environment variables read once per process.
//!
//! The launch code consults variables such as `EMBER_CLIFFORD_ROWS` on every call; `std::env::var`
//! takes the environment lock, scans the environment and allocates each time. ember never sets
//! variables itself, so the first value seen is the value for the process.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// The value of environment variable `name` (`None` when unset or not UTF-8), read on first use and
/// remembered.
pub fn knob(name: &'static str) -> Option<&'static str> {
    static SEEN: OnceLock<Mutex<HashMap<&'static str, Option<&'static str>>>> = OnceLock::new();
    let mut seen = SEEN.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap();
    *seen.entry(name).or_insert_with(|| std::env::var(name).ok().map(|v| &*Box::leak(v.into_boxed_str())))
}

#[cfg(test)]
mod tests {
    use super::knob;

    #[test]
    fn a_knob_is_the_environment_value_and_stays() {
        // PATH is set in every test environment; a made-up name is not.
        let path = std::env::var("PATH").ok();
        assert_eq!(knob("PATH"), path.as_deref());
        assert_eq!(knob("PATH"), path.as_deref());
        assert_eq!(knob("EMBER_KNOB_TEST_SURELY_UNSET"), None);
    }
}
