//! The per-user MCP token store: what `kxen-agent mcp login` and every OAuth authorization
//! leave behind, so the next connect sends a token (refreshed when it expired) instead of
//! asking a person again.
//!
//! Where: `$KXEN_TOKEN_DIR`, else `$XDG_STATE_HOME/kxen-agent-mcp-tokens`, else
//! `~/.local/state/kxen-agent-mcp-tokens`: beside the state dir, never inside it, so a
//! bundle, a snapshot or a copied state dir never carries a token. The directory is 0700;
//! each entry is one file `<hash>.json`, mode 0600 from its creation (the atomic write creates
//! its temp file with that mode before any byte is written), named by the SHA-256 of the
//! server's URL and the client: the configured `client_id`, or `dynamic` for a client
//! kxen-agent registered itself (its registration is in the entry and reused).
//!
//! A file that is not a valid entry, is not a regular file, or is readable or writable by
//! anyone but its owner is refused (exit 4) with a message naming it and
//! `kxen-agent mcp logout NAME`; it is never read as a token. Every token read from the store
//! is added to the redaction set at once ([`crate::redact::register_value`]).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsx;

/// Mode of an entry: its owner's only.
pub const ENTRY_MODE: u32 = 0o600;
/// Mode of the store directory.
pub const DIR_MODE: u32 = 0o700;
/// The variable naming the store directory (tests, several identities on one account).
pub const DIR_VAR: &str = "KXEN_TOKEN_DIR";
/// A token that expires within this many seconds is refreshed before it is sent.
pub const EXPIRY_MARGIN_SECS: i64 = 30;
/// The largest entry read.
const MAX_ENTRY: u64 = 256 * 1024;

/// A client kxen-agent registered itself (RFC 7591): reused for every later authorization of
/// the same server, so the authorization server does not collect one client per login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registration {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_method: Option<String>,
    /// The loopback redirect URI it was registered with (its port is asked for again).
    pub redirect_uri: String,
}

/// One entry: the tokens of one (server, client) and where they came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    /// Always 1.
    pub version: u32,
    /// The server's endpoint (`[mcp.servers.NAME] url`).
    pub server_url: String,
    /// The server's name when the entry was written (for `mcp status`; the key is the URL).
    pub server_name: String,
    /// The authorization server (its issuer URL, or the server's origin for a 2025-03-26 one).
    pub issuer: String,
    /// Where a refresh is sent.
    pub token_endpoint: String,
    /// The token endpoint authentications it takes (`token_endpoint_auth_methods_supported`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub auth_methods: Vec<String>,
    /// The RFC 8707 `resource` the tokens are for (absent for a 2025-03-26 server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The grant that issued the tokens (`authorization_code` or `client_credentials`).
    pub grant: String,
    /// The client registered dynamically (absent: the configured `client_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration: Option<Registration>,
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Unix seconds when the access token expires (absent: the server did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// The scopes granted (space-separated), as the token answer or the request said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// RFC 3339, when the access token was issued.
    pub obtained_at: String,
}

impl Entry {
    /// Whether the access token is still good for at least [`EXPIRY_MARGIN_SECS`].
    pub fn is_fresh(&self) -> bool {
        self.expires_at
            .is_none_or(|at| at > now_secs() + EXPIRY_MARGIN_SECS)
    }

    /// Registers every token of the entry with the redaction set.
    fn register_secrets(&self) {
        crate::redact::register_value(&self.access_token);
        if let Some(t) = &self.refresh_token {
            crate::redact::register_value(t);
        }
        if let Some(s) = self
            .registration
            .as_ref()
            .and_then(|r| r.client_secret.as_ref())
        {
            crate::redact::register_value(s);
        }
    }
}

/// Unix seconds now (the crate's clock, so tests can move it).
pub fn now_secs() -> i64 {
    crate::clock::now_millis() / 1000
}

/// The store directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// Where one entry lives.
#[derive(Debug, Clone)]
pub struct Slot {
    pub path: PathBuf,
    /// The server's name (messages, `mcp status`).
    pub server: String,
}

