//! A watch's messages ([`WatchMsg`]) and where they wait for their reader:
//! one subscriber's [`Inbox`], and the [`Fanout`] of a shared watch, which sends each of its
//! listeners the changes of the one key that listener waits on.
//!
//! A locker's shared watch of its own queue keys (`own_watch.rs`) carries
//! a change for every grant, wake-up and enqueue of every one of its
//! waiters. Sent to every waiter, each change would wake all of them: a
//! locker with N waiters would do N wake-ups per handoff, and a waiter
//! that fell behind would have to re-read the queue (measured before this
//! file: 272 handoffs/s with 1,000 waiters of one process against 858
//! with 10, and none at all with 3,000). Routed by key, a change wakes the
//! one waiter it is for, whatever the queue's length.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// One change seen by a watch.
#[derive(Clone, Debug)]
pub(crate) struct Ev {
    pub put: bool,
    pub key: Vec<u8>,
    /// The value written (empty for a delete).
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
}

/// What a subscription receives.
#[derive(Clone, Debug)]
pub(crate) enum WatchMsg {
    /// The watch is registered.
    Created,
    /// Changes, all at revisions <= `revision`.
    Events { events: Arc<[Ev]> },
    /// etcd ended the watch (e.g. its start revision was compacted) or the
    /// stream broke; the subscriber must re-read the state it cares about.
    Ended(String),
}

/// One subscriber's pending messages: an unbounded queue that costs no
/// allocation while empty (an mpsc channel allocates a block of slots up
/// front; a waiting lock holds one of these for as long as it waits).
#[derive(Default)]
pub(super) struct Inbox {
    queue: Mutex<VecDeque<WatchMsg>>,
    ready: Notify,
}

impl Inbox {
    pub(super) fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<WatchMsg>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn send(&self, msg: WatchMsg) {
        self.queue().push_back(msg);
        self.ready.notify_one();
    }

    pub(super) async fn recv(&self) -> WatchMsg {
        loop {
            {
                let mut queue = self.queue();
                if let Some(msg) = queue.pop_front() {
                    if queue.is_empty() {
                        *queue = VecDeque::new(); // give the buffer back
                    }
                    return msg;
                }
            }
            // A message sent after the check above leaves a permit, so
            // this returns at once.
            self.ready.notified().await;
        }
    }
}

/// Listeners by the key each waits on, each with its id.
type ByKey = HashMap<Vec<u8>, Vec<(u64, Arc<Inbox>)>>;

/// The listeners of one shared watch, by the key each waits on.
#[derive(Default)]
pub(crate) struct Fanout {
    /// Set with the `Ended` it passes on: the watch is over.
    dead: AtomicBool,
    next_id: AtomicU64,
    by_key: Mutex<ByKey>,
}

impl Fanout {
    fn listeners(&self) -> std::sync::MutexGuard<'_, ByKey> {
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the watch is over (its listeners got `Ended`).
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// How many listeners it has (one step per key listened to).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.listeners().values().map(Vec::len).sum()
    }

    /// Whether nobody listens: one step, whatever the listeners (a key's
    /// route goes with its last listener), as the owner checks it at
    /// every listen.
    pub fn is_unused(&self) -> bool {
        self.listeners().is_empty()
    }

    /// A listener for the changes of `key`, from now on. On a watch that
    /// is over already, it gets `Ended` at once.
    pub fn listen(self: &Arc<Self>, key: &[u8]) -> KeyListener {
        let inbox = Arc::new(Inbox::default());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut listeners = self.listeners();
        // Checked under the lock `send` takes to pass `Ended` on.
        if self.is_dead() {
            inbox.send(WatchMsg::Ended("watch closed".into()));
        }
        listeners
            .entry(key.to_vec())
            .or_default()
            .push((id, Arc::clone(&inbox)));
        KeyListener {
            fanout: Arc::clone(self),
            key: key.to_vec(),
            id,
            inbox,
        }
    }

    /// Passes `msg` on: changes to the listeners of their keys, the end
    /// to every listener.
    pub(super) fn send(&self, msg: WatchMsg) {
        let listeners = self.listeners();
        match msg {
            WatchMsg::Created => {}
            WatchMsg::Ended(why) => {
                self.dead.store(true, Ordering::SeqCst);
                for (_, inbox) in listeners.values().flatten() {
                    inbox.send(WatchMsg::Ended(why.clone()));
                }
            }
            WatchMsg::Events { events } => {
                let mut of_key: HashMap<&[u8], Vec<Ev>> = HashMap::new();
                for ev in events.iter() {
                    if listeners.contains_key(&ev.key) {
                        of_key.entry(&ev.key).or_default().push(ev.clone());
                    }
                }
                for (key, evs) in of_key {
                    let events: Arc<[Ev]> = evs.into();
                    for (_, inbox) in &listeners[key] {
                        inbox.send(WatchMsg::Events {
                            events: Arc::clone(&events),
                        });
                    }
                }
            }
        }
    }
}

/// A listener of a shared watch: the changes of one key, and the watch's
/// end. Dropping it stops the routing to it.
pub(crate) struct KeyListener {
    fanout: Arc<Fanout>,
    key: Vec<u8>,
    id: u64,
    inbox: Arc<Inbox>,
}

impl KeyListener {
    /// The next message: changes of its key, or `Ended` (re-read state).
    pub async fn recv(&mut self) -> WatchMsg {
        self.inbox.recv().await
    }
}

impl Drop for KeyListener {
    fn drop(&mut self) {
        let mut listeners = self.fanout.listeners();
        if let Some(list) = listeners.get_mut(&self.key) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                listeners.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &[u8], rev: i64) -> Ev {
        Ev {
            put: true,
            key: key.to_vec(),
            value: Vec::new(),
            create_revision: rev,
            mod_revision: rev,
        }
    }

    fn keys_of(msg: WatchMsg) -> Vec<Vec<u8>> {
        match msg {
            WatchMsg::Events { events } => events.iter().map(|e| e.key.clone()).collect(),
            other => panic!("expected events, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn each_listener_gets_the_changes_of_its_key_only() {
        let fanout = Arc::new(Fanout::default());
        let (mut a, mut b) = (fanout.listen(b"a"), fanout.listen(b"b"));
        fanout.send(WatchMsg::Events {
            events: vec![put(b"a", 2), put(b"c", 3), put(b"b", 4), put(b"a", 5)].into(),
        });
        assert_eq!(keys_of(a.recv().await), vec![b"a".to_vec(), b"a".to_vec()]);
        assert_eq!(keys_of(b.recv().await), vec![b"b".to_vec()]);
        assert!(a.inbox.queue().is_empty() && b.inbox.queue().is_empty());
    }

    #[tokio::test]
    async fn the_end_reaches_every_listener_and_later_ones() {
        let fanout = Arc::new(Fanout::default());
        let mut a = fanout.listen(b"a");
        fanout.send(WatchMsg::Ended("gone".into()));
        assert!(matches!(a.recv().await, WatchMsg::Ended(_)));
        let mut late = fanout.listen(b"b");
        assert!(matches!(late.recv().await, WatchMsg::Ended(_)));
        assert!(fanout.is_dead());
    }

    #[tokio::test]
    async fn a_dropped_listener_leaves_the_routes() {
        let fanout = Arc::new(Fanout::default());
        let a = fanout.listen(b"a");
        let b = fanout.listen(b"a");
        assert_eq!(fanout.len(), 2);
        drop(a);
        assert_eq!(fanout.len(), 1);
        drop(b);
        assert!(fanout.is_unused());
    }
}
