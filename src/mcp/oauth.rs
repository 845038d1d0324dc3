//! OAuth 2.1 for a Streamable HTTP server, found the way the MCP authorization spec says: the
//! unattended `client_credentials` grant of a pre-registered client, or the authorization-code
//! grant a person approves in a browser ([`super::oauth_code`]), for a server with or without
//! an `[mcp.servers.NAME.oauth]` table.
//!
//! 1. The server answers a request without a valid token with 401 and a
//!    `WWW-Authenticate: Bearer resource_metadata="…", scope="…"` challenge.
//! 2. Its protected-resource metadata (RFC 9728): the challenge's `resource_metadata` URL, else
//!    the well-known URIs, path-based first (`/.well-known/oauth-protected-resource/<path>`,
//!    then `/.well-known/oauth-protected-resource`). Its `resource` must be this server (same
//!    origin, a prefix of the endpoint's path): a mismatch is refused, no token is asked for.
//! 3. The authorization server's metadata (RFC 8414, then OpenID discovery) for its
//!    `token_endpoint` and the client authentications it takes.
//! 4. A token (`client_credentials`, or the authorization code): the `resource` parameter
//!    (RFC 8707) and
//!    the scope (the config's, else the challenge's, else `scopes_supported`, else none), the
//!    client authenticated with `client_secret_basic` (the default), `client_secret_post` when
//!    that is all the server takes, or `none` without a secret.
//!
//! The tokens are kept in the per-user token store ([`super::oauth_store`]), refreshed with
//! [`refresh`] when they expire, and scrubbed from every message like `bearer_token_env`'s
//! (every token is registered with the redaction set); the secret is read from the
//! environment variable the entry names, when kxen-agent connects. Every metadata document and
//! token answer is bounded (size and `timeout_ms`), redirects are not followed, and every URL
//! involved must be `https://` (or `http://` on this machine), so a token or secret never
//! crosses the network in cleartext.
//!
//! A registered client authenticates with its secret, or with `private_key_jwt` (RFC 7523: an
//! ES256 client assertion signed with `private_key_file`).

use std::time::{Duration, Instant};

use crate::error::Error;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The largest metadata document or token answer read.
const MAX_DOCUMENT: u64 = 1024 * 1024;

/// `[mcp.servers.NAME.oauth]`: a client registered with the server's authorization server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// A pre-registered client (absent: dynamic registration, authorization code only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The variable holding the client secret (its name only; absent: a public client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// The grant: `authorization_code` (the default: a person approves, in a browser) or
    /// `client_credentials` (unattended; needs `client_id`).
    #[serde(default = "default_grant")]
    pub grant: String,
    /// The scopes to ask for (absent: the server's challenge, else its `scopes_supported`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// A Client ID Metadata Document (an `https://` URL with a path, where the operator
    /// publishes kxen-agent's client metadata): used as the `client_id` when the authorization
    /// server says `client_id_metadata_document_supported`, instead of registering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
    /// `private_key_jwt` (RFC 7523): the registered client's private key (a PKCS#8 PEM file,
    /// absolute path), read at connect; it signs a short-lived client assertion per token
    /// request instead of sending a secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_file: Option<std::path::PathBuf>,
    /// The assertion's signature algorithm: `ES256` (the default, and the only one spoken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_algorithm: Option<String>,
}

/// The grants an `oauth` table may name.
pub const GRANTS: &[&str] = &["authorization_code", "client_credentials"];

fn default_grant() -> String {
    "authorization_code".into()
}

impl Default for OAuthConfig {
    /// No table: the authorization-code grant, the client registered dynamically.
    fn default() -> OAuthConfig {
        OAuthConfig {
            client_id: None,
            client_secret_env: None,
            grant: default_grant(),
            scopes: Vec::new(),
            client_metadata_url: None,
            private_key_file: None,
            signing_algorithm: None,
        }
    }
}

impl OAuthConfig {
    /// The client a token store entry is kept for: the configured `client_id`, else the
    /// `client_metadata_url`, else `None` (a client registered dynamically).
    pub fn store_client(&self) -> Option<&str> {
        self.client_id
            .as_deref()
            .or(self.client_metadata_url.as_deref())
    }

