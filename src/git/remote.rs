//! Remote URL normalization: one repository, one name, whatever the transport.
//!
//! `https://tok@github.com/o/r.git`, `git@github.com:o/r.git`, `ssh://git@github.com/o/r` and
//! `ssh://git@github.com:22/o/r` all normalize to `github.com/o/r`. The normalized form holds no
//! credential by construction: it is built from the host and the path only, never by editing the
//! raw URL, so a token in the userinfo, the password or the query string cannot survive.
//!
//! Rules (documented in `docs/state-format.md`, "Workspace identity"):
//! - the scheme (`https`, `http`, `ssh`, scp-like `host:path`, `git`) is dropped;
//! - userinfo (user, password, token) is dropped;
//! - the port is dropped: it names the transport, not the repository (a server commonly serves
//!   one repository over ssh on 22 or 2222 and over https on 443);
//! - the host is lower-cased (DNS names are case-insensitive); the path keeps its case (many
//!   servers are case-sensitive);
//! - query and fragment are dropped; duplicate, leading and trailing `/` are removed, then one
//!   trailing `.git` (and any `/` before it) is removed;
//! - a local remote (`/srv/r.git`, `../r`, `file://…`) has no host and is not a network identity:
//!   it names a place on this machine. [`normalize`] returns `None` for it.

/// The normalized form `host/path` of a network remote URL, or `None` for a local path, a
/// `file://` URL, or a URL that does not parse.
pub fn normalize(url: &str) -> Option<String> {
    let parsed = gix::url::parse(url.trim()).ok()?;
    normalize_parsed(&parsed)
}

/// [`normalize`] for a URL gix already parsed (a remote read from the repository's config).
pub fn normalize_parsed(url: &gix::Url) -> Option<String> {
    if matches!(url.scheme, gix::url::Scheme::File) {
        return None;
    }
    let host = url
        .host()?
        .trim()
        .trim_matches(['[', ']'])
        .to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    let path = url.path_query_fragment().path.to_string();
    // `path_query_fragment` only splits http(s) URLs; an scp-like or ssh path has no query.
    let mut segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if let Some(last) = segments.last_mut() {
        if let Some(stripped) = last.strip_suffix(".git") {
            *last = stripped;
        }
        if last.is_empty() {
            segments.pop();
        }
    }
    if segments.is_empty() {
        return Some(host);
    }
    Some(format!("{host}/{}", segments.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_repository_in_every_transport() {
        let forms = [
            "https://github.com/o/r",
            "https://github.com/o/r.git",
            "https://github.com/o/r/",
            "https://github.com/o/r.git/",
            "https://tok@github.com/o/r.git",
            "https://user:ghp_secret@GitHub.COM/o/r.git",
            "https://oauth2:glpat-xyz@github.com:443/o/r.git?private_token=abc#frag",
            "http://github.com/o/r",
            "git@github.com:o/r.git",
            "git@github.com:/o/r.git",
            "github.com:o/r",
            "ssh://git@github.com/o/r",
            "ssh://git@github.com:22/o/r.git",
            "ssh://git@github.com:2222/o/r.git",
            "git://github.com/o/r.git",
            "https://github.com//o//r.git",
        ];
        for form in forms {
            assert_eq!(
                normalize(form).as_deref(),
                Some("github.com/o/r"),
                "for {form}"
            );
        }
    }

    #[test]
    fn different_repositories_stay_different() {
        assert_ne!(
            normalize("git@github.com:o/r.git"),
            normalize("git@github.com:o/R.git")
        );
        assert_ne!(
            normalize("git@github.com:o/r.git"),
            normalize("git@gitlab.com:o/r.git")
        );
        assert_eq!(
            normalize("https://gitlab.example.com/group/sub/proj.git").as_deref(),
            Some("gitlab.example.com/group/sub/proj")
        );
    }

    #[test]
    fn local_remotes_are_not_network_identities() {
        for local in ["/srv/repos/r.git", "../r", "file:///srv/r.git", "./r"] {
            assert_eq!(normalize(local), None, "for {local}");
        }
    }

    proptest! {
        /// Whatever the credential, it never reaches the normalized form, and the transport
        /// never changes it.
        #[test]
        fn credentials_never_survive(
            token in "[A-Za-z0-9_]{8,30}",
            owner in "[a-z][a-z0-9-]{0,10}",
            repo in "[a-z][a-z0-9_.-]{0,10}[a-z0-9]",
            port in proptest::option::of(1u16..65535),
        ) {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            let https = format!("https://x-access-token:{token}@example.org{port}/{owner}/{repo}.git");
            let ssh = format!("ssh://{token}@example.org{port}/{owner}/{repo}.git/");
            let scp = format!("git@example.org:{owner}/{repo}.git");
            let a = normalize(&https).unwrap();
            prop_assert!(!a.contains(&token));
            prop_assert_eq!(&a, &normalize(&ssh).unwrap());
            prop_assert_eq!(&a, &normalize(&scp).unwrap());
        }

        /// Arbitrary input never panics.
        #[test]
        fn never_panics(s in "\\PC{0,80}") {
            let _ = normalize(&s);
        }
    }
}
