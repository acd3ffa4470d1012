//! One call to `lock` or `try_lock`: a round of the acquire script on every
//! node, decided by quorum (1 of 1, or N/2+1 of N) within the validity
//! time, and the bookkeeping that makes giving up leave nothing behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::redis::connect::failed_op::is_in_use_as_line;
use crate::redis::connect::node::{Admission, Call, Reach};
use crate::redis::lock::held_lock;
use crate::redis::pace::{self, Pace};
use crate::redis::protocol::keys::{LockKeys, owner_value, waiter_id};
use crate::redis::protocol::line::in_use_as_line;
use crate::redis::protocol::lock_all_lua::Part;
use crate::redis::protocol::lock_args::{AcquireReply, Joined, acquire_args, release_args};
use crate::redis::protocol::lock_lua::{
    ACQUIRE_SCRIPT, LEAVE_SCRIPT, RAISE_SCRIPT, RELEASE_SCRIPT,
};
use crate::redis::state::{Core, record_ttl};
use crate::semantics::armed::{Armed, TakeBack};
use crate::util::observe;
use crate::{Key, LockGuard, Result};

/// What one round on every node came to.
pub(crate) enum Round {
    Granted(LockGuard),
    /// Held by another. `split`: some nodes granted but too few (Redlock),
    /// so retry after a random pause; `expires_in`: when the holder's key
    /// expires if nobody renews it; `unsure`: some node did not answer, so
    /// it may still apply our request later.
    Busy {
        split: bool,
        expires_in: Option<Duration>,
        unsure: bool,
    },
    /// Not granted, and the place `lock_all` keeps in the queue is gone
    /// (see [`Joined::Kept`]): nothing was written.
    PlaceLost,
}

/// Whether an attempt waits in the queue.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttemptKind {
    /// `lock`: joins the queue and waits.
    Lock,
    /// `try_lock`: one round, never queued.
    TryLock,
}

/// What leaving removes.
#[derive(Clone, Copy)]
enum Leave {
    /// The queue entry only; a lock held meanwhile is kept.
    QueueOnly,
    /// The queue entry, and the lock if it was handed over meanwhile.
    QueueAndLock,
}

/// One call to `lock`/`try_lock`: its owner value and waiter id, so that
/// giving up (error, cancel or drop) removes what it wrote.
pub(crate) struct LockAttempt {
    core: Arc<Core>,
    key: Key,
    keys: LockKeys,
    /// `f<uuid>` or `u<uuid>`: the queue member and waiter record name.
    id: String,
    owner: String,
    kind: AttemptKind,
    pub notify: Arc<Notify>,
    /// Rounds sent so far: from the second on, `id` may be queued.
    rounds: u32,
    /// How many the last round found queued, at most (the most any node
    /// said): a long queue spreads its waiters' polls
    /// ([`Core::waiter_poll`]).
    queued: u64,
    /// Queued by `lock_all`'s one step: a place kept, or lost, never made
    /// again at the end of the queue.
    kept: bool,
}

impl LockAttempt {
    pub fn new(core: &Arc<Core>, key: &Key, kind: AttemptKind) -> Armed<Self> {
        let id = waiter_id(core.fairness);
        let notify = Arc::new(Notify::new());
        if kind == AttemptKind::Lock {
            for node in &core.nodes.list {
                node.hub.register(&id, &notify);
            }
        }
        Armed::new(LockAttempt {
            owner: owner_value(&id, &core.id),
            keys: LockKeys::new(core.nodes.layout, core.config.prefix(), key),
            core: Arc::clone(core),
            key: key.clone(),
            id,
            kind,
            notify,
            rounds: 0,
            queued: 0,
            kept: false,
        })
    }

    /// Rounds sent so far.
    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    /// This attempt's key as `lock_all`'s scripts name it.
    pub fn part(&self) -> Part<'_> {
        Part {
            keys: &self.keys,
            owner: &self.owner,
            id: &self.id,
        }
    }

    /// Its first round was `lock_all`'s one step (`lock/all_keys.rs`),
    /// which queued it: the later rounds keep that place or report it
    /// lost ([`Round::PlaceLost`]).
    pub fn keep_place(&mut self) {
        self.rounds = self.rounds.max(1);
        self.kept = true;
    }
}