    /// Why the table is invalid, or `None` (`at` names it).
    pub fn error(&self, at: &str) -> Option<String> {
        if self.client_id.as_deref() == Some("") {
            return Some(format!("{at}.oauth: client_id must not be empty"));
        }
        if !GRANTS.contains(&self.grant.as_str()) {
            return Some(format!(
                "{at}.oauth: grant {:?} is not supported; kxen-agent speaks {}",
                self.grant,
                GRANTS.join(", ")
            ));
        }
        if self.grant == "client_credentials" && self.client_id.is_none() {
            return Some(format!(
                "{at}.oauth: grant \"client_credentials\" needs the client_id of a registered \
                 client"
            ));
        }
        if let Some(url) = &self.client_metadata_url {
            let ok = url::Url::parse(url)
                .is_ok_and(|u| u.scheme() == "https" && !u.path().trim_matches('/').is_empty());
            if !ok {
                return Some(format!(
                    "{at}.oauth: client_metadata_url = {url:?} must be an https:// URL with a \
                     path (where the client's metadata document is published)"
                ));
            }
            if self.client_id.is_some() || self.grant != "authorization_code" {
                return Some(format!(
                    "{at}.oauth: client_metadata_url is the client id of the authorization-code \
                     grant; give it or client_id, not both"
                ));
            }
        }
        if let Some(path) = &self.private_key_file {
            if self.client_id.is_none() || self.client_secret_env.is_some() {
                return Some(format!(
                    "{at}.oauth: private_key_file authenticates a registered client_id, instead \
                     of client_secret_env (give client_id, and not both)"
                ));
            }
            if !path.is_absolute() {
                return Some(format!(
                    "{at}.oauth: private_key_file = {:?} must be an absolute path",
                    path.display().to_string()
                ));
            }
        }
        match self.signing_algorithm.as_deref() {
            None => {}
            Some(_) if self.private_key_file.is_none() => {
                return Some(format!(
                    "{at}.oauth: signing_algorithm is for private_key_file"
                ));
            }
            Some("ES256") => {}
            Some(other) => {
                return Some(format!(
                    "{at}.oauth: signing_algorithm {other:?} is not supported; kxen-agent signs \
                     client assertions with ES256"
                ));
            }
        }
        if self.client_id.is_none() && self.client_secret_env.is_some() {
            return Some(format!(
                "{at}.oauth: client_secret_env without client_id: a secret belongs to a \
                 registered client"
            ));
        }
        match &self.client_secret_env {
            Some(var) if !crate::secrets::is_valid_env_name(var) => Some(format!(
                "{at}.oauth: client_secret_env = {var:?} is not an environment variable name"
            )),
            _ => None,
        }
    }
}

/// A configured client, its secret read from the environment.
#[derive(Clone)]
pub struct Client {
    pub config: OAuthConfig,
    pub secret: Option<String>,
    /// The server's name (messages naming `kxen-agent mcp login NAME`).
    pub server: String,
    /// Whether a person may be asked to approve (the authorization-code grant).
    pub person: super::oauth_code::Person,
    /// Where its tokens are kept between connects (`None`: memory only).
    pub store: Option<super::oauth_store::Slot>,
    /// How long a person may take to approve (`None`: the server's `timeout_ms`).
    pub approval_wait: Option<Duration>,
    /// The PKCS#8 DER of `private_key_file` (read at connect, [`read_private_key`]).
    pub private_key: Option<Vec<u8>>,
}

/// Reads a PKCS#8 PEM private key (`-----BEGIN PRIVATE KEY-----`) of P-256 for ES256 client
/// assertions; the error names the file, never its content.
pub fn read_private_key(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read private_key_file {}: {e}", path.display()))?;
    let body = text
        .split("-----BEGIN PRIVATE KEY-----")
        .nth(1)
        .and_then(|rest| rest.split("-----END PRIVATE KEY-----").next())
        .ok_or_else(|| {
            format!(
                "private_key_file {} is not a PKCS#8 PEM key (-----BEGIN PRIVATE KEY-----); \
                 convert one with `openssl pkcs8 -topk8 -nocrypt`",
                path.display()
            )
        })?;
    let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|_| format!("private_key_file {} is not valid PEM", path.display()))?;
    ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        &der,
        &ring::rand::SystemRandom::new(),
    )
    .map_err(|_| {
        format!(
            "private_key_file {} is not a P-256 key (ES256 needs one)",
            path.display()
        )
    })?;
    Ok(der)
}

