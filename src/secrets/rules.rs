//! The environment of `exec` children: the runtime's own, minus credentials.
//!
//! Removed unless named in `passEnv`: every variable whose name looks like a credential (see
//! [`looks_sensitive`]), agent sockets, CI files that accept workflow commands, cloud credential
//! and config locations, loader and shell start-up hooks (`LD_PRELOAD`, `BASH_ENV`), and any
//! variable whose value looks like one: user info in a URL or in a scheme-less authority
//! (`https://user:token@host`, `user:pass@proxy:3128`), a connection-string secret
//! (`AccountKey=`, `password=`, …) or a private key (`-----BEGIN … PRIVATE KEY-----`). The rules
//! err on the side of removing: a harmless look-alike a rule would catch is kept only when it is
//! listed in [`NOT_SENSITIVE`] (each entry has a test), and value rules apply to it all the same.
//! Model-provider keys are removed even when listed in `passEnv`:
//! the well-known names below plus every `api_key_env` of the loaded model config (registered via
//! [`register_provider_key_env`]). This is not a sandbox — files stay readable — but no secret is
//! handed to the model's commands for free.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::sync::Mutex;

/// Model-provider key variables that never reach a tool, even when listed in `passEnv`.
const PROVIDER_KEYS: &[&str] = &[
    "OPENAI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "OPENROUTER_API_KEY",
    "DEEPSEEK_API_KEY",
    "TOGETHER_API_KEY",
    "XAI_API_KEY",
    "COHERE_API_KEY",
    "FIREWORKS_API_KEY",
    "PERPLEXITY_API_KEY",
    "CEREBRAS_API_KEY",
    "DASHSCOPE_API_KEY",
    "MOONSHOT_API_KEY",
    "OLLAMA_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
];

/// Exact names whose values are secrets although the names do not say so.
const SECRET_NAMES: &[&str] = &[
    // Password-manager sessions and the password `sshpass -e` reads.
    "SSHPASS",
    "BW_SESSION",
    "DATABASE_URL",
];

/// Exact names removed because they lead to a credential (a socket, a file, a profile) or run
/// code in every child; their values are locations, not secrets, so they are not redacted from
/// messages ([`secret_value`]).
const LOCATION_NAMES: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "SSH_ASKPASS",
    "GIT_ASKPASS",
    "GPG_AGENT_INFO",
    "GNUPGHOME",
    "NETRC",
    // Kerberos credential caches and key tables.
    "KRB5CCNAME",
    "KRB5_KTNAME",
    "KRB5_CLIENT_KTNAME",
    // GitHub Actions files that turn writes into workflow commands, and runtime endpoints.
    "GITHUB_ENV",
    "GITHUB_PATH",
    "GITHUB_OUTPUT",
    "GITHUB_STATE",
    "GITHUB_STEP_SUMMARY",
    "ACTIONS_RUNTIME_URL",
    "ACTIONS_CACHE_URL",
    "ACTIONS_RESULTS_URL",
    // Cloud credential and config locations.
    "AWS_CONFIG_FILE",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "CLOUDSDK_CONFIG",
    "AZURE_CONFIG_DIR",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "KUBECONFIG",
    "DOCKER_CONFIG",
    "BOTO_CONFIG",
    "TF_CLI_CONFIG_FILE",
    "VAULT_CONFIG_PATH",
    // kxen-agent's own MCP token store (crate::mcp::oauth_store): no tool needs to find it.
    "KXEN_TOKEN_DIR",
    // Files a shell or the dynamic loader run or load before the command itself: a way to
    // inject code into every tool child, never needed by a task.
    "BASH_ENV",
    "ENV",
    "LD_PRELOAD",
    "LD_AUDIT",
    // With HOME redirected, an explicit config home would still lead tools to the user's
    // logged-in CLIs (gh, gcloud, …).
    "XDG_CONFIG_HOME",
];

