//! A lease's local deadline on the monotonic clock.
//!
//! A holder must know its lock may be gone without asking the server: after
//! a long pause (SIGSTOP, a VM freeze, a GC) the network may be the last
//! thing to answer. The backend moves the deadline forward each time the
//! server acknowledges a renewal, to the time the renewal was *sent* plus
//! the TTL minus a safety margin, which is never later than the server's own
//! expiry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A shared, movable deadline: the last instant a lease is known to be
/// alive. Clones share the deadline.
#[derive(Clone, Debug)]
pub struct Expiry {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Deadlines are stored as nanoseconds after this instant.
    epoch: Instant,
    nanos: AtomicU64,
}

impl Expiry {
    /// A deadline at `deadline`.
    #[must_use]
    pub fn new(deadline: Instant) -> Self {
        let epoch = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .unwrap_or_else(Instant::now);
        let expiry = Expiry {
            inner: Arc::new(Shared {
                epoch,
                nanos: AtomicU64::new(0),
            }),
        };
        expiry.extend_to(deadline);
        expiry
    }

    /// Moves the deadline to `deadline` if that is later; a stale renewal
    /// never moves it back.
    pub fn extend_to(&self, deadline: Instant) {
        let nanos = deadline.saturating_duration_since(self.inner.epoch);
        let nanos = u64::try_from(nanos.as_nanos()).unwrap_or(u64::MAX);
        self.inner.nanos.fetch_max(nanos, Ordering::AcqRel);
    }

    /// Ends the lease now, for good.
    pub fn expire(&self) {
        // Zero is the epoch, which is in the past; `extend_to` can still
        // raise it, so the backend stops renewing before calling this.
        self.inner.nanos.store(0, Ordering::Release);
    }

    /// The current deadline.
    #[must_use]
    pub fn deadline(&self) -> Instant {
        self.inner.epoch + Duration::from_nanos(self.inner.nanos.load(Ordering::Acquire))
    }

    /// `true` once the deadline has passed.
    #[must_use]
    pub fn has_passed(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    /// Resolves once the deadline has passed, following it as it moves.
    pub async fn passed(&self) {
        loop {
            let deadline = self.deadline();
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_forward_only_and_expires() {
        let now = Instant::now();
        let expiry = Expiry::new(now + Duration::from_secs(10));
        assert!(!expiry.has_passed());
        expiry.extend_to(now + Duration::from_secs(5));
        assert_eq!(expiry.deadline(), now + Duration::from_secs(10));
        expiry.extend_to(now + Duration::from_secs(20));
        assert_eq!(expiry.deadline(), now + Duration::from_secs(20));
        expiry.expire();
        assert!(expiry.has_passed());
    }

    #[test]
    fn a_deadline_in_the_past_has_passed() {
        let expiry = Expiry::new(Instant::now() - Duration::from_secs(60));
        assert!(expiry.has_passed());
    }

    #[tokio::test]
    async fn passed_resolves_after_the_deadline() {
        let expiry = Expiry::new(Instant::now() + Duration::from_millis(20));
        expiry.passed().await;
        assert!(expiry.has_passed());
    }
}