/// A client assertion (RFC 7523 §2.2): a JWT signed with ES256 by `key`, issued and subject
/// `client_id`, for `audience` (the authorization server's issuer), valid 5 minutes, with a
/// random `jti` so it cannot be replayed.
fn client_assertion(client_id: &str, audience: &str, key: &[u8]) -> Result<String, Error> {
    let rng = ring::rand::SystemRandom::new();
    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(
        &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
        key,
        &rng,
    )
    .map_err(|_| Error::external("the private key is not a P-256 key"))?;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let now = super::oauth_store::now_secs();
    let jti: String = crate::ids::random_bytes::<16>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let header = b64(serde_json::json!({"alg": "ES256", "typ": "JWT"})
        .to_string()
        .as_bytes());
    let claims = b64(serde_json::json!({
        "iss": client_id, "sub": client_id, "aud": audience,
        "iat": now, "exp": now + 300, "jti": jti,
    })
    .to_string()
    .as_bytes());
    let input = format!("{header}.{claims}");
    let signature = pair
        .sign(&rng, input.as_bytes())
        .map_err(|_| Error::external("signing the client assertion failed"))?;
    Ok(format!("{input}.{}", b64(signature.as_ref())))
}

/// A `WWW-Authenticate: Bearer …` challenge's parameters.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Challenge {
    pub resource_metadata: Option<String>,
    pub scope: Option<String>,
    /// `error` (`insufficient_scope` asks for more scope: a refresh would not bring it).
    pub error: Option<String>,
}

/// The `Bearer` challenge of a `WWW-Authenticate` value (auth-params `key="value"` or
/// `key=token`); other schemes' parameters are ignored.
pub fn parse_challenge(header: &str) -> Challenge {
    let mut out = Challenge::default();
    let Some(start) = header.to_ascii_lowercase().find("bearer") else {
        return out;
    };
    let mut rest = &header[start + "bearer".len()..];
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq]
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(quoted) = after.trim_start().strip_prefix('"') {
            match quoted.find('"') {
                Some(end) => (quoted[..end].to_string(), &quoted[end + 1..]),
                None => (quoted.to_string(), ""),
            }
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        match key.as_str() {
            "resource_metadata" => out.resource_metadata = Some(value),
            "scope" => out.scope = Some(value),
            "error" => out.error = Some(value),
            _ => {}
        }
        rest = next;
    }
    out
}

/// A token answer (RFC 6749 §5.1).
pub struct Token {
    pub access_token: String,
    pub refresh_token: Option<String>,
    /// Seconds from now.
    pub expires_in: Option<i64>,
    /// The scope granted, when the answer says (else what was asked for).
    pub scope: Option<String>,
}

/// What an authorization found and got: the token and what a later refresh needs without
/// discovering again.
pub struct Authorized {
    pub token: Token,
    pub issuer: String,
    pub token_endpoint: String,
    pub auth_methods: Vec<String>,
    pub resource: Option<String>,
    /// The scope asked for.
    pub scope: Option<String>,
    /// A client registered dynamically during the grant.
    pub registration: Option<super::oauth_store::Registration>,
}

impl Authorized {
    /// The store entry of this authorization of `url` by `client`.
    pub fn entry(&self, url: &str, client: &Client) -> super::oauth_store::Entry {
        super::oauth_store::Entry {
            version: 1,
            server_url: url.to_string(),
            server_name: client.server.clone(),
            issuer: self.issuer.clone(),
            token_endpoint: self.token_endpoint.clone(),
            auth_methods: self.auth_methods.clone(),
            resource: self.resource.clone(),
            grant: client.config.grant.clone(),
            registration: self.registration.clone(),
            access_token: self.token.access_token.clone(),
            refresh_token: self.token.refresh_token.clone(),
            expires_at: self
                .token
                .expires_in
                .map(|s| super::oauth_store::now_secs().saturating_add(s)),
            scope: self.token.scope.clone().or_else(|| self.scope.clone()),
            obtained_at: crate::clock::now_rfc3339(),
        }
    }
}

