//! [`EtcdLocker`]: the public type, `try_lock` and `lock`, retried while
//! etcd fails in ways that may pass.

use std::sync::Arc;

use etcd_client::Client;

use super::attempt::LockAttempt;
use super::held_lock::{Behind, Grant};
use super::queue;
use crate::etcd::client::batch::Batcher;
use crate::etcd::client::connect::connect;
use crate::etcd::client::error::{EtcdError, EtcdResult};
use crate::etcd::client::request::Answer;
use crate::etcd::client::retry::{Again, Retry};
use crate::etcd::config::EtcdConfig;
use crate::etcd::protocol::take::{self, Tried};
use crate::etcd::session::handout::Lease;
use crate::etcd::session::state::LockerState;
use crate::semantics::armed::{pause_or_done, turn_or_done};
use crate::semantics::fairness::Fairness;
use crate::{Context, Key, LockGuard, Result};

/// A fair or unfair locker on etcd, with its own session lease.
///
/// Cheap to clone; clones share the session. Dropping the last clone (and
/// the last guard) revokes the session lease, which frees everything it
/// still held; [`EtcdLocker::close`] does the same and reports errors.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// use fairlock::{Context, Key, Locker};
/// use fairlock::etcd::{EtcdConfig, EtcdLocker};
///
/// let locker = EtcdLocker::connect(EtcdConfig::new(["127.0.0.1:2379"]), true).await?;
/// if let Some(guard) = locker.try_lock(&Key::from("reports")).await? {
///     // ... work, passing guard.fencing_token() to the resource ...
///     guard.unlock().await?;
/// }
/// locker.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdLocker {
    inner: Arc<LockerState>,
}

/// A failed attempt of `lock`, cleaned up, and whether to try again.
pub(super) struct Failed {
    pub error: EtcdError,
    pub again: Again,
}

/// The grant of a lock taken with nobody waiting, by the txn answered
/// with `resp`.
pub(super) fn uncontended(resp: &Answer, lease: Arc<Lease>) -> Grant {
    Grant {
        token: resp.revision,
        queue_rev: None,
        behind: Behind::Nobody,
        lease,
    }
}

impl EtcdLocker {
    /// Connects to etcd and makes a locker, fair (arrival order) or unfair.
    ///
    /// # Errors
    /// [`crate::Error::InvalidConfig`] for a bad configuration; [`crate::Error::Connect`]
    /// naming the endpoints when etcd does not answer within the connect
    /// timeout, or within about a second when every endpoint refuses
    /// connections and no connect timeout was set (see
    /// [`EtcdConfig::with_connect_timeout`]).
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is created in etcd until the first lock.
    pub async fn connect(config: EtcdConfig, fair: bool) -> Result<Self> {
        let client = connect(&config).await?;
        Ok(Self::from_client(client, config, fair))
    }

    /// A locker on an existing connection. Its session lease is granted on
    /// first use. The configuration is not re-validated against etcd here.
    /// To make more lockers that also send their writes together with this
    /// one's (see [`EtcdConfig::with_write_batching`]), use
    /// [`EtcdLocker::another`] rather than calling this again.
    #[must_use]
    pub fn from_client(client: Client, config: EtcdConfig, fair: bool) -> Self {
        let writes = Batcher::new(client.clone(), config.write_batching());
        Self::on_connection(client, writes, config, fair)
    }

