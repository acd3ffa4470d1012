//! What every operation of one locker shares: the nodes, the
//! configuration, the mode and the locker's id, and the times derived from
//! them.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::redis::config::redis_config::RedisConfig;
use crate::redis::connect::node::{Node, Nodes};
use crate::redis::connect::node_error::{Failure, NodeError};
use crate::redis::lock::deferred::Starter;
use crate::semantics::fairness::Fairness;
use crate::semantics::renew::Timing;
use crate::util::backoff::Backoff;
use crate::util::observe::Site;
use crate::{Error, Result};

/// Everything a locker's operations share.
pub(crate) struct Core {
    pub nodes: Arc<Nodes>,
    pub config: RedisConfig,
    pub fairness: Fairness,
    /// Written into owner values as `locker=<id>`.
    pub id: String,
    /// Starts the watchdogs of held locks when their first extend is due.
    pub watchdogs: Starter,
}

impl Core {
    /// The node a line or an election lives on: both are refused on
    /// Redlock ([`Core::check_single`]), so there is exactly one.
    pub(crate) fn single_node(&self) -> &Node {
        &self.nodes.list[0]
    }

    /// The error for an answer the script run on the single node, for
    /// `op`, never gives.
    pub(crate) fn unexpected(&self, op: &'static str) -> Error {
        let error = redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "an answer the script does not give",
        ));
        let node = NodeError::new(&self.single_node().name, Failure::Other(error));
        self.nodes.unavailable(op, vec![node])
    }

    /// Refuses read/write locks, semaphores and elections on Redlock: a
    /// line on N independent masters would have no single arrival order
    /// (see the module docs of `redis`), so `what` needs one Redis
    /// instance (or a cluster, or sentinels) or etcd.
    pub(crate) fn check_single(&self, what: &str) -> Result<()> {
        if self.nodes.is_redlock() {
            return Err(Error::Unsupported(format!(
                "{what} on Redlock (several redis:// URLs): independent masters cannot agree on \
                 one line of holders and waiters; use a single Redis instance (or a Redis \
                 Cluster or Sentinel deployment) or etcd"
            )));
        }
        Ok(())
    }

    pub fn new(nodes: Arc<Nodes>, config: RedisConfig, fairness: Fairness) -> Self {
        Core {
            watchdogs: Starter::new(config.ttl() / 3),
            nodes,
            config,
            fairness,
            id: uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// Where a waiter's first round that fails is retried from: behind
    /// sentinels and on a cluster the call's start (a failover makes
    /// requests fail for seconds, grants that the replicas cannot
    /// acknowledge yet among them, and a waiter rides it out as it does
    /// after its first round); elsewhere nowhere: the error is reported.
    pub fn first_round_patience(&self) -> Option<Instant> {
        self.nodes.fails_over().then(Instant::now)
    }

    /// Runs `attempt` again while it fails for a replication shortfall
    /// (`error::is_replication_shortfall`: its grant was given back), for
    /// up to a third of the TTL: a `try_lock` does not wait for the lock,
    /// but rides out replicas that are slow to acknowledge.
    pub async fn riding_out_replicas<T, F, Fut>(&self, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let give_up = Instant::now() + self.config.ttl() / 3;
        let (first, max) = self.config.retry_delay();
        let mut backoff = Backoff::new(first, max).with_jitter();
        loop {
            match attempt().await {
                Err(e)
                    if crate::redis::connect::failed_op::is_replication_shortfall(&e)
                        && Instant::now() < give_up =>
                {
                    backoff.sleep().await;
                }
                other => return other,
            }
        }
    }

    /// Waits for the wake-up subscriptions a waiter needs (all nodes at
    /// once, each at most a per-node timeout; polling covers the rest).
    /// Callers race it with their context.
    pub async fn wakeups_ready(&self) {
        futures_util::future::join_all(
            self.nodes
                .list
                .iter()
                .map(|node| node.hub.ready(self.config.node_timeout())),
        )
        .await;
    }

    pub fn site(&self) -> Site {
        Site::new("redis", self.fairness)
    }

    /// The error for fair mode on Redlock, if this locker is one.
    pub fn check_mode(&self) -> Result<(), Error> {
        if self.fairness.is_fair() && self.nodes.is_redlock() {
            return Err(fair_redlock_unsupported());
        }
        Ok(())
    }

    /// When held locks and entries are extended: trusted for the TTL less
    /// drift and margin from each request's send time (see
    /// `RedisConfig::validity_left`), extended every TTL/3.
    pub(crate) fn renewal(&self) -> Timing {
        let config = &self.config;
        Timing {
            trusted: config.ttl() - config.drift() - config.margin(),
            period: config.ttl() / 3,
            retry: config.retry_delay().0,
        }
    }

    /// The shortest poll: how often a waiter re-checks (and refreshes its
    /// queue record) without a wake-up, a fallback for lost messages,
    /// while this process has few waiters (see [`Core::waiter_poll`]).
    pub fn poll(&self) -> Duration {
        (self.config.ttl() / 3).min(Duration::from_secs(1))
    }

    /// The poll of a waiter's next round: [`Core::poll`], or longer when
    /// this process waits on the node with more waiters, or the waiter's
    /// queue (all processes) held more at its last round (`queued`), than
    /// [`POLLS_PER_SECOND`] polls a second would cover, so that their
    /// polls stay within that. A round's record lives three of its polls
    /// ([`record_ttl`]); the pause after it is that round's poll, so a
    /// longer poll takes effect only from the round that writes it.
    pub fn waiter_poll(&self, queued: u64) -> Duration {
        let here = self.nodes.list[0].hub.waiters();
        spread_poll(self.poll(), here.max(trusted_queue(queued)))
    }
}

/// How many of a queue's waiters its polls are spread over: the count the
/// acquire script gave (the span of the queue's scores), at most
/// [`QUEUE_TRUSTED`].
fn trusted_queue(queued: u64) -> usize {
    usize::try_from(queued)
        .unwrap_or(usize::MAX)
        .min(QUEUE_TRUSTED)
}

/// The longest queue the spread believes: the span of the scores exceeds
/// the queue's length by every waiter that left from its middle, so a
/// patient waiter behind a long churn of waiters that gave up could read
/// a count of millions, and poll (and, if it died, hold up a handoff) for
/// an hour. Believed up to 10,000: a poll of 10 s at most from this rule,
/// a dead waiter's record gone within 30 s.
const QUEUE_TRUSTED: usize = 10_000;

/// The poll of each of `waiters` waiters, at least `shortest`, so that
/// they poll at most [`POLLS_PER_SECOND`] times a second in all.
fn spread_poll(shortest: Duration, waiters: usize) -> Duration {
    let spread = Duration::from_secs_f64(waiters as f64 / POLLS_PER_SECOND);
    shortest.max(spread)
}

/// How many routine polls (a waiter's round with no wake-up) a process
/// sends one node per second at most, and the waiters of one queue in
/// all, once they are more than that: 10,000 waiters of one process
/// polling every second kept its own client (a debug build, two cores) so
/// busy that 1,000 handoffs took 112 s; with their polls spread over 10
/// s, all 10,000 took 9 s (`tests/redis.rs`). 10 processes of 1,000
/// waiters each on one key, each polling every second, cost Redis 1,148
/// us of CPU per handoff against 293 us for one process of 10,000
/// (`bench --scale --quick`).
pub(crate) const POLLS_PER_SECOND: f64 = 1_000.0;

/// How long a waiter record lives without a refresh: three of the
/// waiter's polls (`poll`, from [`Core::waiter_poll`]). A fair handoff
/// grants the lock for this long only, until the grantee confirms it, so
/// a handoff to a waiter that died meanwhile blocks the lock for this
/// long rather than a whole TTL.
pub(crate) fn record_ttl(poll: Duration) -> Duration {
    poll * 3
}

/// The error for fair mode on Redlock.
pub(crate) fn fair_redlock_unsupported() -> Error {
    Error::Unsupported(
        "fair mode on Redlock (several redis:// URLs): independent masters cannot agree \
         on one arrival order without consensus; use one Redis instance or etcd for fair \
         locks, or unfair mode on Redlock"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{POLLS_PER_SECOND, QUEUE_TRUSTED, spread_poll, trusted_queue};

    #[test]
    fn polls_spread_once_waiters_outnumber_the_budget() {
        let shortest = Duration::from_secs(1);
        assert_eq!(spread_poll(shortest, 0), shortest);
        assert_eq!(spread_poll(shortest, 1_000), shortest);
        assert_eq!(spread_poll(shortest, 10_000), Duration::from_secs(10));
        // A short TTL's poll grows once its waiters need it to.
        let short = Duration::from_millis(100);
        assert_eq!(spread_poll(short, 10), short);
        assert_eq!(spread_poll(short, 500), Duration::from_millis(500));
        for waiters in [1_000, 2_500, 10_000, 100_000] {
            let per_second = waiters as f64 / spread_poll(shortest, waiters).as_secs_f64();
            assert!(
                per_second <= POLLS_PER_SECOND + 1e-6,
                "{waiters}: {per_second}"
            );
        }
    }

    #[test]
    fn a_queue_is_believed_up_to_ten_thousand() {
        assert_eq!(trusted_queue(0), 0);
        assert_eq!(trusted_queue(2_500), 2_500);
        assert_eq!(trusted_queue(5_000_000), QUEUE_TRUSTED);
        assert_eq!(trusted_queue(u64::MAX), QUEUE_TRUSTED);
        let longest = spread_poll(Duration::from_secs(1), trusted_queue(u64::MAX));
        assert_eq!(longest, Duration::from_secs(10));
    }
}