/// Refreshes `entry` (the `refresh_token` grant, one round trip to the token endpoint it
/// names): the entry with the new tokens (the refresh token kept when none new is issued).
pub fn refresh(
    agent: &ureq::Agent,
    entry: &super::oauth_store::Entry,
    client: &Client,
    until: Instant,
) -> Result<super::oauth_store::Entry, Error> {
    let refresh_token = entry.refresh_token.as_deref().ok_or_else(|| {
        Error::external("the stored token cannot be refreshed (no refresh token)")
    })?;
    let token_endpoint = url::Url::parse(&entry.token_endpoint)
        .map_err(|e| Error::external(format!("the stored token endpoint is not a URL: {e}")))?;
    safe_url(&token_endpoint, "the token endpoint")?;
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", "refresh_token")
        .append_pair("refresh_token", refresh_token);
    if let Some(resource) = &entry.resource {
        form.append_pair("resource", resource);
    }
    let identity = match &entry.registration {
        Some(r) => Identity {
            client_id: r.client_id.clone(),
            secret: r.client_secret.clone(),
            method: r.token_endpoint_auth_method.clone(),
            jwt: None,
        },
        None => Identity {
            client_id: client.config.client_id.clone().unwrap_or_default(),
            secret: client.secret.clone(),
            method: None,
            jwt: client
                .private_key
                .clone()
                .map(|key| (key, entry.issuer.clone())),
        },
    };
    let methods: Vec<&str> = if entry.auth_methods.is_empty() {
        vec!["client_secret_basic"]
    } else {
        entry.auth_methods.iter().map(String::as_str).collect()
    };
    let token = request_token(agent, &token_endpoint, &identity, form, &methods, until)?;
    let mut next = entry.clone();
    next.access_token = token.access_token;
    if token.refresh_token.is_some() {
        next.refresh_token = token.refresh_token;
    }
    next.expires_at = token
        .expires_in
        .map(|s| super::oauth_store::now_secs().saturating_add(s));
    if token.scope.is_some() {
        next.scope = token.scope;
    }
    next.obtained_at = crate::clock::now_rfc3339();
    Ok(next)
}