    /// A new locker, fair or unfair, with its own session lease, on this
    /// locker's connection and configuration: the writes the two make at
    /// the same time go together (see [`EtcdConfig::with_write_batching`]).
    /// This is how [`crate::etcd::register`] makes every locker `get_locker`
    /// returns.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> fairlock::Result<()> {
    /// use fairlock::etcd::{EtcdConfig, EtcdLocker};
    ///
    /// let first = EtcdLocker::connect(EtcdConfig::new(["127.0.0.1:2379"]), false).await?;
    /// let workers: Vec<EtcdLocker> = (0..32).map(|_| first.another(false)).collect();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn another(&self, fair: bool) -> Self {
        let state = &self.inner;
        Self::on_connection(
            state.client.clone(),
            Arc::clone(&state.writes),
            state.config.clone(),
            fair,
        )
    }

    pub(crate) fn on_connection(
        client: Client,
        writes: Arc<Batcher>,
        config: EtcdConfig,
        fair: bool,
    ) -> Self {
        let fairness = Fairness::from_fair(fair);
        EtcdLocker {
            inner: Arc::new(LockerState::new(client, writes, config, fairness)),
        }
    }

    /// This locker's id: the `<locker id>` level of its queue keys, and
    /// [`crate::LockWaiter::locker`] in [`EtcdLocker::status`].
    #[must_use]
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The state shared with the line's calls (`line/`), which keep it.
    pub(crate) fn state(&self) -> &Arc<LockerState> {
        &self.inner
    }

    pub(crate) fn inner(&self) -> &LockerState {
        &self.inner
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// The etcd client this locker uses (e.g. to share it with others).
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The id of the current session lease, granting it if needed. A new
    /// lease is handed out once a renewal of it was confirmed (a read of
    /// the prefix key answered in the same raft term).
    ///
    /// # Errors
    /// Backend errors from the lease grant; [`crate::Error::PermissionDenied`]
    /// or [`crate::Error::Auth`] when etcd refuses the confirming read;
    /// [`crate::Error::Backend`] (op "lease renewal") when no renewal of the
    /// new lease was confirmed before its local deadline.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lease_id(&self) -> Result<i64> {
        Ok(self.inner.session.lease().await?.id)
    }

    /// The id of the current session lease, if one is granted (no request).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn session_lease(&self) -> Option<i64> {
        self.inner.session.current_id().await
    }

    /// Revokes the session lease now: every lock this locker holds or waits
    /// for is freed at once. Guards still alive report
    /// [`crate::Error::LockLost`] on unlock.
    ///
    /// # Errors
    /// Backend errors from the revoke (the lease then expires after its TTL).
    ///
    /// # Cancel safety
    /// If dropped, the lease may or may not be revoked; it expires anyway.
    pub async fn close(self) -> Result<()> {
        Ok(self.inner.session.revoke().await?)
    }
}

impl EtcdLocker {
    /// One attempt of `try_lock` (its txns: `protocol/take.rs`).
    async fn try_lock_once(&self, key: &Key) -> EtcdResult<Option<LockGuard>> {
        let mut attempt = LockAttempt::direct(&self.inner, key);
        let (keys, value) = (attempt.keys.clone(), attempt.value.clone());
        let fairness = self.inner.fairness;
        let (resp, lease) = attempt
            .write_with_lease("try_lock", |lease| {
                take::try_take(&keys, fairness, (&value, lease))
            })
            .await?;
        match take::read_try(&keys, &resp) {
            Tried::Taken => return Ok(Some(attempt.granted(uncontended(&resp, lease)))),
            Tried::FreeBehindForeign(newest) => {
                let txn = take::take_past_foreign(&keys, (&value, lease.id), newest);
                let resp = attempt.write("try_lock", &lease, txn).await?;
                if resp.succeeded() {
                    return Ok(Some(attempt.granted(uncontended(&resp, lease))));
                }
            }
            Tried::Busy => {}
        }
        attempt.disarm();
        Ok(None)
    }

    /// One attempt of `lock`: queue, wait, and on failure remove what it
    /// wrote before returning the error.
    async fn lock_once(&self, ctx: &Context, key: &Key) -> Result<LockGuard, Failed> {
        let (mut attempt, queue_key) = LockAttempt::queued(&self.inner, key);
        let outcome = turn_or_done(ctx, key, queue::acquire(&mut attempt, &queue_key)).await;
        match outcome {
            Ok(grant) => Ok(attempt.granted(grant)),
            Err(error) => {
                let again = if attempt.lease_presumed_lost() {
                    Again::Yes
                } else {
                    Again::IfTransient
                };
                // Remove our keys before reporting, so that a caller who
                // gave up leaves nothing behind. If etcd does not answer
                // in time, report anyway: the cleanup task carries on.
                attempt.abandon(self.inner.config.request_timeout()).await;
                Err(Failed { error, again })
            }
        }
    }
}

impl EtcdLocker {
    /// `try_lock`'s attempts, retried while they fail in ways that may pass.
    pub(crate) async fn try_lock_now(&self, key: &Key) -> Result<Option<LockGuard>> {
        let mut retry = Retry::new(&self.inner.config, self.inner.site());
        loop {
            match Box::pin(self.try_lock_once(key)).await {
                Err(e) => tokio::time::sleep(retry.after(e, Again::IfTransient)?).await,
                Ok(outcome) => return Ok(outcome),
            }
        }
    }

    /// `lock`: queue and wait, again on a fresh lease if the last lease
    /// lapsed here, and while attempts fail in ways that may pass.
    pub(crate) async fn lock_in_queue(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        let mut retry = Retry::new(&self.inner.config, self.inner.site());
        loop {
            match Box::pin(self.lock_once(ctx, key)).await {
                Ok(guard) => return Ok(guard),
                Err(Failed { error, again }) => {
                    // A waiter whose session lease could not be renewed for a
                    // TTL (its member stopped answering, say) held nothing:
                    // it queues again on a fresh lease. One whose lease or
                    // queue entry etcd removed fails (SessionLost).
                    pause_or_done(ctx, key, retry.after(error, again)?).await?;
                }
            }
        }
    }
}