/// Substrings of a variable name (upper-cased) that mark it as a credential.
const SENSITIVE_PARTS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "API_KEY",
    "APIKEY",
    "PRIVATE_KEY",
    "ACCESS_KEY",
    "SESSION_KEY",
    "SIGNING_KEY",
    "ENCRYPTION_KEY",
    "PRIVKEY",
    "PASSFILE",
    "JWT",
    "AUTHKEY",
    "KEYFILE",
    "CONNECTION_STRING",
    "CONNSTR",
];

/// Name prefixes (upper-cased) that mark a credential: 1Password CLI sessions are
/// `OP_SESSION_<account>`; `GIT_CONFIG_*` can name a credential helper or a command git runs.
const SENSITIVE_PREFIXES: &[&str] = &["OP_SESSION_", "GIT_CONFIG_"];

/// Substrings of a value (lower-cased) that mark a connection string carrying a secret
/// (Azure storage and service-bus strings, ODBC/ADO.NET strings).
const SECRET_VALUE_PARTS: &[&str] = &[
    "accountkey=",
    "sharedaccesskey=",
    "sharedaccesssignature=",
    "password=",
    "passwd=",
];

/// `_`-separated name words that mark a credential (`NPM_AUTH`, `GH_PAT`, `OPENAI_KEY`) without
/// catching `GIT_AUTHOR_NAME` or `KEYMAP`.
const SENSITIVE_WORDS: &[&str] = &[
    "AUTH", "PAT", "KEY", "KEYS", "DSN", "COOKIE", "PASS", "PWD", "CRED", "CREDS",
];

/// Names a name rule above would remove but that are not secrets (the allow-list of harmless
/// look-alikes; each has a test). Value rules still apply to them.
pub(crate) const NOT_SENSITIVE: &[&str] = &[
    // The shell's working directory (word `PWD`).
    "PWD",
    // Hugging Face tokenizers' thread switch (part `TOKEN`).
    "TOKENIZERS_PARALLELISM",
];

static REGISTERED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
/// Bumped by every registration, so what was derived from the registered set can be recomputed.
static REGISTRATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many provider key names were registered so far (see [`register_provider_key_env`]).
pub(crate) fn registrations() -> u64 {
    REGISTRATIONS.load(std::sync::atomic::Ordering::SeqCst)
}