impl Armed<LockAttempt> {
    /// Runs the acquire script on every node and decides; a queue record
    /// it writes lives three `poll`s ([`record_ttl`]).
    pub async fn round(&mut self, poll: Duration) -> Result<Round> {
        let joined = match (self.rounds, self.kept) {
            (0, _) => Joined::No,
            (_, false) => Joined::Yes,
            (_, true) => Joined::Kept,
        };
        self.rounds += 1;
        let core = Arc::clone(&self.core);
        let (nodes, config, keys) = (&core.nodes, &core.config, &self.keys);
        let script_keys = keys.script_keys();
        let ttl_ms = config.ttl_ms().to_string();
        let record_ms = record_ttl(poll).as_millis().to_string();
        let loss_wait_ms = config.data_loss_wait_ms();
        let id = match self.kind {
            AttemptKind::Lock => self.id.as_str(),
            AttemptKind::TryLock => "",
        };
        let started = Instant::now();
        let results: Vec<Result<AcquireReply, _>> = nodes
            .all(|_, node| Call {
                script: &ACQUIRE_SCRIPT,
                keys: &script_keys,
                args: acquire_args(
                    &self.owner,
                    &ttl_ms,
                    core.fairness,
                    id,
                    keys,
                    &node.hub.id,
                    &record_ms,
                    joined,
                    &loss_wait_ms,
                ),
                reach: Reach::Replicas,
                admission: Admission::InTurn,
            })
            .await;
        let mut granted = Vec::new();
        let mut busy = vec![false; nodes.list.len()];
        let mut expires_in: Option<Duration> = None;
        let mut errors = Vec::new();
        let mut lost = false;
        let mut queued_most = 0;
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok(AcquireReply { code: 1, value, .. }) => {
                    granted.push((i, u64::try_from(value).unwrap_or_default()));
                }
                Ok(AcquireReply { code: 2, .. }) => {
                    busy[i] = true;
                    lost = true;
                }
                Ok(AcquireReply { value, queued, .. }) => {
                    busy[i] = true;
                    queued_most = queued_most.max(queued);
                    if let Ok(ms) = u64::try_from(value) {
                        let d = Duration::from_millis(ms);
                        expires_in = Some(expires_in.map_or(d, |e| e.min(d)));
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        // A grant counts only if its local deadline (which leaves room for
        // drift and the margin) is still ahead.
        let valid = |at: Instant| config.validity_left(at.elapsed()).is_some();
        if granted.len() >= nodes.quorum && valid(started) {
            let token = granted.iter().map(|(_, t)| *t).max().unwrap_or_default();
            let agreed = granted.iter().filter(|(_, t)| *t == token).count();
            let raised =
                agreed >= nodes.quorum || self.raise(&granted, token).await >= nodes.quorum;
            if raised && valid(started) {
                return Ok(Round::Granted(self.granted(token, started, &granted)));
            }
        }
        // Too few grants (or too late): give back what we got, and what a
        // node that did not answer may have granted all the same (its
        // request can still be applied late); only nodes that answered
        // "busy" hold nothing of ours.
        let split = !granted.is_empty();
        let unsure = !errors.is_empty();
        if split || unsure {
            let give_back: Vec<usize> = (0..nodes.list.len()).filter(|i| !busy[*i]).collect();
            let _ = nodes
                .some::<i64>(&give_back, |_| Call {
                    script: &RELEASE_SCRIPT,
                    keys: &script_keys,
                    args: release_args(&self.owner, keys, ""),
                    reach: Reach::Master,
                    admission: Admission::InTurn,
                })
                .await;
        }
        self.queued = queued_most;
        if nodes.list.len() - errors.len() < nodes.quorum {
            return Err(nodes.unavailable("lock", errors));
        }
        if lost {
            return Ok(Round::PlaceLost);
        }
        Ok(Round::Busy {
            split,
            expires_in,
            unsure,
        })
    }

    /// Redlock: raises the fence counters of the granting nodes to `token`;
    /// returns on how many nodes that was done while still held there.
    async fn raise(&self, granted: &[(usize, u64)], token: u64) -> usize {
        let script_keys = self.keys.script_keys();
        let indexes: Vec<usize> = granted.iter().map(|(i, _)| *i).collect();
        let results = self
            .core
            .nodes
            .some::<i64>(&indexes, |_| Call {
                script: &RAISE_SCRIPT,
                keys: &script_keys,
                args: vec![self.owner.clone(), token.to_string()],
                reach: Reach::Replicas,
                admission: Admission::InTurn,
            })
            .await;
        results.into_iter().filter(|r| matches!(r, Ok(1))).count()
    }

    /// Rounds until granted, pausing between them as `pace` says (a busy
    /// round: until a wake-up, a poll or the holder's expiry; an error:
    /// a backoff, while the wait may go on); `None` once a kept place is
    /// lost ([`LockAttempt::keep_place`]).
    ///
    /// # Errors
    /// A round's error, when `pace` ends the wait.
    pub async fn until_granted(&mut self, pace: &mut Pace<'_>) -> Result<Option<LockGuard>> {
        loop {
            let poll = self.core.waiter_poll(self.queued);
            match self.round(poll).await {
                Ok(Round::Granted(guard)) => return Ok(Some(guard)),
                Ok(Round::PlaceLost) => return Ok(None),
                Ok(Round::Busy {
                    split, expires_in, ..
                }) => {
                    if self.rounds() == 1 {
                        observe::queued(None);
                    }
                    if split {
                        pace.after_split().await;
                    } else {
                        pace.after_busy(expires_in, poll).await;
                    }
                }
                // Refresh the queue record before it expires.
                Err(e) => pace.after_error(e).await?,
            }
        }
    }

    /// The guard for a grant; the attempt is done.
    pub fn granted(&mut self, token: u64, started: Instant, granted: &[(usize, u64)]) -> LockGuard {
        self.set_armed(false);
        // Nodes that did not grant may still hold our queue entry (a grant
        // removed it on its own node, so nothing is sent where all granted).
        if self.kind == AttemptKind::Lock {
            let others: Vec<usize> = (0..self.core.nodes.list.len())
                .filter(|i| !granted.iter().any(|(g, _)| g == i))
                .collect();
            if !others.is_empty()
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                rt.spawn(self.leave(Leave::QueueOnly, others));
            }
        }
        held_lock::guard(
            Arc::clone(&self.core),
            self.key.clone(),
            self.keys.clone(),
            self.owner.clone(),
            token,
            started,
            granted,
        )
    }
}

impl LockAttempt {
    /// Removes what this attempt wrote on `nodes` (queue entries; with
    /// [`Leave::QueueAndLock`], a lock handed over meanwhile is released
    /// and passed on), at the pace of [`pace::leave`].
    fn leave(&self, leave: Leave, nodes: Vec<usize>) -> impl Future<Output = ()> + Send + 'static {
        let (keys, id) = (self.keys.clone(), self.id.clone());
        let owner = match leave {
            Leave::QueueOnly => String::new(),
            Leave::QueueAndLock => self.owner.clone(),
        };
        pace::leave(Arc::clone(&self.core), nodes, move |core, nodes| {
            let (keys, id, owner) = (keys.clone(), id.clone(), owner.clone());
            async move { send_leave(&core, &keys, &id, &owner, &nodes).await }
        })
    }
}

