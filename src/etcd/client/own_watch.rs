//! Long-lived watches shared by the waiters of one locker.
//!
//! A watch opened "now" in etcd 3.4 is sometimes registered unsynced and
//! delivers its first events ~100 ms late. Keeping one watch per
//! locker and range open, and reusing it for every wait, keeps the grant
//! path off that trap. Idle watches are closed after [`IDLE`].
//!
//! These watches carry the touches of a locker's own queue keys (grants
//! and wake-ups), so etcd sends them puts only: the locker deletes its own
//! queue keys itself, on every release, and delivering each deletion back
//! to it would cost etcd an event per handoff for nothing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Mutex, broadcast};
use tokio::time::Instant;

use super::error::{EtcdError, EtcdResult};
use super::watch::{Events, Subscription, Target, WatchHub, WatchMsg};

/// How long an unused shared watch stays open.
const IDLE: Duration = Duration::from_secs(30);
/// Messages buffered per subscriber before it must re-read state.
const CAPACITY: usize = 1024;

struct OpenWatch {
    tx: broadcast::Sender<WatchMsg>,
    dead: Arc<AtomicBool>,
    /// The watch itself; dropping it cancels the watch.
    _sub: Subscription,
    last_used: Instant,
}

/// A watched key, or `[key, end)`.
type Range = (Vec<u8>, Option<Vec<u8>>);

/// How many of a locker's waiters re-read their queue at once when their
/// patience runs out (see `lock/queue.rs`).
const REREADS: usize = 8;

/// One locker's shared watches, keyed by watched range.
pub(crate) struct OwnWatches {
    /// Bounds the queue re-reads of this locker's waiters whose patience
    /// ran out together (they were queued together).
    pub rereads: tokio::sync::Semaphore,
    hub: Arc<WatchHub>,
    /// Bounds the wait for a new watch to be created.
    timeout: Duration,
    map: Mutex<HashMap<Range, OpenWatch>>,
}

/// A subscriber's view of a shared watch.
pub(crate) struct Listener(broadcast::Receiver<WatchMsg>);

impl Listener {
    /// The next message; lagging behind counts as `Ended` (re-read state).
    pub async fn recv(&mut self) -> WatchMsg {
        match self.0.recv().await {
            Ok(msg) => msg,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                WatchMsg::Ended(format!("fell {n} messages behind"))
            }
            Err(broadcast::error::RecvError::Closed) => WatchMsg::Ended("watch closed".into()),
        }
    }
}

impl OwnWatches {
    pub fn new(hub: Arc<WatchHub>, timeout: Duration) -> Self {
        OwnWatches {
            rereads: tokio::sync::Semaphore::new(REREADS),
            hub,
            timeout,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Subscribes to the shared watch on `key` (or `[key, range_end)`) if
    /// it is open already; does not count as use (an unused watch closes
    /// after [`IDLE`], so lockers that never wait stop receiving events).
    pub async fn existing(&self, key: &[u8], range_end: Option<&[u8]>) -> Option<Listener> {
        let id = (key.to_vec(), range_end.map(<[u8]>::to_vec));
        let map = self.map.lock().await;
        map.get(&id)
            .filter(|s| !s.dead.load(Ordering::SeqCst))
            .map(|s| Listener(s.tx.subscribe()))
    }

    /// Counts a wait on an open shared watch as use, keeping it open.
    pub async fn touch(&self, key: &[u8], range_end: Option<&[u8]>) {
        let id = (key.to_vec(), range_end.map(<[u8]>::to_vec));
        if let Some(shared) = self.map.lock().await.get_mut(&id) {
            shared.last_used = Instant::now();
        }
    }

    /// Subscribes to the shared watch on `key` (or `[key, range_end)`),
    /// opening it if needed. Every change after this call returns is
    /// delivered, unless the listener later receives `Ended`.
    pub async fn listen(&self, key: &[u8], range_end: Option<&[u8]>) -> EtcdResult<Listener> {
        let id = (key.to_vec(), range_end.map(<[u8]>::to_vec));
        let mut map = self.map.lock().await;
        map.retain(|_, s| {
            !s.dead.load(Ordering::SeqCst)
                && (s.tx.receiver_count() > 0 || s.last_used.elapsed() < IDLE)
        });
        if let Some(shared) = map.get_mut(&id) {
            shared.last_used = Instant::now();
            return Ok(Listener(shared.tx.subscribe()));
        }
        let mut sub = self
            .hub
            .subscribe(Target {
                key: id.0.clone(),
                range_end: id.1.clone(),
                start_revision: None,
                events: Events::PutsOnly,
            })
            .await?;
        let created = tokio::time::timeout(self.timeout, sub.recv()).await;
        match created.unwrap_or_else(|_| WatchMsg::Ended("no answer to the watch request".into())) {
            WatchMsg::Created => {}
            WatchMsg::Ended(why) => {
                return Err(EtcdError::Failed {
                    op: "watch",
                    why: why.into(),
                });
            }
            WatchMsg::Events { .. } => {
                return Err(EtcdError::Failed {
                    op: "watch",
                    why: "events arrived before the watch was created".into(),
                });
            }
        }
        let (tx, rx) = broadcast::channel(CAPACITY);
        let dead = Arc::new(AtomicBool::new(false));
        sub.broadcast_to(tx.clone(), Arc::clone(&dead));
        map.insert(
            id,
            OpenWatch {
                tx,
                dead,
                _sub: sub,
                last_used: Instant::now(),
            },
        );
        Ok(Listener(rx))
    }
}
