//! A locker's vigil over a lock freed with nobody to hand it on: one per
//! locker and lock key, shared by all of the locker's waiters there that
//! have waited their patience (see `lock/queue.rs`).
//!
//! A release hands the lock to the first waiter in the same txn, so a
//! waiter needs no watch of its own to be served. What no release covers
//! is a lock freed without a handoff: its holder's lease ended, or an
//! unfair release woke a waiter that died before it retried. The vigil
//! watches the lock key for deletions (a handoff rewrites it: no event),
//! and while the lock is free, the queue for deletions too (the first
//! waiter may be gone). On either it reads the lock key and the head of
//! the queue, at most once per patience, and tells the first waiter if it
//! is one of this locker's; any other waiter's own locker tells it.
//!
//! Before, each patient waiter read the entries ahead of it (etcd reads
//! every entry of the queue to answer that: its create-revision filter
//! and sort defeat the limit) and watched its predecessor: with N waiters
//! queued for longer than their patience, N reads of N entries each. At
//! 3,000 waiters in one process this kept etcd busy answering them and no
//! handoff went through. Now a fair queue costs a locker one read when
//! its vigil starts and nothing per handoff.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::Client;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::request::{request, retry_backoff};
use crate::etcd::client::watch::{Events, Subscription, Target, WatchHub, WatchMsg};
use crate::etcd::protocol::keys::LockKeys;
use crate::etcd::protocol::queue::{Head, head_check, read_head};
use crate::semantics::fairness::Fairness;

/// How long a vigil nobody uses stays open: waiters that come and go (a
/// busy key) keep one vigil and its one read.
const IDLE: Duration = Duration::from_secs(30);

/// How many queue entries a vigil reads at most looking for a waiter.
const MAX_READ: usize = 256;

/// What every vigil of a locker needs: its connection, watch stream and
/// patience.
struct Env {
    client: Client,
    hub: Arc<WatchHub>,
    timeout: Duration,
    /// The least time between two reads of one vigil.
    patience: Duration,
    fairness: Fairness,
}

/// One locker's vigils, by lock key, each with when a waiter last joined.
pub(crate) struct Vigils {
    env: Arc<Env>,
    map: Mutex<HashMap<Vec<u8>, Joined>>,
}

type Joined = (Arc<Vigil>, Instant);

/// The vigil over one lock: the locker's waiters there that it may tell,
/// and its task.
struct Vigil {
    /// Queue key → what tells that waiter to re-read.
    waiters: Mutex<HashMap<Vec<u8>, Arc<Notify>>>,
    /// Whether the lock may be free (as first, unknown): a waiter that
    /// joins then asks for a read.
    maybe_free: std::sync::atomic::AtomicBool,
    /// Asks the task for a read.
    kick: Notify,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Vigil {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.task).take() {
            task.abort();
        }
    }
}

/// A waiter's place in a vigil; dropping it leaves the vigil.
pub(crate) struct Ticket {
    vigil: Arc<Vigil>,
    queue_key: Vec<u8>,
    told: Arc<Notify>,
}