impl Store {
    /// The store of this user (module doc), or an error when neither the variables nor HOME
    /// name a place (exit 4).
    pub fn locate() -> Result<Store> {
        let get = |name: &str| {
            crate::own_env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let dir = if let Some(dir) = get(DIR_VAR) {
            dir
        } else if let Some(state) = get("XDG_STATE_HOME").filter(|p| p.is_absolute()) {
            state.join("kxen-agent-mcp-tokens")
        } else if let Some(home) = get("HOME").filter(|p| p.is_absolute()) {
            home.join(".local/state/kxen-agent-mcp-tokens")
        } else {
            return Err(Error::invalid(
                "no place for the MCP token store: set KXEN_TOKEN_DIR, XDG_STATE_HOME or HOME",
            ));
        };
        Ok(Store { dir })
    }

    /// The store at `dir` (tests).
    pub fn at(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The slot of server `name` at `url` with client `client_id` (`None`: registered
    /// dynamically).
    pub fn slot(&self, name: &str, url: &str, client_id: Option<&str>) -> Slot {
        let key = format!("{url}\n{}", client_id.unwrap_or("dynamic"));
        let hash = crate::hash::sha256_hex(key.as_bytes());
        Slot {
            path: self.dir.join(format!("{}.json", &hash[..32])),
            server: name.to_string(),
        }
    }
}

impl Slot {
    /// The entry, if there is one; a damaged or too widely readable one is an error (exit 4).
    ///
    /// The file is opened without following a symlink and checked through the open descriptor,
    /// in a directory only this user can change: a check by path and a read by path could be
    /// two different files.
    pub fn load(&self) -> Result<Option<Entry>> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // Opened for reading only (the ban is on writing outside `fsx`).
        #[allow(clippy::disallowed_methods)]
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path);
        let mut file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(self.refused("is not a regular file"));
            }
            Err(e) => return Err(Error::io("read", &self.path, e)),
        };
        check_private_dir(fsx_parent(&self.path))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io("read", &self.path, e))?;
        if !meta.file_type().is_file() {
            return Err(self.refused("is not a regular file"));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(self.refused(&format!(
                "is readable or writable by others (mode {mode:o}, must be 600)"
            )));
        }
        // A file someone else planted is not our token.
        if meta.uid() != own_uid() {
            return Err(self.refused("belongs to another user"));
        }
        if meta.len() > MAX_ENTRY {
            return Err(self.refused("is too big to be a token entry"));
        }
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_ENTRY + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("read", &self.path, e))?;
        let entry: Entry = serde_json::from_slice(&bytes)
            .ok()
            .filter(|e: &Entry| e.version == 1 && !e.access_token.is_empty())
            .ok_or_else(|| self.refused("is damaged (not a token entry of this version)"))?;
        entry.register_secrets();
        Ok(Some(entry))
    }

    /// Replaces the entry atomically (the directory created 0700 first).
    pub fn save(&self, entry: &Entry) -> Result<()> {
        entry.register_secrets();
        let dir = fsx_parent(&self.path);
        fsx::create_dir_with_mode(dir, DIR_MODE)?;
        check_private_dir(dir)?;
        fsx::write_atomic_json(&self.path, entry, ENTRY_MODE)
    }

    /// Locks the store (its directory, so no lock file lies among the entries) while a refresh
    /// replaces an entry: two processes refreshing the same rotating refresh token at once would
    /// leave one of them with a refused refresh.
    pub fn lock(&self, wait: std::time::Duration) -> Result<fsx::FileLock> {
        fsx::FileLock::directory(
            fsx_parent(&self.path),
            fsx::LockWait::Up(wait),
            "the MCP token store",
            |_| {},
        )
    }

    /// Deletes the entry; whether there was one.
    pub fn remove(&self) -> Result<bool> {
        let existed = self.path.symlink_metadata().is_ok();
        fsx::remove_file(&self.path)?;
        Ok(existed)
    }

    fn refused(&self, why: &str) -> Error {
        Error::invalid(format!(
            "the MCP token store entry {} of server `{}` {why}; it is not used",
            self.path.display(),
            self.server
        ))
        .with_path(&self.path)
        .with_hint(format!(
            "run `kxen-agent mcp logout {}` to delete it, then `kxen-agent mcp login {}`",
            self.server, self.server
        ))
    }
}

fn fsx_parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// This process's user id.
fn own_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        libc::getuid()
    }
}

