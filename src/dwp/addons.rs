//! Addon descriptors (`addon-descriptor/v1`) and read-only detection (dwp-details.md §7).

/// The registry keys: the addon directories `dwp` ships, sorted by code point.
pub const KEYS: [&str; 8] = [
    "agentkit",
    "ai-diff-reviewer",
    "dailybot",
    "dependency-upgrade",
    "design-system",
    "devcontainer",
    "herdr",
    "vim",
];