impl TakeBack for LockAttempt {
    fn take_back(&mut self) -> impl Future<Output = ()> + Send + 'static {
        self.leave(
            Leave::QueueAndLock,
            (0..self.core.nodes.list.len()).collect(),
        )
    }
}

/// A mutex's error, with the key's use as a read/write lock or semaphore
/// told as [`crate::semantics::mixed_use`] tells it.
pub(crate) fn mutex_error(e: crate::Error, key: &Key) -> crate::Error {
    if is_in_use_as_line(&e) {
        return in_use_as_line(key);
    }
    e
}

/// Sends the leave script once to `nodes`; returns those that did not answer.
pub(crate) async fn send_leave(
    core: &Core,
    keys: &LockKeys,
    id: &str,
    owner: &str,
    nodes: &[usize],
) -> Vec<usize> {
    let script_keys = keys.script_keys();
    let results = core
        .nodes
        .some::<i64>(nodes, |_| Call {
            script: &LEAVE_SCRIPT,
            keys: &script_keys,
            args: vec![
                owner.to_owned(),
                id.to_owned(),
                keys.waiters.clone(),
                keys.wake.clone(),
            ],
            reach: Reach::Master,
            admission: Admission::InTurn,
        })
        .await;
    nodes
        .iter()
        .zip(results)
        .filter(|(_, r)| r.is_err())
        .map(|(i, _)| *i)
        .collect()
}

impl Drop for LockAttempt {
    fn drop(&mut self) {
        if self.kind == AttemptKind::Lock {
            for node in &self.core.nodes.list {
                node.hub.deregister(&self.id);
            }
        }
    }
}
