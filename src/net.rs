//! Facts about network addresses that both the model providers and the MCP client need (on the
//! ground floor, so neither has to reach into the other).

/// Whether `endpoint`'s host is this machine (`localhost`, `127.x.x.x`, `[::1]`); an endpoint
/// that is not a URL is not.
pub fn is_loopback(endpoint: &str) -> bool {
    let Ok(url) = url::Url::parse(endpoint) else {
        return false;
    };
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}
