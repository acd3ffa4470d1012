//! One request of the demo, as its worker process reports it on stdout:
//! `REQUEST <process> <request> <asked ms> <granted ms> <released ms> <token>`,
//! times in milliseconds since the run's start by the worker's clock.

/// Any error of the demo, reported as one line.
pub type AnyError = Box<dyn std::error::Error + Send + Sync>;

/// The key every request asks for, under the run's prefix.
pub const LOCK_KEY: &str = "demo";

/// One granted request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub process: u64,
    /// The request's number within its process.
    pub request: u64,
    /// When the worker called `lock`.
    pub asked_ms: u64,
    /// When `lock` returned.
    pub granted_ms: u64,
    /// When the worker called `unlock`.
    pub released_ms: u64,
    /// The fencing token of the grant (the lock key's etcd revision).
    pub token: u64,
}

impl Request {
    /// The line a worker prints for this request.
    pub fn line(&self) -> String {
        format!(
            "REQUEST {} {} {} {} {} {}",
            self.process,
            self.request,
            self.asked_ms,
            self.granted_ms,
            self.released_ms,
            self.token
        )
    }

    /// Parses a worker's line; `None` if it is not a request line.
    pub fn parse(line: &str) -> Option<Request> {
        let fields: Vec<u64> = line
            .strip_prefix("REQUEST ")?
            .split(' ')
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        let [process, request, asked_ms, granted_ms, released_ms, token] = fields[..] else {
            return None;
        };
        Some(Request {
            process,
            request,
            asked_ms,
            granted_ms,
            released_ms,
            token,
        })
    }

    /// How long the request waited for its grant.
    pub fn wait_ms(&self) -> u64 {
        self.granted_ms.saturating_sub(self.asked_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let r = Request {
            process: 2,
            request: 7,
            asked_ms: 40,
            granted_ms: 95,
            released_ms: 160,
            token: 1234,
        };
        assert_eq!(Request::parse(&r.line()), Some(r));
        for bad in [
            "",
            "REQUEST",
            "REQUEST 1 2 3 4 5",
            "REQUEST 1 2 3 4 5 6 7",
            "REQUEST 1 2 3 4 5 x",
        ] {
            assert_eq!(Request::parse(bad), None, "{bad:?}");
        }
    }
}