/// Runs the flow of the module doc for `endpoint` after a 401 with `challenge`, with the
/// client's grant; every error says which step failed (secrets scrubbed by the caller).
pub fn authorize(
    agent: &ureq::Agent,
    endpoint: &url::Url,
    challenge: &Challenge,
    client: &Client,
    registration: Option<(&super::oauth_store::Registration, &str)>,
    until: Instant,
) -> Result<Authorized, Error> {
    let (resource, prm, as_url, meta) = match protected_resource(agent, endpoint, challenge, until)?
    {
        Lookup::Found(prm_url, prm) => {
            let resource = prm["resource"].as_str().ok_or_else(|| {
                Error::external(format!(
                    "the protected-resource metadata at {prm_url} names no `resource`"
                ))
            })?;
            check_resource(endpoint, resource)?;
            let issuer = prm["authorization_servers"][0].as_str().ok_or_else(|| {
                Error::external(format!(
                    "the protected-resource metadata at {prm_url} names no authorization server"
                ))
            })?;
            let issuer = url::Url::parse(issuer).map_err(|e| {
                Error::external(format!(
                    "its authorization server {issuer:?} is not a URL: {e}"
                ))
            })?;
            safe_url(&issuer, "the authorization server")?;
            let (as_url, meta) = authorization_server(agent, &issuer, until)?;
            (Some(resource.to_string()), prm, as_url, meta)
        }
        Lookup::Missing(no_prm) => {
            // A 2025-03-26 server: no protected-resource metadata at all (a broken one is an
            // error above, never a reason to guess); the server's origin is its own
            // authorization server, with the default endpoints when it has no metadata.
            let (as_url, meta) = legacy_authorization_server(agent, endpoint, until)
                .map_err(|why| Error::external(format!("{no_prm}; {why}")))?;
            (None, Value::Null, as_url, meta)
        }
    };
    let resource = resource.as_deref();
    let token_endpoint = meta["token_endpoint"].as_str().ok_or_else(|| {
        Error::external(format!(
            "the authorization-server metadata at {as_url} has no token_endpoint"
        ))
    })?;
    let token_endpoint = url::Url::parse(token_endpoint)
        .map_err(|e| Error::external(format!("its token_endpoint is not a URL: {e}")))?;
    safe_url(&token_endpoint, "the token endpoint")?;
    let scope = if !client.config.scopes.is_empty() {
        Some(client.config.scopes.join(" "))
    } else if let Some(scope) = &challenge.scope {
        Some(scope.clone())
    } else {
        prm["scopes_supported"].as_array().map(|s| {
            s.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        })
    }
    .filter(|s| !s.is_empty());
    // A person's grant asks for a refresh token too, when the authorization server offers
    // one (`offline_access` in its `scopes_supported`): the next connect then needs nobody.
    let offers_offline = meta["scopes_supported"]
        .as_array()
        .is_some_and(|s| s.iter().any(|s| s == "offline_access"));
    let scope = match scope {
        Some(s) if client.config.grant == "authorization_code" && offers_offline => {
            if s.split(' ').any(|s| s == "offline_access") {
                Some(s)
            } else {
                Some(format!("{s} offline_access"))
            }
        }
        None if client.config.grant == "authorization_code" && offers_offline => {
            Some("offline_access".to_string())
        }
        other => other,
    };
    let issuer = meta["issuer"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| as_url.clone());
    let methods: Vec<&str> = meta["token_endpoint_auth_methods_supported"]
        .as_array()
        .map(|m| m.iter().filter_map(Value::as_str).collect())
        .unwrap_or_else(|| vec!["client_secret_basic"]);
    if client.config.grant == "client_credentials" {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if let Some(resource) = resource {
            form.append_pair("resource", resource);
        }
        if let Some(scope) = &scope {
            form.append_pair("scope", scope);
        }
        let identity = Identity {
            client_id: client.config.client_id.clone().unwrap_or_default(),
            secret: client.secret.clone(),
            method: None,
            jwt: client.private_key.clone().map(|key| (key, issuer.clone())),
        };
        let token = request_token(agent, &token_endpoint, &identity, form, &methods, until)?;
        return Ok(Authorized {
            token,
            issuer,
            token_endpoint: token_endpoint.to_string(),
            auth_methods: methods.iter().map(|m| m.to_string()).collect(),
            resource: resource.map(str::to_string),
            scope,
            registration: None,
        });
    }
    // A stored registration belongs to the authorization server that issued it: a server that
    // now points elsewhere gets a new one, never the old client's credentials.
    let registration = registration
        .filter(|(_, issued_by)| *issued_by == issuer)
        .map(|(r, _)| r);
    let (token, registration) = super::oauth_code::authorization_code(
        agent,
        &super::oauth_code::Flow {
            meta: &meta,
            token_endpoint: &token_endpoint,
            resource,
            scope: scope.as_deref(),
            methods: &methods,
            client,
            registration,
        },
        until,
    )?;
    Ok(Authorized {
        token,
        issuer,
        token_endpoint: token_endpoint.to_string(),
        auth_methods: methods.iter().map(|m| m.to_string()).collect(),
        resource: resource.map(str::to_string),
        scope,
        registration,
    })
}

/// Who the client is at the token endpoint.
pub(crate) struct Identity {
    pub client_id: String,
    pub secret: Option<String>,
    /// The authentication the registration named (`token_endpoint_auth_method`), if any.
    pub method: Option<String>,
    /// `private_key_jwt`: the key (PKCS#8 DER) and the assertion's audience.
    pub jwt: Option<(Vec<u8>, String)>,
}

/// The protected-resource metadata: its URL and the document.
fn protected_resource(
    agent: &ureq::Agent,
    endpoint: &url::Url,
    challenge: &Challenge,
    until: Instant,
) -> Result<Lookup, Error> {
    let mut candidates = Vec::new();
    if let Some(url) = &challenge.resource_metadata {
        candidates.push(url.clone());
    }
    let origin = endpoint.origin().ascii_serialization();
    let path = endpoint.path().trim_end_matches('/');
    if !path.is_empty() {
        candidates.push(format!(
            "{origin}/.well-known/oauth-protected-resource{path}"
        ));
    }
    candidates.push(format!("{origin}/.well-known/oauth-protected-resource"));
    first_document(agent, &candidates, "protected-resource metadata", until)
}

