//! The authorization-code grant of [`super::oauth`], for a person at hand: PKCE (S256), a
//! loopback redirect (RFC 8252) and, without a configured `client_id`, dynamic client
//! registration (RFC 7591) or a configured Client ID Metadata Document (`client_metadata_url`,
//! when the authorization server takes one), reused from the token store when it holds one.
//!
//! A person is at hand ([`Person`]) when `BROWSER` is set: kxen-agent starts `$BROWSER
//! <authorization URL>` (no shell; `%s` in it stands for the URL; secrets of our environment are
//! left out of the browser's); or when stdin is a terminal (or for `kxen-agent mcp login`):
//! the URL is shown on stderr for the person to open. Then kxen-agent waits, at most
//! `timeout_ms` (`mcp login`: [`LOGIN_WAIT`]), for the redirect to
//! `http://127.0.0.1:<port>/callback` on a listener of its own. The `state` must come back
//! unchanged; the code is exchanged with the PKCE verifier and the `resource` parameter.
//! Nobody at hand: the grant is refused with a message naming `kxen-agent mcp login NAME`.

use std::io::Write;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::Digest as _;

use super::oauth::{Client, Identity, Token, remaining, request_token, safe_url};
use super::oauth_store::Registration;
use crate::error::Error;

/// How long `kxen-agent mcp login` waits for the person to approve.
pub const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// Whether a person may be asked to approve an authorization, and how they are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Person {
    /// Nobody: a run in CI, a pipe (the grant is refused, naming `mcp login`).
    Absent,
    /// `$BROWSER` is started, else the URL is shown on stderr (`BROWSER` set, stdin a terminal,
    /// or `mcp login`).
    AtHand,
}

impl Person {
    /// Who is there for a run: somebody when `BROWSER` is set or stdin is a terminal.
    pub fn for_run() -> Person {
        use std::io::IsTerminal;
        if browser().is_some() || std::io::stdin().is_terminal() {
            Person::AtHand
        } else {
            Person::Absent
        }
    }
}

/// Where the URL is shown to a person without a `BROWSER` (set by the command line: the
/// library never prints).
static SHOW_URL: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Sets how an authorization URL is shown to a person at a terminal (once per process).
pub fn set_url_sink(show: fn(&str)) {
    let _ = SHOW_URL.set(show);
}

fn browser() -> Option<String> {
    crate::own_env::var_os("BROWSER")
        .and_then(|b| b.into_string().ok())
        .filter(|b| !b.trim().is_empty())
}

/// The largest redirect request line read from the browser.
const MAX_REDIRECT: usize = 16 * 1024;
/// How long one connection to the redirect listener may take to send its request line. The
/// listener serves one connection at a time: a client that connects and then sends slowly, or
/// never finishes its line, holds it this long at most (the browser's redirect waits in the
/// backlog meanwhile); the whole wait keeps its own limit.
const REQUEST_WAIT: Duration = Duration::from_secs(5);
/// The largest registration answer read.
const MAX_REGISTRATION: u64 = 1024 * 1024;

/// What the metadata steps found.
pub struct Flow<'a> {
    pub meta: &'a Value,
    pub token_endpoint: &'a url::Url,
    /// Absent for a 2025-03-26 server (no protected-resource metadata).
    pub resource: Option<&'a str>,
    pub scope: Option<&'a str>,
    pub methods: &'a [&'a str],
    pub client: &'a Client,
    /// A client registered before (the token store), tried first.
    pub registration: Option<&'a Registration>,
}

