//! The one redaction step for text that the runtime keeps or shows: tool outputs (before they
//! are capped), the model's text and tool-call arguments, the task, every message and journal
//! record before it is durable, run results, error messages and hints, provider failure excerpts
//! (a `command` provider's stderr, an HTTP error body), and every line written to stdout or
//! stderr.
//!
//! It replaces with [`MARK`]:
//! - the exact value of every model-provider key variable (the well-known names, and every
//!   `api_key_env` of the loaded model config) and of every variable the `exec` environment
//!   filter removes as a credential — as kxen-agent started with them ([`super::snapshot`]).
//!   Variables the filter removes because they name a location (`SSH_AUTH_SOCK`, `KUBECONFIG`,
//!   `XDG_CONFIG_HOME`, …) are not secrets and stay readable in messages. Values shorter than
//!   [`MIN_KEY_LEN`] (provider keys) or [`MIN_SECRET_LEN`] (other variables) are left alone:
//!   they would match ordinary words (`AWS_PROFILE=prod`) and are no real secret anyway;
//! - the user info of any URL (`https://user:token@host` → `https://[redacted]@host`) and of a
//!   scheme-less `user:pass@host`.
//!
//! Callers run it on the whole text *before* cutting it to an excerpt: a secret straddling the
//! cut would otherwise survive without its tail. Redacting is idempotent.

use std::ffi::OsString;
use std::sync::{Arc, Mutex};

/// What a secret is replaced with.
pub const MARK: &str = "[redacted]";
/// The shortest provider key value that is redacted.
pub const MIN_KEY_LEN: usize = 4;
/// The shortest value of another credential variable that is redacted.
pub const MIN_SECRET_LEN: usize = 8;

/// `text` with every secret (module docs) replaced by [`MARK`].
pub fn redact(text: &str) -> String {
    redact_with(text, &secrets())
}

/// The secret values of this process, longest first. Once the environment snapshot is fixed
/// ([`super::snapshot::init`]) they change only when a provider key name is registered, so they
/// are computed once per registration instead of once per redaction: every record, message and
/// output line is redacted, and scanning the whole environment each time was most of a tool
/// call's CPU (benches/tool_journal.rs).
fn secrets() -> Arc<Vec<String>> {
    static CACHE: Mutex<Option<(u64, Arc<Vec<String>>)>> = Mutex::new(None);
    if !super::snapshot::is_fixed() {
        // Before the snapshot (library use, tests) the live environment may still change.
        return Arc::new(with_registered(secret_values(super::snapshot::vars())));
    }
    let generation = super::rules::registrations() + registered_values().len() as u64;
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((seen, values)) = cache.as_ref()
        && *seen == generation
    {
        return Arc::clone(values);
    }
    let values = Arc::new(with_registered(secret_values(super::snapshot::vars())));
    *cache = Some((generation, Arc::clone(&values)));
    values
}

/// Secret values that are not in the environment, registered while the process runs (an OAuth
/// token read from the MCP token store or issued by an authorization server).
fn registered_values() -> std::sync::MutexGuard<'static, Vec<String>> {
    static VALUES: Mutex<Vec<String>> = Mutex::new(Vec::new());
    VALUES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Adds `value` to what every later redaction replaces (values shorter than
/// [`MIN_SECRET_LEN`] are ignored, as for environment secrets). Only ever grows: a token
/// replaced by a refresh stays a secret.
pub fn register_value(value: &str) {
    if value.len() < MIN_SECRET_LEN {
        return;
    }
    let mut values = registered_values();
    if !values.iter().any(|v| v == value) {
        values.push(value.to_string());
    }
}

/// `values` and the [registered](register_value) ones, longest first.
fn with_registered(mut values: Vec<String>) -> Vec<String> {
    values.extend(registered_values().iter().cloned());
    values.sort_by_key(|s| std::cmp::Reverse(s.len()));
    values.dedup();
    values
}

/// Redacts `text` in place (no copy when it holds nothing to redact).
pub fn redact_in_place(text: &mut String) {
    let clean = redact(text);
    if clean != *text {
        *text = clean;
    }
}

/// [`redact`] with the secret values given.
fn redact_with(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), MARK);
        }
    }
    redact_userinfo(&out)
}