/// The authorization server's metadata: its URL and the document (RFC 8414, then OpenID
/// discovery, path-based forms first).
fn authorization_server(
    agent: &ureq::Agent,
    issuer: &url::Url,
    until: Instant,
) -> Result<(String, Value), Error> {
    let origin = issuer.origin().ascii_serialization();
    let path = issuer.path().trim_end_matches('/');
    let candidates = if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    };
    match first_document(agent, &candidates, "authorization-server metadata", until)? {
        Lookup::Found(url, doc) => Ok((url, doc)),
        Lookup::Missing(why) => Err(Error::external(why)),
    }
}

/// The authorization server of a 2025-03-26 server (no protected-resource metadata): its
/// origin's RFC 8414 metadata, else the spec's default endpoints there (`/authorize`, `/token`,
/// `/register`).
fn legacy_authorization_server(
    agent: &ureq::Agent,
    endpoint: &url::Url,
    until: Instant,
) -> Result<(String, Value), Error> {
    let origin = endpoint.origin().ascii_serialization();
    let url = format!("{origin}/.well-known/oauth-authorization-server");
    match first_document(
        agent,
        std::slice::from_ref(&url),
        "authorization-server metadata",
        until,
    )? {
        Lookup::Found(url, doc) => Ok((url, doc)),
        Lookup::Missing(_) => Ok((
            format!("{origin} (the 2025-03-26 default endpoints)"),
            serde_json::json!({
                "authorization_endpoint": format!("{origin}/authorize"),
                "token_endpoint": format!("{origin}/token"),
                "registration_endpoint": format!("{origin}/register"),
            }),
        )),
    }
}

/// What looking for a metadata document found.
enum Lookup {
    /// Its URL and the document.
    Found(String, Value),
    /// None of the places had one (why, naming each).
    Missing(String),
}

/// The first of `urls` that answers 200 with a JSON object; an error when one answers 200 with
/// something else (too big, not JSON): a broken document is never skipped for the next guess.
fn first_document(
    agent: &ureq::Agent,
    urls: &[String],
    what: &str,
    until: Instant,
) -> Result<Lookup, Error> {
    let mut tried = Vec::new();
    for url in urls {
        let parsed = url::Url::parse(url)
            .map_err(|e| Error::external(format!("{what} URL {url:?}: {e}")))?;
        safe_url(&parsed, what)?;
        let response = agent
            .get(url)
            .config()
            .timeout_global(Some(remaining(until)?))
            .build()
            .header("Accept", "application/json")
            .call();
        match response {
            Ok(mut r) if r.status().as_u16() == 200 => {
                let body = r
                    .body_mut()
                    .with_config()
                    .limit(MAX_DOCUMENT)
                    .read_to_vec()
                    .map_err(|e| {
                        Error::external(format!("reading the {what} at {url} failed: {e}"))
                    })?;
                match serde_json::from_slice::<Value>(&body) {
                    Ok(doc) if doc.is_object() => return Ok(Lookup::Found(url.clone(), doc)),
                    _ => {
                        return Err(Error::external(format!(
                            "the {what} at {url} is not a JSON object"
                        )));
                    }
                }
            }
            Ok(r) => tried.push(format!("{url} (HTTP {})", r.status().as_u16())),
            Err(e) => tried.push(format!("{url} ({e})")),
        }
    }
    Ok(Lookup::Missing(format!(
        "no {what} found: tried {}",
        tried.join(", ")
    )))
}

