//! Which hosts the `webhook` strategy may call (`ORACLE_WEBHOOK_ALLOWED_HOSTS`).
//!
//! Whoever may write a policy may point the oracle's outbound POSTs at a URL; without a limit that
//! is server-side request forgery: the oracle would reach, from inside the network, whatever its
//! own address can (metadata services, admin ports, other tenants' endpoints). So the operator
//! names the hosts once, in the configuration, and every URL is judged against that list — when a
//! policy is written and again before each call, since a stored policy may predate the list or
//! come from a replica configured differently.
//!
//! The check works on the very [`Url`] the HTTP client is given, after the parser's
//! normalisation (lower case, IDNA, `http://0x7f.1/` → `127.0.0.1`, userinfo split off), so the
//! host judged is the host connected to. The list is an allow-list: a spelling the parser does
//! not reduce to a listed entry (`[::ffff:127.0.0.1]`, `0.0.0.0`) is refused, never let through.
//! Names are matched as written, not resolved: a listed name is trusted to resolve somewhere
//! harmless.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::Url;

/// The variable and flag that set the list, as messages name them.
pub const SETTING: &str = "ORACLE_WEBHOOK_ALLOWED_HOSTS (--webhook-allowed-hosts)";

/// The hosts webhook URLs may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookHosts {
    entries: Vec<Entry>,
    /// Open mode (no admin token): whoever can write a policy already runs on this machine, so
    /// its loopback endpoints (`localhost`, 127.0.0.0/8, `::1`) are allowed as well.
    loopback: bool,
}

/// Loopback hosts only, as in open mode: an oracle built in-process (tests, tools) can reach a
/// local endpoint and nothing else.
impl Default for WebhookHosts {
    fn default() -> Self {
        Self::loopback_only()
    }
}

/// One listed host, with the one port it is allowed on (`None`: any).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    host: Pattern,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// A name (lower case, without a trailing dot) or an address.
    Exact(Host),
    /// `*.example.com`: any name ending in `.example.com` (not `example.com` itself).
    Subdomains(String),
}

/// A URL's host as the check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// The host of a parsed URL. `Url` already lower-cases names, applies IDNA and reduces every
    /// IPv4 spelling of a special scheme to dotted decimal; only a trailing dot is left to drop.
    fn of(url: &Url) -> Option<Self> {
        let text = url.host_str()?;
        if let Some(v6) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return v6.parse::<Ipv6Addr>().ok().map(|ip| Self::Ip(ip.into()));
        }
        if let Ok(v4) = text.parse::<Ipv4Addr>() {
            return Some(Self::Ip(v4.into()));
        }
        let name = text.strip_suffix('.').unwrap_or(text);
        (!name.is_empty()).then(|| Self::Name(name.to_owned()))
    }

    fn is_loopback(&self) -> bool {
        match self {
            Self::Name(name) => name == "localhost",
            Self::Ip(ip) => ip.is_loopback(),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Self::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

/// Why a URL may not be called. Its text names the host and port judged (never the rest of the
/// URL, which may carry credentials) and says how to allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not a URL at all.
    Unparsable(String),
    /// A scheme other than `http` or `https`.
    Scheme(String),
    /// No host to judge (cannot happen for `http`/`https`, refused all the same).
    NoHost,
    /// A host (and port) not on the list.
    Host { host: String, port: u16 },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unparsable(why) => write!(f, "is not a valid URL: {why}"),
            Self::Scheme(scheme) => {
                write!(f, "must be an http:// or https:// URL, not {scheme}://")
            }
            Self::NoHost => f.write_str("must name a host"),
            Self::Host { host, port } => write!(
                f,
                "names host {host} (port {port}), which webhooks may not call: the operator \
                 allows it by adding `{host}` (or `{host}:{port}`) to {SETTING} on every replica"
            ),
        }
    }
}

impl WebhookHosts {
    /// Loopback only: open mode with an empty list. What an oracle built without a list uses.
    pub fn loopback_only() -> Self {
        Self {
            entries: Vec::new(),
            loopback: true,
        }
    }