/// The values to redact from `vars`, longest first (so a secret containing another goes whole).
fn secret_values(vars: Vec<(OsString, OsString)>) -> Vec<String> {
    let mut out: Vec<String> = vars
        .into_iter()
        .filter_map(|(name, value)| {
            let name = name.to_string_lossy();
            let min = if super::rules::is_provider_key_env(&name) {
                MIN_KEY_LEN
            } else {
                MIN_SECRET_LEN
            };
            let keep = value.len() >= min && super::rules::secret_value(&name, &value);
            keep.then(|| value.to_string_lossy().into_owned())
        })
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// Redacts every string (and object key) inside `value` in place, iteratively: tool-call
/// arguments come from the model and may nest deeper than a recursion would survive.
pub fn redact_json(value: &mut serde_json::Value) {
    use serde_json::Value;
    let secrets = secrets();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => {
                let clean = redact_with(s, &secrets);
                if clean != *s {
                    *s = clean;
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(map) => {
                if map.keys().any(|k| redact_with(k, &secrets) != *k) {
                    // Rebuilt in order: a key holding a secret keeps its place.
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(k, inner)| (redact_with(&k, &secrets), inner))
                        .collect();
                }
                stack.extend(map.values_mut());
            }
            _ => {}
        }
    }
}

/// Characters that end the token a user info belongs to.
fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || "/,;=\"'`<>()[]{}|".contains(c)
}

/// Replaces the user info of URLs (`scheme://userinfo@host`) and of scheme-less
/// `user:pass@host` authorities.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut search = 0;
    while let Some(found) = text[search..].find('@') {
        let at = search + found;
        search = at + 1;
        let start = text[copied..at]
            .rfind(is_delimiter)
            .map_or(copied, |i| copied + i + 1);
        let userinfo = &text[start..at];
        let host_follows = text[at + 1..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '[');
        let after_scheme = text[..start].ends_with("://");
        let with_password = userinfo
            .split_once(':')
            .is_some_and(|(user, pass)| !user.is_empty() && !pass.is_empty());
        if userinfo.is_empty() || userinfo == MARK || !host_follows {
            continue;
        }
        if !(after_scheme || with_password) {
            continue;
        }
        // The user info runs to the last `@` of the token (a password may hold `@`).
        let token_end = text[at..].find(is_delimiter).map_or(text.len(), |i| at + i);
        let last_at = text[at..token_end].rfind('@').map_or(at, |i| at + i);
        out.push_str(&text[copied..start]);
        out.push_str(MARK);
        copied = last_at;
        search = last_at + 1;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(n, v)| (n.into(), v.into())).collect()
    }

    #[test]
    fn secret_values_are_the_credentials_not_locations_or_short_words() {
        let secrets = secret_values(vars(&[
            ("OPENAI_API_KEY", "sk-abcd"),
            ("GITHUB_TOKEN", "ghp_0123456789"),
            ("SSHPASS", "hunter2hunter2"),
            ("HTTPS_PROXY", "user:pass@proxy:3128"),
            ("AWS_PROFILE", "production-account"),
            ("XDG_CONFIG_HOME", "/home/u/.config"),
            ("NPM_TOKEN", "short"),
            ("PATH", "/usr/local/bin:/usr/bin"),
        ]));
        assert_eq!(
            secrets,
            [
                "user:pass@proxy:3128",
                "ghp_0123456789",
                "hunter2hunter2",
                "sk-abcd"
            ]
        );
    }

    #[test]
    fn json_strings_and_keys_are_redacted_in_place_keeping_order() {
        let mut v = serde_json::json!({
            "a": "https://u:p@host/x",
            "https://k:v@h": [1, {"z": "mail a@b.c"}],
            "b": 2
        });
        redact_json(&mut v);
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"a":"https://[redacted]@host/x","https://[redacted]@h":[1,{"z":"mail a@b.c"}],"b":2}"#
        );
    }

    #[test]
    fn values_and_userinfo_are_replaced() {
        let secrets = vec!["sk-canary-0123456789".to_string()];
        assert_eq!(
            redact_with("key sk-canary-0123456789 in the middle", &secrets),
            "key [redacted] in the middle"
        );
        for (text, want) in [
            (
                "POST https://bob:hunter2@api.example.com/v1 failed",
                "POST https://[redacted]@api.example.com/v1 failed",
            ),
            (
                "ssh://ghp_token@github.com/x",
                "ssh://[redacted]@github.com/x",
            ),
            (
                "proxy user:pass@proxy:3128 refused",
                "proxy [redacted]@proxy:3128 refused",
            ),
            ("url=http://u:p@ss@host/x", "url=http://[redacted]@host/x"),
            ("mail alice@example.com", "mail alice@example.com"),
            ("git@github.com:org/repo.git", "git@github.com:org/repo.git"),
            ("rust@sha256:0123", "rust@sha256:0123"),
            ("@scope/pkg", "@scope/pkg"),
        ] {
            assert_eq!(redact_with(text, &[]), want, "{text}");
            assert_eq!(redact_with(want, &[]), want, "idempotent: {want}");
        }
    }
}
