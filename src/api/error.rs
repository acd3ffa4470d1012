//! The crate's one error type.

use std::time::Duration;

/// A boxed cause, kept behind [`std::error::Error::source`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in fairlock.
///
/// "Someone else holds the lock" is not an error: [`crate::Locker::try_lock`]
/// answers `Ok(None)` for it. Each message describes this layer only; the
/// underlying cause, if any, is available through
/// [`source`](std::error::Error::source).
///
/// `Debug` reads like `Display` (so `fn main() -> fairlock::Result<()>`
/// prints a sentence, not a struct), followed by the innermost cause when
/// it adds something; `{:#?}` lists every cause in the chain.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `get_locker` was called before any provider was registered.
    #[error(
        "no locker provider is registered: call fairlock::register_from_env().await, \
         fairlock::etcd::register(config).await or fairlock::redis::register(config).await \
         (or fairlock::register_locker_provider) before fairlock::get_locker"
    )]
    NoProvider,

    /// The key cannot be used as a lock name.
    #[error("invalid lock key {key:?}: {reason}")]
    InvalidKey {
        /// The key as given (shortened when long).
        key: String,
        /// What is wrong with it and what to do instead.
        reason: String,
    },

    /// A configuration value is out of range or malformed.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// The backend could not be reached within the connect timeout.
    #[error("cannot reach {backend} at {endpoints} within {timeout:?}; is the server running?")]
    Connect {
        /// Which backend ("etcd", ...).
        backend: &'static str,
        /// The endpoints tried, comma separated.
        endpoints: String,
        /// The connect timeout that elapsed or applied.
        timeout: Duration,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },

    /// A TLS connection to the backend failed: a certificate was not
    /// trusted, not valid for the server's name or expired, or the server
    /// wanted a client certificate. Fix the TLS settings; retrying does not
    /// help.
    #[error("TLS connection to {backend} at {endpoints} failed: {reason}")]
    Tls {
        /// Which backend ("etcd", ...).
        backend: &'static str,
        /// The endpoints tried, comma separated (passwords replaced).
        endpoints: String,
        /// What is wrong and what to do.
        reason: String,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },

    /// The backend refused the credentials: a wrong password, an unknown
    /// user, or none given where one is needed. Fix the configuration;
    /// retrying does not help.
    #[error("{backend} refused to authenticate: {reason}")]
    Auth {
        /// Which backend ("etcd", ...).
        backend: &'static str,
        /// What is wrong and what to do.
        reason: String,
        /// The server's answer.
        #[source]
        source: BoxError,
    },

    /// The backend denied the authenticated user a request (etcd's
    /// "permission denied", Redis' `NOPERM`): the user's role or ACL does
    /// not cover the key prefix or the command. Fix the permissions;
    /// retrying does not help.
    #[error("{backend} denied permission during {op}: {reason}")]
    PermissionDenied {
        /// Which backend ("etcd", ...).
        backend: &'static str,
        /// The operation that failed.
        op: &'static str,
        /// What to grant.
        reason: String,
        /// The server's answer.
        #[source]
        source: BoxError,
    },

    /// The context's deadline passed before the lock was acquired.
    #[error("timed out waiting for lock {key}")]
    Timeout {
        /// The lock key.
        key: String,
    },

    /// The context was cancelled before the lock was acquired.
    #[error("cancelled while waiting for lock {key}")]
    Cancelled {
        /// The lock key.
        key: String,
    },

    /// The lock (or leadership: `key` is then the election's name) was no
    /// longer held when the operation ran: its lease expired, or the lock
    /// key was deleted or taken over by someone else. A refused
    /// [`crate::Leadership::proclaim`] wrote nothing.
    #[error("lock {key} was lost: {reason}")]
    LockLost {
        /// The lock key.
        key: String,
        /// What was observed.
        reason: String,
    },

    /// A leader's value cannot be used: it is too long
    /// ([`crate::MAX_VALUE_LEN`]).
    #[error("invalid leader value: {reason}")]
    InvalidValue {
        /// What is wrong with it and what to do instead.
        reason: String,
    },

    /// A waiter's session ended while it waited (its queue entry or lease
    /// vanished), so it can no longer be granted the lock.
    #[error("session lost while waiting for lock {key}: {reason}")]
    SessionLost {
        /// The lock key.
        key: String,
        /// What was observed.
        reason: String,
    },

    /// The operation is not available here (e.g. an etcd-only operation on
    /// a guard from another backend).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// Too few of a backend's independent nodes answered to reach a
    /// quorum (Redlock): the lock state is unknown, which is not the same
    /// as "held by another".
    #[error(
        "only {answered} of {total} {backend} nodes answered during {op}; {needed} are needed \
         (start the missing nodes or check the network)"
    )]
    Unavailable {
        /// Which backend ("redis", ...).
        backend: &'static str,
        /// The operation that failed.
        op: &'static str,
        /// Nodes that answered.
        answered: usize,
        /// Nodes needed (a majority).
        needed: usize,
        /// Nodes configured.
        total: usize,
        /// What the other nodes said.
        #[source]
        source: BoxError,
    },

    /// A request to the backend failed.
    #[error("{backend} request failed during {op}")]
    Backend {
        /// Which backend ("etcd", ...).
        backend: &'static str,
        /// The operation that failed.
        op: &'static str,
        /// The underlying failure.
        #[source]
        source: BoxError,
    },
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        let mut causes = Vec::new();
        let mut next = std::error::Error::source(self);
        while let Some(cause) = next {
            causes.push(cause.to_string());
            next = cause.source();
        }
        if f.alternate() {
            for cause in &causes {
                write!(f, "\ncaused by: {cause}")?;
            }
        } else if let Some(root) = causes.last() {
            // The innermost cause (an I/O or TLS error) is the readable one;
            // the layers between often repeat it inside a transport's dump.
            if !self.to_string().contains(root.as_str()) {
                write!(f, "\ncaused by: {root}")?;
            }
        }
        Ok(())
    }
}

impl Error {
    /// `true` for [`Error::Timeout`] and [`Error::Cancelled`]: the caller gave up.
    #[must_use]
    pub fn is_gave_up(&self) -> bool {
        matches!(self, Error::Timeout { .. } | Error::Cancelled { .. })
    }

    /// `true` for errors that retrying cannot fix, only a change of the
    /// configuration or of the server's users and permissions:
    /// [`Error::InvalidConfig`], [`Error::Tls`], [`Error::Auth`],
    /// [`Error::PermissionDenied`].
    ///
    /// # Examples
    /// ```
    /// let err = fairlock::Error::InvalidConfig("no endpoints".into());
    /// assert!(err.needs_config_fix());
    /// ```
    #[must_use]
    pub fn needs_config_fix(&self) -> bool {
        matches!(
            self,
            Error::InvalidConfig(_)
                | Error::Tls { .. }
                | Error::Auth { .. }
                | Error::PermissionDenied { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_reads_like_display_with_the_root_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let middle: BoxError = Box::new(Wrapper(io));
        let err = Error::Backend {
            backend: "etcd",
            op: "lock",
            source: middle,
        };
        assert_eq!(
            format!("{err:?}"),
            "etcd request failed during lock\ncaused by: connection refused"
        );
        assert_eq!(
            format!("{err:#?}"),
            "etcd request failed during lock\ncaused by: transport dump(...)\n\
             caused by: connection refused"
        );
        let plain = Error::InvalidConfig("no endpoints".into());
        assert_eq!(format!("{plain:?}"), "invalid configuration: no endpoints");
    }

    #[derive(Debug)]
    struct Wrapper(std::io::Error);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("transport dump(...)")
        }
    }
    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