/// Refuses a store directory another user could change (its mode, or its owner): entries there
/// could be swapped under us. A symlink to such a directory is judged by the directory.
fn check_private_dir(dir: &Path) -> Result<()> {
    let meta = dir.metadata().map_err(|e| Error::io("read", dir, e))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 || meta.uid() != own_uid() {
        return Err(Error::invalid(format!(
            "the MCP token store {} is open to others (mode {mode:o}{}); kxen-agent keeps no \
             token there",
            dir.display(),
            if meta.uid() != own_uid() {
                ", owned by another user"
            } else {
                ""
            }
        ))
        .with_path(dir)
        .with_hint(format!("chmod 700 {} (as its owner)", dir.display())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            version: 1,
            server_url: "http://127.0.0.1:1/mcp".into(),
            server_name: "s".into(),
            issuer: "http://127.0.0.1:1".into(),
            token_endpoint: "http://127.0.0.1:1/token".into(),
            auth_methods: vec![],
            resource: None,
            grant: "authorization_code".into(),
            registration: None,
            access_token: "kxen-test-access-0123456789".into(),
            refresh_token: Some("kxen-test-refresh-0123456789".into()),
            expires_at: Some(now_secs() + 3600),
            scope: Some("read".into()),
            obtained_at: crate::clock::now_rfc3339(),
        }
    }

    #[test]
    fn an_entry_is_private_and_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().join("tokens"));
        let slot = store.slot("s", "http://127.0.0.1:1/mcp", None);
        assert!(slot.load().unwrap().is_none());
        slot.save(&entry()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&slot.path), 0o600);
        assert_eq!(mode(store.dir()), 0o700);
        let read = slot.load().unwrap().unwrap();
        assert_eq!(read.refresh_token, entry().refresh_token);
        assert_eq!(read.access_token, entry().access_token);
        assert!(read.is_fresh());
        assert_eq!(
            crate::redact::redact("x kxen-test-refresh-0123456789 y"),
            "x [redacted] y"
        );
        assert!(slot.remove().unwrap());
        assert!(!slot.remove().unwrap());
    }

    #[test]
    fn wide_or_damaged_entries_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().join("t"));
        let slot = store.slot("s", "http://127.0.0.1:1/mcp", Some("ci"));
        slot.save(&entry()).unwrap();
        std::fs::set_permissions(&slot.path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = slot.load().unwrap_err();
        assert!(err.message.contains("mode 644"), "{}", err.message);
        assert!(format!("{err:?}").contains("mcp logout s"));
        fsx::write_atomic(&slot.path, b"{not json", 0o600).unwrap();
        assert!(slot.load().unwrap_err().message.contains("damaged"));
        // A store directory open to others gets no token.
        std::fs::set_permissions(store.dir(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(
            slot.save(&entry())
                .unwrap_err()
                .message
                .contains("open to others")
        );
    }

    #[test]
    fn a_symlinked_entry_or_an_open_directory_is_never_read() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::at(tmp.path().join("t"));
        let slot = store.slot("s", "http://127.0.0.1:1/mcp", Some("ci"));
        slot.save(&entry()).unwrap();
        // Someone's own well-formed entry, linked in where ours is looked for.
        let planted = tmp.path().join("planted.json");
        std::fs::rename(&slot.path, &planted).unwrap();
        std::os::unix::fs::symlink(&planted, &slot.path).unwrap();
        let err = slot.load().unwrap_err();
        assert!(
            err.message.contains("not a regular file"),
            "{}",
            err.message
        );
        std::fs::remove_file(&slot.path).unwrap();
        slot.save(&entry()).unwrap();
        // A directory others may change: entries there could be swapped, so none is read.
        std::fs::set_permissions(store.dir(), std::fs::Permissions::from_mode(0o775)).unwrap();
        let err = slot.load().unwrap_err();
        assert!(err.message.contains("open to others"), "{}", err.message);
    }

    #[test]
    fn slots_differ_by_url_and_client() {
        let store = Store::at("/x");
        let a = store.slot("a", "https://h/mcp", None).path;
        assert_ne!(a, store.slot("a", "https://h/mcp", Some("ci")).path);
        assert_ne!(a, store.slot("a", "https://h/other", None).path);
        assert_eq!(a, store.slot("b", "https://h/mcp", None).path);
    }
}