/// Marks `name` as a model-provider key variable: it never reaches a tool, even via `passEnv`.
/// The model config registers every `api_key_env` it loads.
pub fn register_provider_key_env(name: &str) {
    REGISTERED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_string());
    REGISTRATIONS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Whether `name` is a model-provider key: well known (here or in the policy's list, any case)
/// or registered by the loaded model config.
pub fn is_provider_key_env(name: &str) -> bool {
    PROVIDER_KEYS.contains(&name.to_ascii_uppercase().as_str())
        || super::names::is_provider_credential(name)
        || REGISTERED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
}

/// Whether a variable is removed from tool environments unless named in `passEnv`.
pub(crate) fn looks_sensitive(name: &str, value: &OsStr) -> bool {
    sensitive_name(name) || sensitive_value(&value.to_string_lossy())
}

/// Whether the value of `name` is a secret to redact from every message (see
/// [`super::redact`]): a model-provider key, or a variable the filter removes for any reason but
/// being a location ([`LOCATION_NAMES`]).
pub(crate) fn secret_value(name: &str, value: &OsStr) -> bool {
    is_provider_key_env(name)
        || (looks_sensitive(name, value)
            && !LOCATION_NAMES.contains(&name.to_ascii_uppercase().as_str()))
}

/// The name rules (the allow-list [`NOT_SENSITIVE`] exempts a name from these only).
fn sensitive_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if NOT_SENSITIVE.contains(&upper.as_str()) {
        return false;
    }
    SECRET_NAMES.contains(&upper.as_str())
        || LOCATION_NAMES.contains(&upper.as_str())
        || SENSITIVE_PARTS.iter().any(|p| upper.contains(p))
        || upper.split('_').any(|w| SENSITIVE_WORDS.contains(&w))
        || SENSITIVE_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// The value rules: user info, connection-string secrets, private keys, and values shaped like
/// a known key format ([`key_shaped`]) whatever the variable is called (`KXEN_CANARY=sk-…`).
pub(crate) fn sensitive_value(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    url_with_userinfo(value)
        || authority_with_password(value)
        || SECRET_VALUE_PARTS.iter().any(|p| lower.contains(p))
        || private_key_block(value)
        || key_shaped(value)
}

/// Known key formats, each as a prefix at the start of a token (a run of `[A-Za-z0-9_-]`) and a
/// minimum body, plus two URL shapes. The bodies are long enough, and (for `sk-`) must hold a
/// digit, so ordinary words are not caught: `sk-learn`, `ghp_test`, `pypi-server`, `AKIAB` and
/// `xoxo` stay plain values (tests below); a false positive only hides a variable from a tool
/// and a value from a message, a miss leaks a key.
///
/// - `sk-…` (OpenAI; `sk-ant-…`, `sk-proj-…` included): at least 8 more characters, a digit
///   among them;
/// - GitHub `ghp_ gho_ ghu_ ghs_ ghr_` (20+), `github_pat_` (20+);
/// - Slack `xoxb- xoxp- xoxa- xoxr- xoxs-` (10+) and webhook URLs (`hooks.slack.com/services/`);
/// - AWS access key ids `AKIA`/`ASIA` + exactly 16 of `[A-Z0-9]`;
/// - GitLab `glpat-` (20+), Google `AIza` (35), PyPI `pypi-` (16+);
/// - a URL query parameter `sig=` or `token=` with a value (signed URLs, SAS tokens).
pub(crate) fn key_shaped(value: &str) -> bool {
    const PREFIXES: &[(&str, usize)] = &[
        ("ghp_", 20),
        ("gho_", 20),
        ("ghu_", 20),
        ("ghs_", 20),
        ("ghr_", 20),
        ("github_pat_", 20),
        ("xoxb-", 10),
        ("xoxp-", 10),
        ("xoxa-", 10),
        ("xoxr-", 10),
        ("xoxs-", 10),
        ("glpat-", 20),
        ("AIza", 35),
        ("pypi-", 16),
    ];
    let token_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let tokens = value
        .split(|c: char| !token_char(c))
        .filter(|t| !t.is_empty());
    for token in tokens {
        if let Some(body) = token.strip_prefix("sk-")
            && body.len() >= 8
            && body.bytes().any(|b| b.is_ascii_digit())
        {
            return true;
        }
        if PREFIXES
            .iter()
            .any(|(p, min)| token.strip_prefix(p).is_some_and(|body| body.len() >= *min))
        {
            return true;
        }
        if (token.starts_with("AKIA") || token.starts_with("ASIA"))
            && token.len() == 20
            && token
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        {
            return true;
        }
    }
    if value.contains("hooks.slack.com/services/") {
        return true;
    }
    ["?sig=", "&sig=", "?token=", "&token="].iter().any(|p| {
        value.match_indices(p).any(|(i, m)| {
            value[i + m.len()..]
                .chars()
                .next()
                .is_some_and(|c| c != '&' && c != '#' && !c.is_whitespace())
        })
    })
}

/// `scheme://user[:pass]@host…` anywhere in the value.
fn url_with_userinfo(value: &str) -> bool {
    value.match_indices("://").any(|(i, _)| {
        let rest = &value[i + 3..];
        let authority = rest
            .split(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .next()
            .unwrap_or("");
        authority.contains('@')
    })
}

/// `user:pass@host` without a scheme (how proxies are often configured: `user:pass@proxy:3128`).
/// Only a `:` before the `@` counts, so `git@github.com:org/repo`, `alice@example.com` and
/// `image@sha256:…` are not caught.
fn authority_with_password(value: &str) -> bool {
    value.match_indices('@').any(|(at, _)| {
        let before = &value[..at];
        let start = before
            .rfind(|c: char| c.is_whitespace() || "/,;=\"'<>()[]{}".contains(c))
            .map_or(0, |i| i + 1);
        let userinfo = &before[start..];
        let host_follows = value[at + 1..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '[');
        host_follows
            && userinfo
                .split_once(':')
                .is_some_and(|(user, pass)| !user.is_empty() && !pass.is_empty())
    })
}

/// A PEM private key (`-----BEGIN RSA PRIVATE KEY-----`, `… OPENSSH PRIVATE KEY`, `… PGP PRIVATE
/// KEY BLOCK`); certificates and public keys are not secrets.
fn private_key_block(value: &str) -> bool {
    value.match_indices("-----BEGIN ").any(|(i, m)| {
        let label = value[i + m.len()..].split("-----").next().unwrap_or("");
        label.contains("PRIVATE KEY")
    })
}

/// The environment for a tool child: `vars` filtered as described in the module docs, with HOME
/// set to `tool_home`. Sorted by name, so it is deterministic.
pub fn child_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    pass_env: &[String],
    tool_home: &std::path::Path,
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    let mut real_home: Option<OsString> = None;
    let mut has_rustup_home = false;
    for (name, value) in vars {
        let n = name.to_string_lossy();
        if n == "HOME" {
            real_home = Some(value);
            continue;
        }
        if n == "RUSTUP_HOME" {
            has_rustup_home = true;
        }
        if is_provider_key_env(&n) {
            continue;
        }
        if looks_sensitive(&n, &value) && !pass_env.iter().any(|p| *p == n) {
            continue;
        }
        out.push((name, value));
    }
    // rustup finds its toolchains through HOME; keep `cargo` working under the redirected HOME.
    // (~/.rustup holds toolchains, no credentials.)
    if !has_rustup_home && let Some(home) = real_home {
        let rustup = std::path::Path::new(&home).join(".rustup");
        if rustup.is_dir() {
            out.push(("RUSTUP_HOME".into(), rustup.into_os_string()));
        }
    }
    out.push(("HOME".into(), tool_home.as_os_str().to_owned()));
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_shaped_values_are_caught_and_ordinary_ones_are_not() {
        for key in [
            "sk-canary-123",
            "sk-ant-api03-abcdefgh12345678",
            "sk-proj-Ab3dEfGh",
            "Bearer sk-abcdef123456",
            "ghp_abcdefghijklmnopqrst0123",
            "github_pat_11ABCDEFG0abcdefghijklmn",
            "xoxb-1234567890-abcdef",
            "AKIAIOSFODNN7EXAMPLE",
            "ASIAIOSFODNN7EXAMPLE",
            "glpat-abcdefghij0123456789",
            "AIzaSyA-abcdefghijklmnopqrstuvwxyz01234",
            "pypi-AgEIcHlwaS5vcmcCJDAw",
            "https://hooks.slack.com/services/T000/B000/XXXX",
            "https://x.blob.core.windows.net/c/f?sv=2020&sig=abc%2Fdef",
            "https://api.example.com/feed?token=abc123",
        ] {
            assert!(key_shaped(key), "{key}");
            assert!(sensitive_value(key), "{key}");
        }
        for plain in [
            "/usr/local/bin:/usr/bin:/bin",
            "sk-learn",
            "sk-learn-intro",
            "risk-assessment-2024",
            "ghp_test",
            "pypi-server",
            "xoxo",
            "AKIAB",
            "AKIAIOSFODNN7EXAMPLEX",
            "en_US.UTF-8",
            "https://example.com/search?q=token",
            "https://example.com/?token=",
            "xterm-256color",
        ] {
            assert!(!key_shaped(plain), "{plain}");
        }
    }

    #[test]
    fn a_key_in_an_innocent_name_is_filtered_out_of_a_tool_env() {
        let got = names(
            &[("KXEN_CANARY", "sk-canary-123"), ("LANG", "en_US.UTF-8")],
            &[],
        );
        assert!(!got.iter().any(|n| n == "KXEN_CANARY"), "{got:?}");
        assert!(got.iter().any(|n| n == "LANG"), "{got:?}");
    }

    fn names(vars: &[(&str, &str)], pass: &[&str]) -> Vec<String> {
        let pass: Vec<String> = pass.iter().map(|s| s.to_string()).collect();
        child_env(
            vars.iter()
                .map(|(n, v)| (OsString::from(n), OsString::from(v))),
            &pass,
            std::path::Path::new("/state/tool-home"),
        )
        .into_iter()
        .map(|(n, _)| n.to_string_lossy().into_owned())
        .collect()
    }

    #[test]
    fn credentials_are_removed_ordinary_vars_kept() {
        let vars = [
            ("PATH", "/usr/bin"),
            ("LANG", "C.UTF-8"),
            ("GIT_AUTHOR_NAME", "A"),
            ("KEYMAP", "us"),
            ("GITHUB_TOKEN", "t"),
            ("NPM_AUTH", "t"),
            ("MY_SECRET_THING", "t"),
            ("DB_PASSWORD", "t"),
            ("STRIPE_KEY", "t"),
            ("GH_PAT", "t"),
            ("AWS_ACCESS_KEY_ID", "t"),
            ("AWS_SECRET_ACCESS_KEY", "t"),
            ("AWS_SESSION_TOKEN", "t"),
            ("AWS_PROFILE", "prod"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/k.json"),
            ("AZURE_CLIENT_SECRET", "t"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
            ("GITHUB_ENV", "/tmp/env"),
            ("UPSTREAM", "https://bob:hunter2@example.com/repo"),
            ("MIRROR", "https://example.com/repo"),
            ("HOME", "/home/u"),
            ("CI_JOB_JWT", "t"),
            ("MYSQL_PWD", "t"),
            ("DB_PASS", "t"),
            ("PRIVKEY", "t"),
            ("CREDS", "t"),
            ("PGPASSFILE", "/p"),
            ("BOTO_CONFIG", "/b"),
            ("TF_CLI_CONFIG_FILE", "/t"),
            ("LD_PRELOAD", "/x.so"),
            ("BASH_ENV", "/x.sh"),
            ("PWD", "/work"),
            ("OLDPWD", "/"),
            ("SSL_CERT_FILE", "/etc/ssl/ca.pem"),
        ];
        assert_eq!(
            names(&vars, &[]),
            [
                "GIT_AUTHOR_NAME",
                "HOME",
                "KEYMAP",
                "LANG",
                "MIRROR",
                "OLDPWD",
                "PATH",
                "PWD",
                "SSL_CERT_FILE"
            ]
        );
    }

    #[test]
    fn pass_env_lets_a_named_secret_through_but_never_a_provider_key() {
        register_provider_key_env("KXEN_TEST_BRIDGE_CRED");
        let vars = [
            ("GITHUB_TOKEN", "t"),
            ("OPENAI_API_KEY", "sk"),
            ("KXEN_TEST_BRIDGE_CRED", "c"),
            ("NPM_TOKEN", "n"),
        ];
        assert_eq!(
            names(
                &vars,
                &["GITHUB_TOKEN", "OPENAI_API_KEY", "KXEN_TEST_BRIDGE_CRED"]
            ),
            ["GITHUB_TOKEN", "HOME"]
        );
        assert!(is_provider_key_env("ANTHROPIC_API_KEY"));
        assert!(is_provider_key_env("openai_api_key"));
        assert!(
            is_provider_key_env("MY_ANTHROPIC_TOKEN"),
            "the policy's provider-word rule"
        );
        assert!(!is_provider_key_env("PATH"));
    }

    /// Each gap found by the attack report of issue 12 item 4, one variable each.
    #[test]
    fn credentials_with_innocent_names_or_in_values_are_removed() {
        let vars = [
            ("SSHPASS", "hunter2"),
            ("TS_AUTHKEY", "tskey-auth-abc"),
            ("TAILSCALE_AUTHKEY", "tskey-auth-abc"),
            ("BW_SESSION", "bwsession"),
            ("OP_SESSION_my_team", "opsession"),
            (
                "AZURE_STORAGE_CONNECTION_STRING",
                "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=Zm9v==",
            ),
            (
                "STORAGE",
                "Endpoint=sb://x/;SharedAccessKeyName=r;SharedAccessKey=abc",
            ),
            ("ODBC", "Driver=x;Server=db;Uid=sa;Password=hunter2"),
            (
                "GOOGLE_CLOUD_KEYFILE_JSON",
                "{\"type\":\"service_account\"}",
            ),
            ("KRB5CCNAME", "FILE:/tmp/krb5cc_0"),
            ("HTTPS_PROXY", "user:pass@proxy:3128"),
            ("ALL_PROXY", "socks5://user@proxy:1080"),
            (
                "DEPLOY",
                "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----",
            ),
            ("SIGNER", "-----BEGIN PGP PRIVATE KEY BLOCK-----"),
            ("PATH", "/usr/bin"),
        ];
        assert_eq!(names(&vars, &[]), ["HOME", "PATH"]);
        // passEnv still lets a named one through.
        assert_eq!(names(&vars[..1], &["SSHPASS"]), ["HOME", "SSHPASS"]);
    }

    /// Values that resemble the value rules but carry no secret are kept.
    #[test]
    fn value_look_alikes_are_kept() {
        for (name, value) in [
            ("EMAIL", "alice@example.com"),
            ("UPSTREAM_SSH", "git@github.com:org/repo.git"),
            ("IMAGE", "rust@sha256:0123abcd"),
            ("PS1", "\\u@\\h:\\w\\$ "),
            ("NPM_SCOPE", "@scope:registry=https://registry.npmjs.org/"),
            (
                "DBUS_SESSION_BUS_ADDRESS",
                "unix:path=/run/user/0/bus,guid=ab",
            ),
            ("NO_PROXY", "localhost,127.0.0.1,.internal"),
            ("HTTP_PROXY", "http://proxy:3128"),
            (
                "CA_BUNDLE",
                "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
            ),
            ("SIGNING_PUB", "-----BEGIN PUBLIC KEY-----"),
            ("HINT", "set password later"),
        ] {
            assert!(
                names(&[(name, value)], &[]).contains(&name.to_string()),
                "{name}={value} must be kept"
            );
        }
    }

    /// Each allow-list entry is caught by a name rule without the list, and kept with it; a
    /// value rule still removes it.
    #[test]
    fn every_allow_listed_look_alike_is_kept_but_not_its_secret_value() {
        for name in NOT_SENSITIVE {
            let upper = name.to_ascii_uppercase();
            let caught_without_list = SENSITIVE_PARTS.iter().any(|p| upper.contains(p))
                || upper.split('_').any(|w| SENSITIVE_WORDS.contains(&w));
            assert!(caught_without_list, "{name} needs no allow-list entry");
            assert!(names(&[(name, "/work")], &[]).contains(&name.to_string()));
            assert_eq!(names(&[(name, "user:pw@host:1")], &[]), ["HOME"]);
        }
        assert_eq!(
            names(&[("TOKENIZERS_PARALLELISM", "false")], &[]),
            ["HOME", "TOKENIZERS_PARALLELISM"]
        );
    }

    #[test]
    fn home_is_the_tool_home() {
        let env = child_env(
            [(OsString::from("HOME"), OsString::from("/home/u"))],
            &[],
            std::path::Path::new("/state/tool-home"),
        );
        assert!(env.contains(&("HOME".into(), "/state/tool-home".into())));
    }
}
