//! Addon descriptors (`addon-descriptor/v1`) and read-only detection (docs/dwp-spec.md,
//! "Addon descriptors and detection").
//!
//! The eight descriptors ship inside the binary (from `templates/addons/<key>/addon.json`).
//! `DWP_ADDONS_DIR` may name a directory holding `<key>/addon.json` files to use instead (packs
//! that ship newer descriptors, and tests); the registry keys stay the eight keys `dwp` ships.

mod detect;
mod validate;

use std::path::PathBuf;

use serde_json::Value;

pub use detect::{DetectEnv, Detection, detect, detect_timeout};
pub use validate::{Descriptor, DetectSpec, InterfaceFrom, descriptor_errors, parse_descriptor};

/// The registry keys: the addon directories `dwp` ships, sorted by code point (defined with the
/// config reader, which refuses any other key in a file's `addons`).
pub use super::config::ADDON_KEYS as KEYS;

/// The `schema` every descriptor carries.
pub const DESCRIPTOR_SCHEMA: &str = "https://deepworkplan.com/schema/addon-descriptor/v1.json";

/// The environment variable naming a directory of descriptors to use instead of the shipped ones.
pub const ADDONS_DIR_ENV: &str = "DWP_ADDONS_DIR";

const SHIPPED: [(&str, &str); 8] = [
    (
        "agentkit",
        include_str!("../../../templates/addons/agentkit/addon.json"),
    ),
    (
        "ai-diff-reviewer",
        include_str!("../../../templates/addons/ai-diff-reviewer/addon.json"),
    ),
    (
        "dailybot",
        include_str!("../../../templates/addons/dailybot/addon.json"),
    ),
    (
        "dependency-upgrade",
        include_str!("../../../templates/addons/dependency-upgrade/addon.json"),
    ),
    (
        "design-system",
        include_str!("../../../templates/addons/design-system/addon.json"),
    ),
    (
        "devcontainer",
        include_str!("../../../templates/addons/devcontainer/addon.json"),
    ),
    (
        "herdr",
        include_str!("../../../templates/addons/herdr/addon.json"),
    ),
    (
        "vim",
        include_str!("../../../templates/addons/vim/addon.json"),
    ),
];

/// Where the descriptor of `key` comes from, for messages.
pub fn descriptor_location(key: &str) -> String {
    match std::env::var_os(ADDONS_DIR_ENV).filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir)
            .join(key)
            .join("addon.json")
            .display()
            .to_string(),
        None => format!("<built into dwp>/addons/{key}/addon.json"),
    }
}

/// A descriptor that could not be read or parsed: where it was looked for, and why. Its
/// `Display`, `<location> unreadable (<reason>)`, is the single error [`load`] reports for it.
#[derive(Debug)]
struct Unreadable {
    location: String,
    reason: String,
}

impl Unreadable {
    fn new(location: impl std::fmt::Display, reason: impl Into<String>) -> Unreadable {
        Unreadable {
            location: location.to_string(),
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} unreadable ({})", self.location, self.reason)
    }
}

/// Reads the raw descriptor of `key`: the shipped one, or `$DWP_ADDONS_DIR/<key>/addon.json`.
fn load_raw(key: &str) -> Result<Value, Unreadable> {
    let text = match std::env::var_os(ADDONS_DIR_ENV).filter(|d| !d.is_empty()) {
        Some(dir) => {
            let path = PathBuf::from(dir).join(key).join("addon.json");
            let bytes =
                std::fs::read(&path).map_err(|e| Unreadable::new(path.display(), e.to_string()))?;
            String::from_utf8(bytes)
                .map_err(|e| Unreadable::new(path.display(), format!("not UTF-8: {e}")))?
        }
        None => match SHIPPED.iter().find(|(k, _)| *k == key) {
            Some((_, text)) => text.to_string(),
            None => return Err(Unreadable::new(descriptor_location(key), "no such addon")),
        },
    };
    serde_json::from_str(&text)
        .map_err(|e| Unreadable::new(descriptor_location(key), e.to_string()))
}

/// Loads and validates the descriptor of `key`: the typed descriptor, or every error in order.
pub fn load(key: &str) -> Result<Descriptor, Vec<String>> {
    let raw = load_raw(key).map_err(|e| vec![e.to_string()])?;
    parse_descriptor(&raw, Some(key))
}

/// What loading and detecting one addon gave: the valid descriptor and its detection, or every
/// descriptor error.
pub type Outcome = Result<(Descriptor, Detection), Vec<String>>;

/// Loads and detects each of `keys`, in parallel threads (a detect command waits on a process, so
/// the whole costs about as much as the slowest one). Results come back in the order of `keys`.
pub fn detect_all(keys: &[String], env: &DetectEnv) -> Vec<(String, Outcome)> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = keys
            .iter()
            .map(|key| {
                scope.spawn(move || {
                    let outcome = load(key).map(|desc| {
                        let detection = detect(&desc, env);
                        (desc, detection)
                    });
                    (key.clone(), outcome)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("detection thread panicked"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_descriptors_are_valid_and_match_the_facts() {
        for (key, text) in SHIPPED {
            let raw: Value = serde_json::from_str(text).unwrap();
            let errors = descriptor_errors(&raw, Some(key));
            assert!(errors.is_empty(), "{key}: {errors:?}");
        }
        assert_eq!(SHIPPED.map(|(k, _)| k), KEYS);
        let agentkit =
            parse_descriptor(&serde_json::from_str(SHIPPED[0].1).unwrap(), None).unwrap();
        assert_eq!(
            agentkit.provides,
            vec!["subagents", "cancel_children", "model_routing"]
        );
        assert_eq!(agentkit.interface_pin, Some(1));
    }
}