    /// Reads a comma-separated list (`hook.internal, 10.0.0.7:9000, [fd00::1], *.hooks.internal`);
    /// empty items are skipped. `loopback` adds loopback hosts (open mode). Fails naming the first
    /// entry that is not a host, an address or `*.` and a name, each optionally with `:port`.
    pub fn parse(list: &str, loopback: bool) -> Result<Self, String> {
        let entries = list
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| Entry::parse(item).map_err(|why| format!("`{item}` {why}")))
            .collect::<Result<_, _>>()?;
        Ok(Self { entries, loopback })
    }

    /// Whether `url` may be called; if not, why.
    pub fn allows(&self, url: &Url) -> Result<(), Refusal> {
        match url.scheme() {
            "http" | "https" => {}
            other => return Err(Refusal::Scheme(other.to_owned())),
        }
        let host = Host::of(url).ok_or(Refusal::NoHost)?;
        let port = url.port_or_known_default().ok_or(Refusal::NoHost)?;
        let listed = self.entries.iter().any(|entry| entry.matches(&host, port));
        if listed || (self.loopback && host.is_loopback()) {
            Ok(())
        } else {
            Err(Refusal::Host {
                host: host.to_string(),
                port,
            })
        }
    }

    /// Parses `url` and checks it: the URL to call, or why not.
    pub fn check(&self, url: &str) -> Result<Url, Refusal> {
        let parsed = Url::parse(url).map_err(|e| Refusal::Unparsable(e.to_string()))?;
        self.allows(&parsed)?;
        Ok(parsed)
    }
}

impl Entry {
    fn parse(item: &str) -> Result<Self, &'static str> {
        const SHAPE: &str = "is not a host name, an IP address or `*.` and a name, each \
                             optionally with `:port` (no scheme, path or user)";
        if item
            .chars()
            .any(|c| matches!(c, '/' | '\\' | '@' | '?' | '#') || c.is_whitespace())
        {
            return Err(SHAPE);
        }
        let (host, port) = split_port(item).ok_or(SHAPE)?;
        let port = match port {
            None => None,
            Some(digits) => Some(
                digits
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0 && digits.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or("has a port that is not from 1 to 65535")?,
            ),
        };
        let (wildcard, host) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if host.contains('*') {
            return Err("may use `*` only as `*.` before a name");
        }
        // The same parser as the URLs judged, so both sides are normalised alike; a bare IPv6
        // address gets the brackets a URL needs.
        let authority = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let parsed = Url::parse(&format!("http://{authority}/")).map_err(|_| SHAPE)?;
        if parsed.path() != "/" || !parsed.username().is_empty() || parsed.port().is_some() {
            return Err(SHAPE);
        }
        let host = match (Host::of(&parsed).ok_or(SHAPE)?, wildcard) {
            (Host::Name(name), true) => Pattern::Subdomains(name),
            (Host::Ip(_), true) => return Err("puts `*.` before an address, not a name"),
            (exact, false) => Pattern::Exact(exact),
        };
        Ok(Self { host, port })
    }

    fn matches(&self, host: &Host, port: u16) -> bool {
        let host_matches = match (&self.host, host) {
            (Pattern::Exact(listed), host) => listed == host,
            (Pattern::Subdomains(suffix), Host::Name(name)) => name
                .strip_suffix(suffix.as_str())
                .is_some_and(|label| label.len() > 1 && label.ends_with('.')),
            (Pattern::Subdomains(_), Host::Ip(_)) => false,
        };
        host_matches && self.port.is_none_or(|listed| listed == port)
    }
}