impl Ticket {
    /// Returns when the vigil found the lock free and this waiter first
    /// in line (or unfair, the first of the locker's in the batch read):
    /// the waiter re-reads its place.
    pub async fn told(&self) {
        self.told.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        lock(&self.vigil.waiters).remove(&self.queue_key);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Vigils {
    pub fn new(
        client: Client,
        hub: Arc<WatchHub>,
        timeout: Duration,
        (patience, fairness): (Duration, Fairness),
    ) -> Self {
        Vigils {
            env: Arc::new(Env {
                client,
                hub,
                timeout,
                patience,
                fairness,
            }),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Joins the vigil over the lock of `keys` (starting it if needed) as
    /// the waiter queued under `queue_key`. Sends nothing itself.
    pub fn join(&self, keys: &LockKeys, queue_key: &[u8]) -> Ticket {
        let mut map = lock(&self.map);
        map.retain(|_, (v, last)| !lock(&v.waiters).is_empty() || last.elapsed() < IDLE);
        let (vigil, last) = map
            .entry(keys.lock.clone())
            .or_insert_with(|| (start(&self.env, keys), Instant::now()));
        *last = Instant::now();
        let told = Arc::new(Notify::new());
        lock(&vigil.waiters).insert(queue_key.to_vec(), Arc::clone(&told));
        if vigil.maybe_free.load(std::sync::atomic::Ordering::SeqCst) {
            vigil.kick.notify_one();
        }
        Ticket {
            vigil: Arc::clone(vigil),
            queue_key: queue_key.to_vec(),
            told,
        }
    }
}

/// Starts the vigil over the lock of `keys`. Its task starts once the
/// vigil exists: a task spawned while it is built could find it gone.
fn start(env: &Arc<Env>, keys: &LockKeys) -> Arc<Vigil> {
    let vigil = Arc::new(Vigil {
        waiters: Mutex::new(HashMap::new()),
        maybe_free: true.into(),
        kick: Notify::new(),
        task: Mutex::new(None),
    });
    let task = tokio::spawn(keep(Arc::clone(env), keys.clone(), Arc::downgrade(&vigil)));
    *lock(&vigil.task) = Some(task.abort_handle());
    vigil
}

/// The vigil's task: watches, and reads when they say the lock may be
/// free; ends with the vigil (its abort).
async fn keep(env: Arc<Env>, keys: LockKeys, me: Weak<Vigil>) {
    let mut backoff = retry_backoff();
    loop {
        let Ok(mut lock_watch) = watch(&env, &keys.lock, None, None).await else {
            tokio::time::sleep(backoff.next_pause()).await;
            continue;
        };
        let mut queue_watch: Option<Subscription> = None;
        // A read at once: what happened before the watch is unknown.
        let mut due = Some(Instant::now());
        let mut last_read: Option<Instant> = None;
        loop {
            let Some(vigil) = me.upgrade() else { return };
            let at = due.unwrap_or_else(|| Instant::now() + IDLE);
            let woken = tokio::select! {
                () = tokio::time::sleep_until(at), if due.is_some() => {
                    due = None;
                    last_read = Some(Instant::now());
                    match read(&env, &keys, &vigil).await {
                        Ok(None) => {
                            backoff.reset();
                            queue_watch = None;
                            vigil.maybe_free.store(false, std::sync::atomic::Ordering::SeqCst);
                        }
                        Ok(Some(at)) => {
                            vigil.maybe_free.store(true, std::sync::atomic::Ordering::SeqCst);
                            if queue_watch.is_none() {
                                queue_watch = watch(&env, &keys.queue, Some(at + 1), Some(())).await.ok();
                                if queue_watch.is_none() {
                                    due = Some(Instant::now() + backoff.next_pause());
                                }
                            }
                        }
                        Err(_) => due = Some(Instant::now() + backoff.next_pause()),
                    }
                    false
                }
                msg = lock_watch.recv() => match msg {
                    WatchMsg::Ended(_) => break,
                    WatchMsg::Created => false,
                    WatchMsg::Events { .. } => {
                        vigil.maybe_free.store(true, std::sync::atomic::Ordering::SeqCst);
                        true
                    }
                },
                msg = Subscription::next_of(&mut queue_watch) => match msg {
                    WatchMsg::Ended(_) => {
                        queue_watch = None;
                        true
                    }
                    WatchMsg::Created => false,
                    WatchMsg::Events { .. } => true,
                },
                () = vigil.kick.notified() => true,
                // Wakes now and then to see whether the vigil is gone.
                () = tokio::time::sleep(IDLE), if due.is_none() => false,
            };
            if woken && due.is_none() {
                let earliest = last_read.map_or_else(Instant::now, |t| t + env.patience);
                due = Some(earliest.max(Instant::now()));
            }
        }
        tokio::time::sleep(backoff.next_pause()).await;
    }
}

/// Opens a watch of the deletions of `key` (with `prefix`, of every key
/// under it), from `start` on or from now, and waits until it is created.
async fn watch(
    env: &Env,
    key: &[u8],
    start: Option<i64>,
    prefix: Option<()>,
) -> EtcdResult<Subscription> {
    let mut sub = env
        .hub
        .subscribe(Target {
            key: key.to_vec(),
            range_end: prefix.map(|()| crate::etcd::protocol::keys::prefix_end(key)),
            start_revision: start,
            events: Events::DeletesOnly,
        })
        .await?;
    match tokio::time::timeout(env.timeout, sub.recv()).await {
        Ok(WatchMsg::Created) => Ok(sub),
        _ => Err(crate::etcd::client::error::EtcdError::Failed {
            op: "watch",
            why: "the vigil's watch was not created".into(),
        }),
    }
}

/// Reads the lock key and the head of the queue; tells the first waiter
/// if it is ours. `None`: the lock is held; else the read's revision.
async fn read(env: &Env, keys: &LockKeys, vigil: &Vigil) -> EtcdResult<Option<i64>> {
    let (mut after, mut first_at) = (None, None);
    let mut seen = 0;
    loop {
        let txn = head_check(keys, after).into_txn();
        let mut kv = env.client.kv_client();
        let resp = request("vigil", env.timeout, kv.txn(txn)).await?;
        let (waiters, more_after, at) = match read_head(keys, &resp) {
            Head::Held => return Ok(None),
            Head::Free {
                waiters,
                more_after,
                at,
            } => (waiters, more_after, *first_at.get_or_insert(at)),
        };
        let ours = lock(&vigil.waiters);
        let first = match env.fairness {
            // Fair: only the first waiter in line may take it.
            Fairness::Fair => waiters.first(),
            // Unfair: any of ours may.
            Fairness::Unfair => waiters.iter().find(|w| ours.contains_key(&w.key)),
        };
        if let Some(told) = first.and_then(|w| ours.get(&w.key)) {
            told.notify_one();
        }
        seen += waiters.len().max(1);
        match more_after {
            Some(last) if waiters.is_empty() && seen < MAX_READ => after = Some(last),
            _ => return Ok(Some(at)),
        }
    }
}
