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
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::error::{EtcdError, EtcdResult};
use super::inbox::Fanout;
pub(crate) use super::inbox::KeyListener;
use super::watch::{Events, Subscription, Target, WatchHub, WatchMsg};

/// How long an unused shared watch stays open.
const IDLE: Duration = Duration::from_secs(30);

struct OpenWatch {
    /// Its listeners, each sent the changes of its own key (`inbox.rs`).
    fanout: Arc<Fanout>,
    /// The watch itself; dropping it cancels the watch.
    _sub: Subscription,
    last_used: Instant,
}

/// A watched key, or `[key, end)`.
type Range = (Vec<u8>, Option<Vec<u8>>);

/// One locker's shared watches, keyed by watched range.
pub(crate) struct OwnWatches {
    hub: Arc<WatchHub>,
    /// Bounds the wait for a new watch to be created.
    timeout: Duration,
    map: Mutex<HashMap<Range, OpenWatch>>,
}

impl OwnWatches {
    pub fn new(hub: Arc<WatchHub>, timeout: Duration) -> Self {
        OwnWatches {
            hub,
            timeout,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Listens for the changes of `listen_key` on the shared watch on
    /// `key` (or `[key, range_end)`) if it is open already; does not count
    /// as use (an unused watch closes after [`IDLE`], so lockers that
    /// never wait stop receiving events).
    pub async fn existing(
        &self,
        key: &[u8],
        range_end: Option<&[u8]>,
        listen_key: &[u8],
    ) -> Option<KeyListener> {
        let id = (key.to_vec(), range_end.map(<[u8]>::to_vec));
        let map = self.map.lock().await;
        map.get(&id)
            .filter(|s| !s.fanout.is_dead())
            .map(|s| s.fanout.listen(listen_key))
    }

    /// Counts a wait on an open shared watch as use, keeping it open.
    pub async fn touch(&self, key: &[u8], range_end: Option<&[u8]>) {
        let id = (key.to_vec(), range_end.map(<[u8]>::to_vec));
        if let Some(shared) = self.map.lock().await.get_mut(&id) {
            shared.last_used = Instant::now();
        }
    }

    /// Listens for the changes of `listen_key` on the shared watch on
    /// `key` (or `[key, range_end)`), opening it if needed. Every change
    /// of `listen_key` after this call returns is delivered, unless the
    /// listener later receives `Ended`.
    pub async fn listen(
        &self,
        key: &[u8],
        range_end: Option<&[u8]>,
        listen_key: &[u8],
    ) -> EtcdResult<KeyListener> {
        let id = (key.to_vec(), range_end.map(<[u8]>::to_vec));
        let mut map = self.map.lock().await;
        map.retain(|_, s| {
            !s.fanout.is_dead() && (!s.fanout.is_unused() || s.last_used.elapsed() < IDLE)
        });
        if let Some(shared) = map.get_mut(&id) {
            shared.last_used = Instant::now();
            return Ok(shared.fanout.listen(listen_key));
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
        let fanout = Arc::new(Fanout::default());
        let listener = fanout.listen(listen_key);
        sub.fan_out_to(Arc::clone(&fanout));
        map.insert(
            id,
            OpenWatch {
                fanout,
                _sub: sub,
                last_used: Instant::now(),
            },
        );
        Ok(listener)
    }
}
