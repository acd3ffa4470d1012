//! The pace of a waiter on Redis, the mutex's and the line's alike: after
//! each round, a pause until a wake-up, the next poll, or the moment the
//! holder ahead expires; node errors are retried for up to a TTL after
//! the last answered round, but for refusals (see `FailedOp::refusal`),
//! which end the wait at once. And the pace of a waiter's take-back when it
//! gives up ([`leave`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::redis::connect::failed_op::{is_refusal, is_unanswered};
use crate::redis::state::Core;
use crate::util::backoff::{Backoff, jitter};
use crate::util::observe;
use crate::{Error, Result};

/// One waiter's pauses between rounds.
pub(crate) struct Pace<'a> {
    core: &'a Core,
    /// Where the waiter's wake-ups arrive (see `connect/wake.rs`).
    notify: Arc<Notify>,
    /// When a round was last answered (the waiter's record refreshed).
    /// The first round's errors are reported at once (a wrong address, a
    /// server that is down), but where a failover may be under way
    /// (`Core::first_round_patience`), and but for a round some node did
    /// not answer in time (`is_unanswered`: the node, or this process, was
    /// busy), whose wait starts then.
    last_ok: Option<Instant>,
    backoff: Backoff,
}

impl<'a> Pace<'a> {
    pub(crate) fn new(core: &'a Core, notify: Arc<Notify>) -> Self {
        let (first, max) = core.config.retry_delay();
        Pace {
            core,
            notify,
            last_ok: core.first_round_patience(),
            backoff: Backoff::new(first, max).with_jitter(),
        }
    }

    /// After a round that waits behind a holder who expires in
    /// `expires_in` (if it is not renewed): until a wake-up, then, or the
    /// next poll, `poll` after (the round's, which its record's TTL was
    /// made of: the next round refreshes the record before it expires).
    pub(crate) async fn after_busy(&mut self, expires_in: Option<Duration>, poll: Duration) {
        self.answered();
        let wait = expires_in.map_or(poll, |e| (e + Duration::from_millis(1)).min(poll));
        self.pause(wait).await;
    }

    /// After a Redlock round that split the nodes: a random pause.
    pub(crate) async fn after_split(&mut self) {
        self.answered();
        self.pause(jitter(self.core.config.retry_delay().0)).await;
    }

    /// After a round that failed with `e`: a backoff while the waiter's
    /// record has not expired, unless `e` is a refusal (wrong credentials,
    /// data fairlock did not write: another round would say the same).
    ///
    /// # Errors
    /// `e`, to report, when the wait ends.
    pub(crate) async fn after_error(&mut self, e: Error) -> Result<()> {
        if self.last_ok.is_none() && is_unanswered(&e) {
            self.last_ok = Some(Instant::now());
        }
        match self.last_ok {
            _ if is_refusal(&e) => Err(e),
            Some(at) if at.elapsed() < self.core.config.ttl() => {
                let wait = self.backoff.next_pause().min(self.core.poll());
                observe::retrying(self.core.site(), &e, wait);
                self.pause(wait).await;
                Ok(())
            }
            _ => Err(e),
        }
    }

    fn answered(&mut self) {
        self.last_ok = Some(Instant::now());
        self.backoff.reset();
    }

    async fn pause(&self, wait: Duration) {
        tokio::select! {
            () = self.notify.notified() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Leaves: `send` once to `nodes` (it returns the nodes that did not
/// answer, each request bounded by the per-node timeout), then, in a task
/// of its own, again to those for about one TTL (by then the waiter's
/// records have expired anyway): past the first pass, a caller that gave
/// up no longer waits.
pub(crate) async fn leave<F, S>(core: Arc<Core>, nodes: Vec<usize>, send: S)
where
    S: Fn(Arc<Core>, Vec<usize>) -> F + Send + 'static,
    F: Future<Output = Vec<usize>> + Send,
{
    let give_up = Instant::now() + core.config.ttl();
    let mut pending = send(Arc::clone(&core), nodes).await;
    if pending.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let (first, max) = core.config.retry_delay();
        let mut backoff = Backoff::new(first, max);
        while !pending.is_empty() && Instant::now() < give_up {
            backoff.sleep().await;
            pending = send(Arc::clone(&core), pending).await;
        }
    });
}
