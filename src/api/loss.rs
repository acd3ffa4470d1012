//! Why a lock was lost, as the backend saw it.

use std::fmt;
use std::sync::{Arc, OnceLock};

/// Why a held lock was lost, as far as this process can tell
/// ([`crate::LockGuard::loss_cause`]).
///
/// # Examples
/// ```no_run
/// # async fn demo(guard: fairlock::LockGuard) {
/// guard.lost().await;
/// if let Some(cause) = guard.loss_cause() {
///     eprintln!("lost the lock: {cause}");
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// No renewal of the lease was acknowledged for the TTL: the servers
    /// were unreachable, or this process was paused. The lease may have
    /// expired on the server.
    Expired,
    /// The server said the lease is gone: it expired there or was revoked.
    LeaseEnded,
    /// The lock key was deleted, or taken over by someone else.
    KeyChanged,
    /// The backend reported the loss without saying why.
    Unspecified,
}

impl fmt::Display for LossCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossCause::Expired => {
                "no lease renewal was acknowledged for the TTL (servers unreachable, \
                 or this process paused)"
            }
            LossCause::LeaseEnded => "the server ended the lease (it expired there or was revoked)",
            LossCause::KeyChanged => "the lock key was deleted or taken over by someone else",
            LossCause::Unspecified => "the backend reported the lock lost",
        })
    }
}

/// The first loss cause a backend recorded for a guard or a session,
/// shared by the tasks that may see it.
#[derive(Debug, Clone, Default)]
#[cfg_attr(not(any(feature = "etcd", feature = "redis")), allow(dead_code))]
pub(crate) struct LossCell(Arc<OnceLock<LossCause>>);

#[cfg_attr(not(any(feature = "etcd", feature = "redis")), allow(dead_code))]
impl LossCell {
    /// Records `cause` unless a cause was recorded before.
    pub(crate) fn record(&self, cause: LossCause) {
        let _ = self.0.set(cause);
    }

    /// The recorded cause, if any.
    pub(crate) fn get(&self) -> Option<LossCause> {
        self.0.get().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_cause_wins() {
        let cell = LossCell::default();
        assert_eq!(cell.get(), None);
        cell.clone().record(LossCause::KeyChanged);
        cell.record(LossCause::Expired);
        assert_eq!(cell.get(), Some(LossCause::KeyChanged));
    }
}