/// Splits `host:port`, `[v6]:port`, `[v6]` or a bare IPv6 address into host and port text; `None`
/// when the brackets do not pair.
fn split_port(item: &str) -> Option<(&str, Option<&str>)> {
    if item.starts_with('[') {
        let end = item.find(']')?;
        let (host, rest) = item.split_at(end + 1);
        return match rest {
            "" => Some((host, None)),
            _ => Some((host, Some(rest.strip_prefix(':')?))),
        };
    }
    match item.matches(':').count() {
        0 => Some((item, None)),
        1 => item.split_once(':').map(|(host, port)| (host, Some(port))),
        // More than one colon: an IPv6 address without brackets (and so without a port).
        _ => item.parse::<Ipv6Addr>().ok().map(|_| (item, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str, loopback: bool) -> WebhookHosts {
        WebhookHosts::parse(list, loopback).unwrap()
    }

    fn allowed(hosts: &WebhookHosts, url: &str) -> bool {
        hosts.check(url).is_ok()
    }

    #[test]
    fn an_empty_list_in_admin_mode_allows_nothing_and_open_mode_allows_loopback() {
        let none = hosts("", false);
        let open = hosts(" , ", true);
        for url in [
            "http://localhost/x",
            "http://LOCALHOST./x",
            "http://127.0.0.1:9000/choose",
            "http://127.1.2.3/",
            "https://[::1]:8443/",
            "http://[0:0:0:0:0:0:0:1]/",
        ] {
            assert!(!allowed(&none, url), "{url}");
            assert!(allowed(&open, url), "{url}");
        }
        assert_eq!(WebhookHosts::loopback_only(), open);
        for url in [
            "http://10.0.0.1/",
            "http://hook.example/",
            "http://localhost.evil.example/",
            "http://evil.localhost/",
            // Not loopback by these rules, though some stacks route them there: refused.
            "http://0.0.0.0/",
            "http://0/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::]/",
        ] {
            assert!(!allowed(&open, url), "{url}");
        }
    }

    #[test]
    fn the_host_judged_is_the_host_connected_to() {
        let list = hosts("allowed.example", false);
        assert!(allowed(&list, "http://allowed.example/choose"));
        for url in [
            "http://allowed.example@evil.example/",
            "http://allowed.example:pw@evil.example/",
            "http://evil.example/allowed.example",
            "http://evil.example/?to=allowed.example",
            "http://evil.example/#allowed.example",
            "http://allowed.example.evil.example/",
            "http://evilallowed.example/",
        ] {
            assert_eq!(
                list.check(url),
                Err(Refusal::Host {
                    host: url
                        .trim_start_matches("http://")
                        .rsplit_once('@')
                        .map_or(url.trim_start_matches("http://"), |(_, h)| h)
                        .split(['/', '?', '#'])
                        .next()
                        .unwrap()
                        .to_owned(),
                    port: 80
                }),
                "{url}"
            );
        }
        // Userinfo before an allowed host still reaches the allowed host.
        assert!(allowed(&list, "http://evil.example@allowed.example/"));
        // A backslash is a slash in http URLs: the host ends before it.
        assert!(allowed(&list, "http://allowed.example\\@evil.example/"));
    }

    #[test]
    fn names_match_without_regard_to_case_or_a_trailing_dot() {
        let list = hosts("Hook.Internal.", false);
        for url in [
            "http://hook.internal/",
            "http://HOOK.internal./",
            "https://hook.INTERNAL:9443/x",
        ] {
            assert!(allowed(&list, url), "{url}");
        }
        assert!(!allowed(&list, "http://hook.internal../"));
    }

    #[test]
    fn ports_are_any_unless_listed() {
        let list = hosts(
            "a.example, b.example:9000, c.example:80, d.example:443",
            false,
        );
        assert!(allowed(&list, "http://a.example:1234/"));
        assert!(allowed(&list, "http://b.example:9000/"));
        assert!(!allowed(&list, "http://b.example/"));
        assert!(!allowed(&list, "http://b.example:9001/"));
        assert!(allowed(&list, "http://c.example/"));
        assert!(!allowed(&list, "https://c.example/"));
        assert!(allowed(&list, "https://d.example/"));
        assert!(allowed(&list, "http://d.example:443/"));
        assert_eq!(
            list.check("http://b.example:9001/"),
            Err(Refusal::Host {
                host: "b.example".into(),
                port: 9001
            })
        );
    }

    #[test]
    fn ip_literals_in_every_spelling_the_parser_normalises() {
        let list = hosts("10.0.0.7, [fd00::1]:9000, 2001:db8::1", false);
        for url in [
            "http://10.0.0.7/",
            "http://167772167/",
            "http://0xa.0.0.7/",
            "http://012.0.0.7/",
            "http://10.0.7/",
            "http://10.0.0.7./",
            "http://[fd00:0:0:0:0:0:0:1]:9000/",
            "http://[FD00::1]:9000/",
            "http://[2001:db8::1]/",
            "http://[2001:db8::1]:5/",
        ] {
            assert!(allowed(&list, url), "{url}");
        }
        for url in [
            "http://[fd00::1]/",
            "http://10.0.0.8/",
            "http://[2001:db8::2]/",
        ] {
            assert!(!allowed(&list, url), "{url}");
        }
        // What the parser makes of the loopback spellings: always 127.0.0.1.
        for url in [
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "http://127.1/",
        ] {
            assert_eq!(
                Url::parse(url).unwrap().host_str(),
                Some("127.0.0.1"),
                "{url}"
            );
            assert!(allowed(&hosts("", true), url), "{url}");
            assert_eq!(
                hosts("", false).check(url),
                Err(Refusal::Host {
                    host: "127.0.0.1".into(),
                    port: 80
                })
            );
            assert!(allowed(&hosts("127.0.0.1", false), url), "{url}");
        }
        // An entry is normalised the same way.
        assert!(allowed(&hosts("0x7f.1", false), "http://127.0.0.1/"));
    }

    #[test]
    fn a_wildcard_covers_subdomains_only() {
        let list = hosts("*.hooks.example", false);
        assert!(allowed(&list, "http://a.hooks.example/"));
        assert!(allowed(&list, "http://a.b.HOOKS.example./"));
        for url in [
            "http://hooks.example/",
            "http://evilhooks.example/",
            "http://hooks.example.evil/",
            "http://.hooks.example/",
        ] {
            assert!(!allowed(&list, url), "{url}");
        }
    }

    #[test]
    fn only_http_and_https_are_called() {
        let list = hosts("hook.example", true);
        for url in [
            "ftp://hook.example/",
            "file:///etc/passwd",
            "gopher://hook.example/",
            "ws://hook.example/",
            "unix:/var/run/x.sock",
        ] {
            assert!(
                matches!(list.check(url), Err(Refusal::Scheme(_))),
                "{url}: {:?}",
                list.check(url)
            );
        }
        assert!(matches!(
            list.check("not a url"),
            Err(Refusal::Unparsable(_))
        ));
        assert!(matches!(list.check("http://"), Err(Refusal::Unparsable(_))));
    }

    #[test]
    fn entries_that_are_not_hosts_are_refused_naming_them() {
        for bad in [
            "http://hook.example",
            "hook.example/choose",
            "user@hook.example",
            "hook.example:",
            "hook.example:0",
            "hook.example:65536",
            "hook.example:+80",
            "*",
            "*.",
            "a.*.example",
            "*.10.0.0.1",
            "[fd00::1",
            "[fd00::1]x",
            "fd00::1:9000:x",
            "hook example",
        ] {
            let error = WebhookHosts::parse(&format!("ok.example,{bad}"), false).unwrap_err();
            assert!(error.contains(&format!("`{bad}`")), "{bad}: {error}");
        }
    }

    #[test]
    fn a_refusal_says_how_to_allow_the_host_without_the_rest_of_the_url() {
        let refusal = hosts("", false)
            .check("https://user:s3cret@hook.example:8443/choose?token=t0ken")
            .unwrap_err()
            .to_string();
        assert!(refusal.contains("hook.example:8443"), "{refusal}");
        assert!(
            refusal.contains("ORACLE_WEBHOOK_ALLOWED_HOSTS"),
            "{refusal}"
        );
        assert!(
            !refusal.contains("s3cret") && !refusal.contains("t0ken"),
            "{refusal}"
        );
    }
}
