//! What a failed HTTP request says about its cause. HTTP clients report a refused connection,
//! a name that does not resolve and a certificate the system does not trust all as "error
//! sending request"; the cause is in the error's source chain (an `io::Error` kind, the
//! resolver's or the TLS library's message). [`Cause::of`] walks that chain, [`Cause::hint`]
//! says what to check, and [`Budget`] says how often each cause is worth retrying: a refused
//! connection to a local server does not start listening in the next minute, a 503 often
//! recovers in seconds.
//!
//! Pure std: the Hub client and the agent backends use it with their own HTTP client.

mod budget;

pub use budget::{Budget, ENV as BUDGET_ENV};

use std::error::Error;
use std::fmt;

/// Why a request failed, as far as the client and the answer tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// Nothing listens at the host and port (TCP RST on connect).
    Refused,
    /// The host name does not resolve (no network, a typo, no DNS server).
    Dns,
    /// The TLS handshake failed (certificate, protocol, plain HTTP on an https URL).
    Tls,
    /// No answer to the connection attempt within the connect timeout (a dropped route).
    ConnectTimeout,
    /// Connected, but the answer did not come in time.
    Timeout,
    /// The connection broke mid-request (reset, closed early, truncated body).
    Reset,
    /// The server answered with this HTTP status.
    Status(u16),
    /// None of the above could be told from the error.
    Other,
}

