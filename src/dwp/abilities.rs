//! Effective abilities (dwp.md §6, §8; dwp-details.md §4, §5.8).

/// The closed set of host abilities, in canonical order.
pub const ABILITIES: [&str; 8] = [
    "stop_agent",
    "meter_spend",
    "meter_tokens",
    "meter_wall_clock",
    "cancel_children",
    "model_routing",
    "subagents",
    "telemetry",
];