/// Runs the grant (module doc): the token, and the client it registered or reused (none for a
/// configured `client_id`).
pub fn authorization_code(
    agent: &ureq::Agent,
    flow: &Flow,
    until: Instant,
) -> Result<(Token, Option<Registration>), Error> {
    // The network steps share the caller's budget; the person's approval may take longer
    // (`mcp login`), and the code exchange after it gets the whole budget again.
    let budget = until.saturating_duration_since(Instant::now());
    if flow.client.person == Person::Absent {
        let server = &flow.client.server;
        return Err(Error::external(format!(
            "the server needs a person to authorize kxen-agent (the authorization-code grant), \
             and none is at hand (no BROWSER, stdin is not a terminal): run `kxen-agent mcp \
             login {server}` first, or give [mcp.servers.{server}] an oauth table with a \
             registered client and grant = \"client_credentials\""
        )));
    }
    let endpoint = flow.meta["authorization_endpoint"]
        .as_str()
        .ok_or_else(|| {
            Error::external("the authorization-server metadata has no authorization_endpoint")
        })?;
    let mut authorize = url::Url::parse(endpoint)
        .map_err(|e| Error::external(format!("its authorization_endpoint is not a URL: {e}")))?;
    safe_url(&authorize, "the authorization endpoint")?;
    if let Some(methods) = flow.meta["code_challenge_methods_supported"].as_array()
        && !methods.iter().any(|m| m == "S256")
    {
        return Err(Error::external(
            "the authorization server does not take PKCE S256; kxen-agent uses nothing weaker",
        ));
    }
    // A reused registration names its redirect URI: its port is asked for again (an
    // authorization server may compare the URI exactly); taken, the client registers anew.
    let reused = match (&flow.client.config.client_id, flow.registration) {
        (None, Some(r)) => url::Url::parse(&r.redirect_uri)
            .ok()
            .and_then(|u| u.port())
            .and_then(|port| TcpListener::bind(("127.0.0.1", port)).ok())
            .map(|listener| (listener, r.clone())),
        _ => None,
    };
    let (listener, registered) = match reused {
        Some((listener, r)) => (listener, Some(r)),
        None => {
            let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| {
                Error::external(format!("cannot listen on 127.0.0.1 for the redirect: {e}"))
            })?;
            (listener, None)
        }
    };
    let port = listener
        .local_addr()
        .map_err(|e| Error::external(format!("cannot listen on 127.0.0.1 for the redirect: {e}")))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let (identity, registration) = match (&flow.client.config.client_id, registered) {
        (Some(id), _) => (
            Identity {
                client_id: id.clone(),
                secret: flow.client.secret.clone(),
                method: None,
                jwt: flow.client.private_key.clone().map(|key| {
                    let issuer = flow.meta["issuer"].as_str();
                    (
                        key,
                        issuer.unwrap_or(flow.token_endpoint.as_str()).to_string(),
                    )
                }),
            },
            None,
        ),
        (None, Some(r)) => (
            Identity {
                client_id: r.client_id.clone(),
                secret: r.client_secret.clone(),
                method: r.token_endpoint_auth_method.clone(),
                jwt: None,
            },
            Some(r),
        ),
        (None, None) => {
            // A Client ID Metadata Document when the server takes one; else registration.
            let cimd = flow
                .client
                .config
                .client_metadata_url
                .as_ref()
                .filter(|_| flow.meta["client_id_metadata_document_supported"] == true);
            let identity = match cimd {
                Some(url) => Identity {
                    client_id: url.clone(),
                    secret: None,
                    method: Some("none".into()),
                    jwt: None,
                },
                None => register(agent, flow.meta, &redirect_uri, until)?,
            };
            let registration = Registration {
                client_id: identity.client_id.clone(),
                client_secret: identity.secret.clone(),
                token_endpoint_auth_method: identity.method.clone(),
                redirect_uri: redirect_uri.clone(),
            };
            (identity, Some(registration))
        }
    };
    let verifier = b64url(&crate::ids::random_bytes::<32>());
    let challenge = b64url(&sha2::Sha256::digest(verifier.as_bytes()));
    let state = b64url(&crate::ids::random_bytes::<16>());
    {
        let mut query = authorize.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &identity.client_id)
            .append_pair("redirect_uri", &redirect_uri)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state);
        if let Some(resource) = flow.resource {
            query.append_pair("resource", resource);
        }
        if let Some(scope) = flow.scope {
            query.append_pair("scope", scope);
        }
    }
    match browser() {
        Some(browser) => open_browser(&browser, authorize.as_str())?,
        None => match SHOW_URL.get() {
            Some(show) => show(&format!(
                "To authorize kxen-agent for MCP server `{}`, open this URL in a browser on \
                 this machine (waiting for the approval):\n{}",
                flow.client.server,
                authorize.as_str()
            )),
            None => {
                return Err(Error::external(
                    "no BROWSER is set and there is no terminal to show the URL",
                ));
            }
        },
    }
    let approval_until = match flow.client.approval_wait {
        Some(wait) => Instant::now() + wait,
        None => until,
    };
    let code = wait_for_code(&listener, &state, approval_until)?;
    let until = until.max(Instant::now() + budget);
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", "authorization_code")
        .append_pair("code", &code)
        .append_pair("redirect_uri", &redirect_uri)
        .append_pair("code_verifier", &verifier);
    if let Some(resource) = flow.resource {
        form.append_pair("resource", resource);
    }
    let token = request_token(
        agent,
        flow.token_endpoint,
        &identity,
        form,
        flow.methods,
        until,
    )?;
    Ok((token, registration))
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Dynamic client registration (RFC 7591) at the server's `registration_endpoint`.
fn register(
    agent: &ureq::Agent,
    meta: &Value,
    redirect_uri: &str,
    until: Instant,
) -> Result<Identity, Error> {
    let endpoint = meta["registration_endpoint"].as_str().ok_or_else(|| {
        Error::external(
            "the authorization server offers no dynamic registration (registration_endpoint); \
             give the server's entry an oauth table with a registered client_id",
        )
    })?;
    let url = url::Url::parse(endpoint)
        .map_err(|e| Error::external(format!("its registration_endpoint is not a URL: {e}")))?;
    safe_url(&url, "the registration endpoint")?;
    let body = json!({
        "client_name": "kxen-agent",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let mut response = agent
        .post(url.as_str())
        .config()
        .timeout_global(Some(remaining(until)?))
        .build()
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .send(body.to_string().as_bytes())
        .map_err(|e| Error::external(format!("registering the client at {url} failed: {e}")))?;
    let status = response.status().as_u16();
    let bytes = response
        .body_mut()
        .with_config()
        .limit(MAX_REGISTRATION)
        .read_to_vec()
        .map_err(|e| Error::external(format!("reading the registration answer failed: {e}")))?;
    let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let client_id = answer["client_id"]
        .as_str()
        .filter(|_| (200..300).contains(&status));
    let Some(client_id) = client_id else {
        return Err(Error::external(format!(
            "the registration endpoint {url} did not register the client (HTTP {status})"
        )));
    };
    Ok(Identity {
        client_id: client_id.to_string(),
        secret: answer["client_secret"].as_str().map(str::to_string),
        method: answer["token_endpoint_auth_method"]
            .as_str()
            .map(str::to_string),
        jwt: None,
    })
}

/// Starts `$BROWSER` on `url` (the first command of a `:`-separated list; `%s` stands for the
/// URL, else it is the last argument). The browser's environment leaves out every variable that
/// looks like a secret.
fn open_browser(browser: &str, url: &str) -> Result<(), Error> {
    let command = browser.split(':').next().unwrap_or_default();
    let mut argv: Vec<String> = command.split_whitespace().map(str::to_string).collect();
    if argv.is_empty() {
        return Err(Error::external("BROWSER is empty"));
    }
    if argv.iter().any(|a| a.contains("%s")) {
        for a in &mut argv {
            *a = a.replace("%s", url);
        }
    } else {
        argv.push(url.to_string());
    }
    let env: Vec<_> = crate::own_env::vars()
        .into_iter()
        .filter(|(name, value)| {
            !crate::secrets::rules::looks_sensitive(&name.to_string_lossy(), value)
        })
        .collect();
    // The browser is the user's own program, started on their behalf like `$EDITOR` (not a
    // tool of the agent, nor in a run's fence: it runs at Session creation too), without our
    // secrets.
    #[allow(clippy::disallowed_methods)]
    let mut child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| {
            Error::external(format!(
                "cannot start the browser `{}` (BROWSER): {e}",
                argv[0]
            ))
        })?;
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}

/// Waits on `listener` for the redirect carrying the code (and `state`), until `until`.
fn wait_for_code(listener: &TcpListener, state: &str, until: Instant) -> Result<String, Error> {
    wait_for_code_within(listener, state, until, REQUEST_WAIT)
}

/// [`wait_for_code`] giving each connection `per_connection` for its request line.
fn wait_for_code_within(
    listener: &TcpListener,
    state: &str,
    until: Instant,
    per_connection: Duration,
) -> Result<String, Error> {
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::external(format!("cannot wait for the redirect: {e}")))?;
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= until {
                    return Err(Error::external(
                        "no authorization came back to kxen-agent within timeout_ms",
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => {
                return Err(Error::external(format!(
                    "waiting for the redirect failed: {e}"
                )));
            }
        };
        let deadline = until.min(Instant::now() + per_connection);
        let Some(line) = request_line(&stream, deadline) else {
            continue; // too slow, too long or not text: not a browser's redirect
        };
        let target = line.split_whitespace().nth(1).unwrap_or_default();
        let Ok(url) = url::Url::parse(&format!("http://127.0.0.1{target}")) else {
            continue;
        };
        if url.path() != "/callback" {
            reply(&stream, 404, "Not the authorization redirect.");
            continue;
        }
        let get = |key: &str| {
            url.query_pairs()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.into_owned())
        };
        if get("state").as_deref() != Some(state) {
            reply(&stream, 400, "The state does not match; ignored.");
            continue; // not our request: a stale or forged redirect
        }
        if let Some(error) = get("error") {
            reply(
                &stream,
                200,
                "Authorization refused. You can close this page.",
            );
            return Err(Error::external(format!(
                "the authorization server refused: {}",
                crate::text::preview(&error, 120)
            )));
        }
        let Some(code) = get("code") else {
            reply(&stream, 400, "No code in the redirect.");
            return Err(Error::external(
                "the redirect carried no authorization code",
            ));
        };
        reply(
            &stream,
            200,
            "kxen-agent is authorized. You can close this page.",
        );
        return Ok(code);
    }
}