impl Cause {
    /// The cause of `err`, from its whole source chain. `timeout` and `connect` are what the
    /// client itself knows (`reqwest::Error::is_timeout`, `is_connect`).
    pub fn of(err: &(dyn Error + 'static), timeout: bool, connect: bool) -> Cause {
        let mut found = None;
        let mut text = String::new();
        let mut cur: Option<&(dyn Error + 'static)> = Some(err);
        while let Some(e) = cur {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind as K;
                let by_kind = match io.kind() {
                    K::ConnectionRefused => Some(Cause::Refused),
                    K::ConnectionReset
                    | K::ConnectionAborted
                    | K::BrokenPipe
                    | K::UnexpectedEof
                    | K::NotConnected => Some(Cause::Reset),
                    K::TimedOut => Some(Cause::Timeout),
                    _ => None,
                };
                found = found.or(by_kind);
            }
            text.push_str(&e.to_string().to_ascii_lowercase());
            text.push('\n');
            cur = e.source();
        }
        Cause::from_text(&text, found, timeout, connect)
    }

    /// The cause of an error known only by its message (a CLI's stderr, a logged chain).
    pub fn of_message(message: &str) -> Cause {
        Cause::from_text(&message.to_ascii_lowercase(), None, false, false)
    }

    fn from_text(text: &str, by_kind: Option<Cause>, timeout: bool, connect: bool) -> Cause {
        let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
        // The resolver and TLS say what failed only in words; an io kind is exact.
        if has(&[
            "dns error",
            "failed to lookup address",
            "name or service not known",
            "nodename nor servname",
            "no address associated",
            "temporary failure in name resolution",
        ]) {
            return Cause::Dns;
        }
        if let Some(c) = by_kind.filter(|c| *c == Cause::Refused) {
            return c;
        }
        if has(&["connection refused"]) {
            return Cause::Refused;
        }
        if has(&[
            "certificate",
            "tls handshake",
            "invalid peer",
            "ssl",
            "alertreceived",
            "handshake failure",
            "corrupt message",
            "invalid content type",
        ]) {
            return Cause::Tls;
        }
        if timeout || by_kind == Some(Cause::Timeout) || has(&["timed out", "deadline has elapsed"])
        {
            return if connect {
                Cause::ConnectTimeout
            } else {
                Cause::Timeout
            };
        }
        if let Some(c) = by_kind {
            return c;
        }
        if has(&[
            "connection reset",
            "connection closed",
            "broken pipe",
            "incomplete message",
            "unexpected eof",
            "truncated",
        ]) {
            return Cause::Reset;
        }
        Cause::Other
    }

    /// Whether a later try of the same request may succeed without anyone changing anything.
    pub fn transient(self) -> bool {
        match self {
            Cause::Status(s) => s == 408 || s == 429 || s >= 500,
            Cause::Tls => false,
            _ => true,
        }
    }

    /// Whether the server was never reached: the name, the route or the listener is missing.
    pub fn unreachable(self) -> bool {
        matches!(
            self,
            Cause::Refused | Cause::Dns | Cause::Tls | Cause::ConnectTimeout
        )
    }

    /// A short name: `connection refused`, `DNS failure`, `HTTP 503`.
    pub fn label(self) -> String {
        match self {
            Cause::Refused => "connection refused".into(),
            Cause::Dns => "DNS failure".into(),
            Cause::Tls => "TLS failure".into(),
            Cause::ConnectTimeout => "connect timed out".into(),
            Cause::Timeout => "timed out".into(),
            Cause::Reset => "connection dropped".into(),
            Cause::Status(s) => format!("HTTP {s}"),
            Cause::Other => "request failed".into(),
        }
    }

    /// What to check, for a request to `url` (whose host and port the hint names).
    pub fn hint(self, url: &str) -> String {
        let host = host_of(url);
        match self {
            Cause::Refused => format!(
                "nothing listens at {host}: start the server, or check the URL's host and port"
            ),
            Cause::Dns => format!(
                "the name in {host} does not resolve: check its spelling, the network and DNS \
                 (offline, nothing resolves)"
            ),
            Cause::Tls => format!(
                "the TLS handshake with {host} failed: check the scheme (https to a plain-HTTP \
                 server?), the system's CA certificates, or a proxy that intercepts TLS"
            ),
            Cause::ConnectTimeout => format!(
                "{host} did not answer the connection: check the network, a firewall or a proxy"
            ),
            Cause::Timeout => format!(
                "{host} accepted the request but did not answer in time: the server may be \
                 overloaded; raise the timeout if the answer is slow by nature"
            ),
            Cause::Reset => {
                format!("the connection to {host} broke mid-request: usually passing")
            }
            Cause::Status(401) => {
                "the server refused the credential: check the key or token is set and valid".into()
            }
            Cause::Status(403) => {
                "the credential has no access to this resource: check its scopes or permissions"
                    .into()
            }
            Cause::Status(404) => format!(
                "{host} has nothing at this path: check the base URL (an API's usually ends in \
                 /v1) and the model or repository name"
            ),
            Cause::Status(429) => {
                "rate-limited: the server asks for fewer requests; wait, or lower concurrency"
                    .into()
            }
            Cause::Status(s) if s >= 500 => {
                format!("{host} failed to answer (server error): usually passing")
            }
            Cause::Status(s) => format!("{host} refused the request (HTTP {s})"),
            Cause::Other => format!("the request to {host} failed"),
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// `host:port` of a URL (the whole text when it is not one).
pub fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

/// Whether `url` names this machine (a local server: a refused connection there is a server
/// that is not running, not a network having a moment).
pub fn is_local(url: &str) -> bool {
    let host = host_of(url);
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name == "localhost" || name == "::1" || name.starts_with("127.") || name == "0.0.0.0"
}

/// `cause: hint` as one line.
pub fn explain(cause: Cause, url: &str) -> String {
    format!("{}: {}", cause.label(), cause.hint(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrap(&'static str, Box<dyn Error + 'static>);
    impl fmt::Display for Wrap {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl Error for Wrap {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(self.1.as_ref())
        }
    }

    #[test]
    fn a_refused_connection_is_found_under_the_wrappers() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = Wrap(
            "error sending request",
            Box::new(Wrap("client error (Connect)", Box::new(io))),
        );
        assert_eq!(Cause::of(&e, false, true), Cause::Refused);
    }

    #[test]
    fn a_real_refused_socket_is_refused() {
        // A port just closed: nothing listens there.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let err = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap_err();
        assert_eq!(Cause::of(&err, false, true), Cause::Refused);
    }

    #[test]
    fn dns_tls_and_timeouts_are_told_apart() {
        let dns = Wrap(
            "client error (Connect)",
            Box::new(Wrap(
                "dns error",
                Box::new(std::io::Error::other(
                    "failed to lookup address information: Name or service not known",
                )),
            )),
        );
        assert_eq!(Cause::of(&dns, false, true), Cause::Dns);
        let tls = Wrap(
            "client error (Connect)",
            Box::new(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "invalid peer certificate: UnknownIssuer",
            )),
        );
        assert_eq!(Cause::of(&tls, false, true), Cause::Tls);
        let slow = Wrap("operation timed out", Box::new(std::io::Error::other("x")));
        assert_eq!(Cause::of(&slow, true, true), Cause::ConnectTimeout);
        assert_eq!(Cause::of(&slow, true, false), Cause::Timeout);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(Cause::of(&reset, false, false), Cause::Reset);
        assert_eq!(Cause::of_message("weird"), Cause::Other);
    }

    #[test]
    fn hints_name_the_host_and_what_to_check() {
        let url = "http://user@127.0.0.1:9/v1/chat/completions";
        assert_eq!(host_of(url), "127.0.0.1:9");
        assert!(
            is_local(url) && is_local("http://[::1]:8/") && !is_local("https://huggingface.co")
        );
        let h = explain(Cause::Refused, url);
        assert!(
            h.starts_with("connection refused: nothing listens at 127.0.0.1:9"),
            "{h}"
        );
        for (c, word) in [
            (Cause::Dns, "resolve"),
            (Cause::Tls, "certificates"),
            (Cause::Status(401), "credential"),
            (Cause::Status(403), "access"),
            (Cause::Status(404), "base URL"),
            (Cause::Status(429), "rate-limited"),
            (Cause::Status(503), "server error"),
        ] {
            assert!(c.hint(url).contains(word), "{c}: {}", c.hint(url));
        }
        assert!(!Cause::Status(404).transient() && Cause::Status(503).transient());
    }
}
