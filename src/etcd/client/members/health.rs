//! How a member has been answering, as the balancer (`balance.rs`) weighs
//! it: the requests waiting for its answer, and whether it is failing (a
//! request waited too long, was given up after that long, failed in
//! transport or was answered "unavailable"), passed over for a pause that
//! doubles with each failure in a row.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// The longest a failing member is passed over, in multiples of `cooldown`.
const MAX_BACKOFF: u32 = 32;

/// How the balancer judges members (see `balance.rs`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Routing {
    /// A request unanswered for this long marks its member failing.
    pub slow: Duration,
    /// How long a member that just failed is passed over.
    pub cooldown: Duration,
}

/// A member's load: failing members come after all others, then by the
/// number of requests waiting for an answer.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub(crate) struct Weight {
    failing: bool,
    waiting: usize,
}

/// What a member's requests have shown.
pub(crate) struct Health {
    routing: Routing,
    state: Mutex<HealthState>,
}

#[derive(Default)]
struct HealthState {
    /// Requests waiting for an answer, by number: when each was sent.
    waiting: BTreeMap<u64, Instant>,
    next: u64,
    /// Failures since the last good answer.
    failures: u32,
    /// Passed over until then.
    failing_until: Option<Instant>,
}

impl Health {
    pub(crate) fn new(routing: Routing) -> Self {
        Health {
            routing,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn weight(&self, now: Instant) -> Weight {
        let state = self.state();
        // The oldest waiting request is the first in number order.
        let stuck = state
            .waiting
            .values()
            .next()
            .is_some_and(|sent| now.duration_since(*sent) >= self.routing.slow);
        Weight {
            failing: stuck || state.failing_until.is_some_and(|until| now < until),
            waiting: state.waiting.len(),
        }
    }

    pub(crate) fn sent(&self, now: Instant) -> u64 {
        let mut state = self.state();
        let id = state.next;
        state.next += 1;
        state.waiting.insert(id, now);
        id
    }

    /// Request `id` ended: answered (`failed` tells how), or given up
    /// (`answered` false). `true` if it failed: a failed answer, or given
    /// up after waiting `slow` or longer (a hedge's losing copy dropped
    /// sooner is no failure). A failure starts a pause only if the member
    /// was not failing already: requests failing together, as when a
    /// connection breaks under several, count once.
    pub(crate) fn ended(&self, id: u64, now: Instant, answered: bool, failed: bool) -> bool {
        let mut state = self.state();
        let Some(sent) = state.waiting.remove(&id) else {
            return false;
        };
        let failed = failed || (!answered && now.duration_since(sent) >= self.routing.slow);
        if failed {
            if state.failing_until.is_none_or(|until| now >= until) {
                state.failures = state.failures.saturating_add(1);
                let doubled = 1u32 << state.failures.saturating_sub(1).min(5);
                let pause = self.routing.cooldown * doubled.min(MAX_BACKOFF);
                state.failing_until = Some(now + pause);
            }
        } else if answered {
            state.failures = 0;
            state.failing_until = None;
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Health, Routing, Weight};

    fn health() -> Health {
        Health::new(Routing {
            slow: Duration::from_millis(300),
            cooldown: Duration::from_secs(1),
        })
    }

    fn ok(waiting: usize) -> Weight {
        Weight {
            failing: false,
            waiting,
        }
    }

    fn failing(waiting: usize) -> Weight {
        Weight {
            failing: true,
            waiting,
        }
    }

    #[test]
    fn a_member_with_a_request_waiting_too_long_is_failing() {
        let h = health();
        let t = Instant::now();
        let id = h.sent(t);
        assert_eq!(h.weight(t + Duration::from_millis(299)), ok(1));
        assert_eq!(h.weight(t + Duration::from_millis(300)), failing(1));
        // Given up after that long: failing for the cooldown.
        assert!(h.ended(id, t + Duration::from_millis(400), false, false));
        assert_eq!(h.weight(t + Duration::from_millis(1399)), failing(0));
        assert_eq!(h.weight(t + Duration::from_millis(1400)), ok(0));
        // Failing members always weigh more than healthy ones.
        assert!(failing(0) > ok(100));
    }

    #[test]
    fn a_request_dropped_early_or_answered_is_no_failure() {
        let h = health();
        let t = Instant::now();
        // A hedge's losing copy, dropped soon after it was sent.
        let id = h.sent(t);
        assert!(!h.ended(id, t + Duration::from_millis(100), false, false));
        assert_eq!(h.weight(t + Duration::from_millis(100)), ok(0));
        let id = h.sent(t);
        assert!(!h.ended(id, t + Duration::from_secs(5), true, false));
        assert_eq!(h.weight(t + Duration::from_secs(5)), ok(0));
    }

    #[test]
    fn failures_in_a_row_double_the_pause_and_an_answer_clears_it() {
        let h = health();
        let mut t = Instant::now();
        for pause_s in [1, 2, 4, 8, 16, 32, 32] {
            let id = h.sent(t);
            h.ended(id, t, true, true);
            let pause = Duration::from_secs(pause_s);
            assert_eq!(h.weight(t + pause - Duration::from_millis(1)), failing(0));
            assert_eq!(h.weight(t + pause), ok(0));
            t += pause;
        }
        let id = h.sent(t);
        h.ended(id, t, true, true);
        let id = h.sent(t);
        h.ended(id, t, true, false);
        assert_eq!(h.weight(t), ok(0));
    }

    #[test]
    fn requests_failing_together_count_as_one_failure() {
        // A connection breaking under several requests fails them all.
        let h = health();
        let t = Instant::now();
        let ids: Vec<u64> = (0..8).map(|_| h.sent(t)).collect();
        for id in ids {
            assert!(h.ended(id, t, true, true), "each request failed");
        }
        // Passed over for the first pause only, not 2^7 of them.
        assert_eq!(h.weight(t + Duration::from_millis(999)), failing(0));
        assert_eq!(h.weight(t + Duration::from_secs(1)), ok(0));
    }
}