/// POSTs `form` (the grant's fields) to the token endpoint, the client authenticated as its
/// registration says, else as the server takes it: `client_secret_basic` (the default),
/// `client_secret_post`, or only `client_id` without a secret.
pub(crate) fn request_token(
    agent: &ureq::Agent,
    token_endpoint: &url::Url,
    identity: &Identity,
    mut form: url::form_urlencoded::Serializer<'_, String>,
    methods: &[&str],
    until: Instant,
) -> Result<Token, Error> {
    let id = &identity.client_id;
    let method = match (&identity.secret, identity.method.as_deref()) {
        _ if identity.jwt.is_some() => "private_key_jwt",
        (None, _) => "none",
        (Some(_), Some(m)) => m,
        (Some(_), None) if methods.contains(&"client_secret_basic") => "client_secret_basic",
        (Some(_), None) if methods.contains(&"client_secret_post") => "client_secret_post",
        (Some(_), None) if methods.contains(&"none") => "none",
        (Some(_), None) => {
            return Err(Error::external(format!(
                "the token endpoint takes none of the client authentications kxen-agent \
                 speaks with a secret (client_secret_basic, client_secret_post); it takes: {}",
                methods.join(", ")
            )));
        }
    };
    let secret = identity.secret.as_deref().unwrap_or_default();
    let mut basic = None;
    match method {
        "client_secret_basic" => {
            // RFC 6749 §2.3.1: each part form-encoded, then base64.
            let enc =
                |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", enc(id), enc(secret));
            basic = Some(base64::engine::general_purpose::STANDARD.encode(pair));
        }
        "client_secret_post" => {
            form.append_pair("client_id", id);
            form.append_pair("client_secret", secret);
        }
        "none" => {
            form.append_pair("client_id", id);
        }
        "private_key_jwt" => {
            let (key, audience) = identity.jwt.as_ref().expect("chosen for a key");
            form.append_pair("client_id", id);
            form.append_pair(
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            );
            form.append_pair("client_assertion", &client_assertion(id, audience, key)?);
        }
        other => {
            return Err(Error::external(format!(
                "the client's registration asks for token endpoint authentication {other:?}, \
                 which kxen-agent does not speak"
            )));
        }
    }
    let mut call = agent
        .post(token_endpoint.as_str())
        .config()
        .timeout_global(Some(remaining(until)?))
        .build()
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Accept", "application/json");
    if let Some(basic) = basic {
        call = call.header("Authorization", format!("Basic {basic}"));
    }
    let mut response = call.send(form.finish().as_bytes()).map_err(|e| {
        Error::external(format!("the token request to {token_endpoint} failed: {e}"))
    })?;
    let status = response.status().as_u16();
    if (300..400).contains(&status) {
        return Err(Error::external(redirect_refused(
            &response,
            "the token endpoint",
            token_endpoint.as_str(),
        )));
    }
    let body = response
        .body_mut()
        .with_config()
        .limit(MAX_DOCUMENT)
        .read_to_vec()
        .map_err(|e| Error::external(format!("reading the token answer failed: {e}")))?;
    let answer: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if status != 200 {
        let error = answer["error"].as_str().unwrap_or("no error code");
        let description = answer["error_description"].as_str().unwrap_or_default();
        return Err(Error::external(format!(
            "the token endpoint {token_endpoint} refused the client (HTTP {status}, {error}{}{})",
            if description.is_empty() { "" } else { ": " },
            crate::text::preview(description, 200)
        )));
    }
    let Some(access_token) = answer["access_token"].as_str().filter(|t| !t.is_empty()) else {
        return Err(Error::external(
            "the token endpoint answered without an access_token",
        ));
    };
    if !answer["token_type"]
        .as_str()
        .is_some_and(|t| t.eq_ignore_ascii_case("bearer"))
    {
        return Err(Error::external(
            "the token endpoint answered a token that is not a Bearer token",
        ));
    }
    let refresh_token = answer["refresh_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    crate::redact::register_value(access_token);
    if let Some(t) = &refresh_token {
        crate::redact::register_value(t);
    }
    Ok(Token {
        access_token: access_token.to_string(),
        refresh_token,
        expires_in: answer["expires_in"].as_i64().filter(|s| *s > 0),
        scope: answer["scope"].as_str().map(str::to_string),
    })
}

/// Why a redirect answer is refused: no credential follows a redirect (it could lead to another
/// origin, which would then get the client's secret or code).
fn redirect_refused(response: &ureq::http::Response<ureq::Body>, what: &str, url: &str) -> String {
    let location = response
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .unwrap_or("nowhere");
    format!(
        "{what} {url} redirects to {} (HTTP {}); kxen-agent follows no redirect during \
         authorization",
        crate::text::preview(location, 120),
        response.status().as_u16()
    )
}

/// Refuses a protected-resource `resource` that is not this server (RFC 8707: a token for
/// another resource must not be asked for here).
fn check_resource(endpoint: &url::Url, resource: &str) -> Result<(), Error> {
    let parsed = url::Url::parse(resource).map_err(|_| {
        Error::external(format!(
            "the protected-resource metadata names resource {resource:?}, not a URL"
        ))
    })?;
    let path = parsed.path().trim_end_matches('/');
    let endpoint_path = endpoint.path().trim_end_matches('/');
    let covers = parsed.origin() == endpoint.origin()
        && (endpoint_path == path || endpoint_path.starts_with(&format!("{path}/")));
    if covers {
        Ok(())
    } else {
        Err(Error::external(format!(
            "the protected-resource metadata is for {}, not this server ({endpoint}): no token \
             is asked for another resource",
            crate::text::preview(resource, 120)
        )))
    }
}

/// A URL a secret or token may go to: `https://`, or `http://` on this machine.
pub(crate) fn safe_url(url: &url::Url, what: &str) -> Result<(), Error> {
    match url.scheme() {
        "https" => Ok(()),
        "http" if crate::net::is_loopback(url.as_str()) => Ok(()),
        _ => Err(Error::external(format!(
            "{what} is at {}: kxen-agent sends credentials only over https:// (or http:// on \
             this machine)",
            crate::text::preview(url.as_str(), 120)
        ))),
    }
}

pub(crate) fn remaining(until: Instant) -> Result<Duration, Error> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(Error::external(
            "the time (timeout_ms) ran out during authorization",
        ))
    } else {
        Ok(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_parsed() {
        let c = parse_challenge(
            r#"Bearer error="invalid_token", resource_metadata="http://x/.well-known/oauth-protected-resource/mcp", scope="a b""#,
        );
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("http://x/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.scope.as_deref(), Some("a b"));
        assert_eq!(parse_challenge("Basic realm=\"x\""), Challenge::default());
        assert_eq!(
            parse_challenge("Bearer scope=read").scope.as_deref(),
            Some("read")
        );
    }

    #[test]
    fn a_client_metadata_url_is_an_https_document_of_the_code_grant() {
        let table = |url: &str, client_id: Option<&str>| OAuthConfig {
            client_metadata_url: Some(url.into()),
            client_id: client_id.map(str::to_string),
            ..OAuthConfig::default()
        };
        assert_eq!(
            table("https://example.com/kxen.json", None).error("x"),
            None
        );
        for bad in [
            "http://example.com/kxen.json",
            "https://example.com/",
            "nonsense",
        ] {
            assert!(table(bad, None).error("x").is_some(), "{bad}");
        }
        assert!(
            table("https://example.com/kxen.json", Some("ci"))
                .error("x")
                .unwrap()
                .contains("not both")
        );
        let t = table("https://example.com/kxen.json", None);
        assert_eq!(t.store_client(), Some("https://example.com/kxen.json"));
    }

    #[test]
    fn a_client_assertion_is_an_es256_jwt_the_public_key_verifies() {
        use ring::signature::{self, KeyPair};
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &rng,
        )
        .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let pem = tmp.path().join("key.pem");
        let body = base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref());
        std::fs::write(
            &pem,
            format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"),
        )
        .unwrap();
        let key = read_private_key(&pem).unwrap();
        let jwt = client_assertion("kxen-ci", "https://as.example.com", &key).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let claims: Value = serde_json::from_slice(&b64.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["iss"], "kxen-ci");
        assert_eq!(claims["sub"], "kxen-ci");
        assert_eq!(claims["aud"], "https://as.example.com");
        assert!(claims["exp"].as_i64().unwrap() > claims["iat"].as_i64().unwrap());
        let pair = signature::EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
            &rng,
        )
        .unwrap();
        signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            pair.public_key().as_ref(),
        )
        .verify(
            format!("{}.{}", parts[0], parts[1]).as_bytes(),
            &b64.decode(parts[2]).unwrap(),
        )
        .unwrap();
        std::fs::write(&pem, "-----BEGIN EC PRIVATE KEY-----\nAAAA\n").unwrap();
        assert!(
            read_private_key(&pem)
                .unwrap_err()
                .contains("openssl pkcs8")
        );
    }

    #[test]
    fn the_resource_must_be_this_server() {
        let endpoint = url::Url::parse("https://mcp.example.com/api/mcp").unwrap();
        for ok in [
            "https://mcp.example.com/api/mcp",
            "https://mcp.example.com/api/",
            "https://mcp.example.com",
        ] {
            assert!(check_resource(&endpoint, ok).is_ok(), "{ok}");
        }
        for bad in [
            "https://other.example.com/api/mcp",
            "https://mcp.example.com/ap",
            "http://mcp.example.com/api/mcp",
            "nonsense",
        ] {
            assert!(check_resource(&endpoint, bad).is_err(), "{bad}");
        }
    }
}