/// The request line (up to its `\n`) a connection sends before `deadline`, in at most
/// [`MAX_REDIRECT`] bytes; `None` when it sends less (slowly, or never), more, or not UTF-8.
/// Each read waits at most until `deadline`, so a client sending a byte at a time cannot
/// stretch the wait.
fn request_line(mut stream: &std::net::TcpStream, deadline: Instant) -> Option<String> {
    use std::io::Read;
    stream.set_nonblocking(false).ok()?;
    let mut line = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        stream.set_read_timeout(Some(left)).ok()?;
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            line.truncate(end);
            return String::from_utf8(line).ok();
        }
        if line.len() >= MAX_REDIRECT {
            return None;
        }
    }
}

fn reply(mut stream: &std::net::TcpStream, status: u16, text: &str) {
    let _ = write!(
        stream,
        "HTTP/1.1 {status} OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \
         {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    /// A client that connects and sends one byte every `every`, never finishing its line.
    fn dribble(port: u16, every: Duration, text: &'static [u8]) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
                return;
            };
            for b in text {
                if stream.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(every);
            }
        })
    }

    fn redirect(port: u16, line: &str) {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.write_all(line.as_bytes()).unwrap();
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }

    /// A dribbling connection, then an oversized one, hold the listener at most their own
    /// limit each: the real redirect behind them is taken.
    #[test]
    fn a_dribbling_or_oversized_client_does_not_hold_the_redirect_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let slow = dribble(
            port,
            Duration::from_millis(100),
            b"GET /callback?state=s&cod",
        );
        std::thread::sleep(Duration::from_millis(50));
        let big = format!("GET /{} HTTP/1.1", "a".repeat(2 * MAX_REDIRECT));
        let oversized = std::thread::spawn(move || {
            let _ = TcpStream::connect(("127.0.0.1", port))
                .and_then(|mut s| s.write_all(big.as_bytes()));
        });
        std::thread::sleep(Duration::from_millis(50));
        redirect(port, "GET /callback?state=s&code=the-code HTTP/1.1\r\n\r\n");
        let start = Instant::now();
        let until = start + Duration::from_secs(20);
        let code = wait_for_code_within(&listener, "s", until, Duration::from_millis(400));
        assert_eq!(code.unwrap(), "the-code");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        drop(listener);
        let _ = (slow.join(), oversized.join());
    }

    /// A client that dribbles past the whole wait does not extend it.
    #[test]
    fn the_whole_wait_keeps_its_limit_against_a_dribbling_client() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let slow = dribble(
            port,
            Duration::from_millis(50),
            b"GET /callback?state=s&code=c HT",
        );
        let start = Instant::now();
        let until = start + Duration::from_millis(600);
        let err = wait_for_code_within(&listener, "s", until, Duration::from_secs(30)).unwrap_err();
        assert!(err.message.contains("within timeout_ms"), "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        drop(listener);
        let _ = slow.join();
    }
}
