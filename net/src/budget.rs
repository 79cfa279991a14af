//! How many times each cause is retried. The defaults are in [`Budget::default`] and documented
//! in docs/queue.md ("Network failures"); `HARCH_RETRIES_<CAUSE>` overrides one.

use crate::Cause;

/// Retries of one request after its first try, by cause. A client's own cap (its retry
/// policy's `max_retries`) still bounds every one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Nothing listens: a stopped server does not start by itself in the next seconds.
    pub refused: u32,
    /// The name does not resolve (no network, a typo).
    pub dns: u32,
    /// The handshake failed: the same certificate fails again.
    pub tls: u32,
    /// No answer to connect (a dropped route).
    pub connect_timeout: u32,
    /// Connected, no answer in time.
    pub timeout: u32,
    /// The connection broke mid-request.
    pub reset: u32,
    /// HTTP 429.
    pub rate_limited: u32,
    /// HTTP 5xx (and 408).
    pub server_error: u32,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            refused: 1,
            dns: 1,
            tls: 0,
            connect_timeout: 1,
            timeout: 2,
            reset: 8,
            rate_limited: 8,
            server_error: 8,
        }
    }
}

/// Picks one field of a [`Budget`].
pub type Field = fn(&mut Budget) -> &mut u32;

/// The variables that override a [`Budget`], with the field each sets.
pub const ENV: [(&str, Field); 8] = [
    ("HARCH_RETRIES_REFUSED", |b| &mut b.refused),
    ("HARCH_RETRIES_DNS", |b| &mut b.dns),
    ("HARCH_RETRIES_TLS", |b| &mut b.tls),
    ("HARCH_RETRIES_CONNECT_TIMEOUT", |b| &mut b.connect_timeout),
    ("HARCH_RETRIES_TIMEOUT", |b| &mut b.timeout),
    ("HARCH_RETRIES_RESET", |b| &mut b.reset),
    ("HARCH_RETRIES_RATE_LIMITED", |b| &mut b.rate_limited),
    ("HARCH_RETRIES_SERVER_ERROR", |b| &mut b.server_error),
];

impl Budget {
    /// Retries `cause` gets; a permanent answer (401, 403, 404, other 4xx) none, and an
    /// unclassified failure as many as the client's own cap allows.
    pub fn retries(&self, cause: Cause) -> u32 {
        match cause {
            Cause::Refused => self.refused,
            Cause::Dns => self.dns,
            Cause::Tls => self.tls,
            Cause::ConnectTimeout => self.connect_timeout,
            Cause::Timeout => self.timeout,
            Cause::Reset => self.reset,
            Cause::Status(429) => self.rate_limited,
            Cause::Status(s) if s >= 500 || s == 408 => self.server_error,
            Cause::Status(_) => 0,
            Cause::Other => u32::MAX,
        }
    }

    /// The defaults with the `HARCH_RETRIES_*` overrides `get` finds; a value that is not a
    /// number is an error naming the variable.
    pub fn with_env(mut self, get: impl Fn(&str) -> Option<String>) -> Result<Budget, String> {
        for (key, field) in ENV {
            if let Some(v) = get(key) {
                *field(&mut self) = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("environment variable {key}=`{v}` is not a number"))?;
            }
        }
        Ok(self)
    }

    /// [`Budget::with_env`] over the process environment; a bad value keeps the default and
    /// says so on stderr (the budget is read where no error can be returned).
    pub fn from_env() -> Budget {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Budget::default().with_env(get).unwrap_or_else(|e| {
            eprintln!("warning: {e}; using the default retry budget");
            Budget::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_get_their_own_budget_and_the_environment_overrides_it() {
        let b = Budget::default();
        assert_eq!(b.retries(Cause::Refused), 1);
        assert_eq!(b.retries(Cause::Status(404)), 0);
        assert_eq!(b.retries(Cause::Status(503)), 8);
        let b = Budget::default()
            .with_env(|k| (k == "HARCH_RETRIES_REFUSED").then(|| "0".into()))
            .unwrap();
        assert_eq!(b.retries(Cause::Refused), 0);
        let e = Budget::default()
            .with_env(|k| (k == "HARCH_RETRIES_DNS").then(|| "many".into()))
            .unwrap_err();
        assert!(e.contains("HARCH_RETRIES_DNS"), "{e}");
    }
}
