//! Who asked for a lock: the owner value every backend writes to its lock
//! and waiter records, and [`Owner`], its parsed form for status displays.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Who asked for a lock, as written in the lock's and waiters' records:
/// `<attempt> pid=<pid> host=<host> at=<unix ms>`, plus backend fields
/// (Redis adds `locker=<id>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The value as stored (its first line: an etcd fair holder's queue
    /// value lists the waiters behind it on the next lines).
    pub raw: String,
    /// The process id of the requester.
    pub pid: Option<u32>,
    /// The requester's host name.
    pub host: Option<String>,
    /// When the request was made, by the requester's clock. For a holder
    /// this is when it asked, so it includes any time spent waiting.
    pub requested_at: Option<SystemTime>,
}

impl Owner {
    /// Parses a stored owner value; fields it lacks are `None`.
    ///
    /// # Examples
    /// ```
    /// let owner = fairlock::provider::Owner::parse("u1f2e pid=42 host=web1 at=1700000000000");
    /// assert_eq!(owner.describe(), "web1:42");
    /// ```
    #[must_use]
    pub fn parse(raw: &str) -> Owner {
        let field = |name| field(raw, name);
        Owner {
            pid: field("pid").and_then(|p| p.parse().ok()),
            host: field("host").map(str::to_owned),
            requested_at: field("at")
                .and_then(|ms| ms.parse().ok())
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            raw: raw.to_owned(),
        }
    }

    /// The value of a `name=value` field of the raw value, such as a
    /// backend's own fields (`locker` on Redis).
    #[must_use]
    pub fn field(&self, name: &str) -> Option<&str> {
        field(&self.raw, name)
    }

    /// `host:pid`, or the raw value if it has neither.
    #[must_use]
    pub fn describe(&self) -> String {
        match (&self.host, self.pid) {
            (Some(host), Some(pid)) => format!("{host}:{pid}"),
            (None, Some(pid)) => format!("pid {pid}"),
            _ => self.raw.clone(),
        }
    }

    /// Time since the request, by this machine's clock (zero if the clocks
    /// disagree).
    #[must_use]
    pub fn age(&self) -> Option<Duration> {
        let at = self.requested_at?;
        Some(SystemTime::now().duration_since(at).unwrap_or_default())
    }
}

fn field<'a>(raw: &'a str, name: &str) -> Option<&'a str> {
    raw.split_whitespace()
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
}

/// The owner value of one attempt: unique (the attempt id), so comparing it
/// proves ownership, and readable in `etcdctl get` or `redis-cli`:
/// `<attempt> pid=<pid> host=<host> at=<unix ms of the request>`, then
/// `extra` fields if any.
#[cfg_attr(not(any(feature = "etcd", feature = "redis")), allow(dead_code))]
pub(crate) fn owner_value(attempt: &str, extra: &str) -> String {
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut value = format!(
        "{attempt} pid={} host={} at={at}",
        std::process::id(),
        hostname()
    );
    if !extra.is_empty() {
        value.push(' ');
        value.push_str(extra);
    }
    value
}

/// This machine's name, for people reading `fairlock status`.
fn hostname() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|s| s.trim().replace(char::is_whitespace, "_"))
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_values_parse_back() {
        let owner = Owner::parse(&owner_value("fabc", "locker=L1"));
        assert_eq!(owner.pid, Some(std::process::id()));
        assert_eq!(owner.host.as_deref(), Some(hostname()));
        assert!(owner.age().is_some());
        assert!(owner.raw.starts_with("fabc ") && owner.raw.ends_with(" locker=L1"));
        assert_eq!(owner.field("locker"), Some("L1"));
        assert_eq!(Owner::parse("plain").describe(), "plain");
    }
}
