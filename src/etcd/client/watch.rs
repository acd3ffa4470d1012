//! Watches multiplexed on one gRPC stream per locker.
//!
//! etcd lets one watch stream carry many watchers; fairlock assigns watch ids
//! itself and routes each response to its subscriber. Waiters of one locker
//! thus share its connection and stream instead of opening one each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::{
    Client, EventType, WatchFilterType, WatchOptions, WatchRequestSender, WatchResponseStream,
};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use super::error::EtcdResult;
pub(crate) use super::inbox::{Ev, WatchMsg};
use super::inbox::{Fanout, Inbox};
use super::request::request;

/// Where a watcher's messages go.
enum Route {
    /// One subscriber.
    Inbox(Arc<Inbox>),
    /// The listeners of a shared watch (`own_watch.rs`), each sent the
    /// changes of its own key, straight from the stream's reader.
    Fanout(Arc<Fanout>),
}

impl Route {
    fn send(&self, msg: WatchMsg) {
        match self {
            Route::Inbox(inbox) => inbox.send(msg),
            Route::Fanout(fanout) => fanout.send(msg),
        }
    }
}

enum Cmd {
    Create(Vec<u8>, WatchOptions),
    Cancel(i64),
}

/// The subscribers of a stream; `alive` turns false once, under the same
/// lock, so no route is added to a stream that already failed them all.
struct Routes {
    alive: bool,
    map: HashMap<i64, Route>,
}

struct Stream {
    cmd: mpsc::UnboundedSender<Cmd>,
    routes: Mutex<Routes>,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

impl Stream {
    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a route unless the stream has failed.
    fn add_route(&self, id: i64, tx: Arc<Inbox>) -> bool {
        let mut routes = self.routes();
        if routes.alive {
            routes.map.insert(id, Route::Inbox(tx));
        }
        routes.alive
    }

    /// Tells every subscriber the stream is gone.
    fn fail_all(&self, why: &str) {
        let mut routes = self.routes();
        routes.alive = false;
        for (_, tx) in routes.map.drain() {
            tx.send(WatchMsg::Ended(why.to_string()));
        }
    }
}

/// The shared watch stream of one locker, opened on first use and reopened
/// after it breaks.
pub(crate) struct WatchHub {
    client: Client,
    stream: tokio::sync::Mutex<Option<Arc<Stream>>>,
    next_id: AtomicI64,
    /// Bounds opening a stream.
    timeout: Duration,
}

/// A live watcher; dropping it cancels the watch.
pub(crate) struct Subscription {
    id: i64,
    rx: Arc<Inbox>,
    stream: Arc<Stream>,
}

impl Subscription {
    /// The next message. The hub ends every route it drops with `Ended`.
    pub async fn recv(&mut self) -> WatchMsg {
        self.rx.recv().await
    }

    /// The next message of `sub` if it is open; never ready without one.
    pub async fn next_of(sub: &mut Option<Subscription>) -> WatchMsg {
        match sub {
            Some(sub) => sub.recv().await,
            None => std::future::pending().await,
        }
    }
}

impl Subscription {
    /// From now on, passes this watcher's messages (and any still queued
    /// here) to the listeners of `fanout` in order, straight from the
    /// stream's reader, sparing the grant path a task hop. The watch lives
    /// as long as `self`.
    pub fn fan_out_to(&self, fanout: Arc<Fanout>) {
        let mut routes = self.stream.routes();
        let route = Route::Fanout(fanout);
        for msg in std::mem::take(&mut *self.rx.queue()) {
            route.send(msg);
        }
        if let Some(slot) = routes.map.get_mut(&self.id) {
            *slot = route;
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.stream.routes().map.remove(&self.id).is_some() {
            let _ = self.stream.cmd.send(Cmd::Cancel(self.id));
        }
    }
}

/// What to watch.
pub(crate) struct Target {
    pub key: Vec<u8>,
    /// `None` watches `key` alone.
    pub range_end: Option<Vec<u8>>,
    /// `None` watches from "now"; `Some(r)` replays from revision `r`.
    pub start_revision: Option<i64>,
    /// What etcd sends.
    pub events: Events,
}

/// Which changes a watch delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Events {
    /// Puts and deletes.
    All,
    /// Puts only: etcd filters the deletes out before sending (a watch on
    /// keys whose deletions its subscribers do not act on, such as a
    /// locker's own queue keys, which the locker itself deletes on every
    /// release).
    PutsOnly,
    /// Deletes only (a vigil over a lock freed without a handoff, which
    /// acts on nothing else: `session/vigil.rs`).
    DeletesOnly,
}

impl WatchHub {
    pub fn new(client: Client, timeout: Duration) -> Self {
        WatchHub {
            client,
            stream: tokio::sync::Mutex::new(None),
            next_id: AtomicI64::new(1),
            timeout,
        }
    }

    /// Registers a watcher and returns its subscription. The first message
    /// is `Created` (or `Ended`).
    pub async fn subscribe(&self, target: Target) -> EtcdResult<Subscription> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut options = WatchOptions::new().with_watch_id(id);
        if let Some(end) = target.range_end {
            options = options.with_range(end);
        }
        if let Some(rev) = target.start_revision {
            options = options.with_start_revision(rev);
        }
        match target.events {
            Events::All => {}
            Events::PutsOnly => options = options.with_filters([WatchFilterType::NoDelete]),
            Events::DeletesOnly => options = options.with_filters([WatchFilterType::NoPut]),
        }
        let mut slot = self.stream.lock().await;
        let rx = Arc::new(Inbox::default());
        if let Some(stream) = slot.as_ref()
            && stream.add_route(id, Arc::clone(&rx))
        {
            let create = Cmd::Create(target.key.clone(), options.clone());
            if stream.cmd.send(create).is_ok() {
                let stream = Arc::clone(stream);
                return Ok(Subscription { id, rx, stream });
            }
            stream.fail_all("watch stream closed");
        }
        // A fresh stream, and a fresh inbox (a failed stream may have told
        // the old one `Ended`).
        let rx = Arc::new(Inbox::default());
        let mut client = self.client.watch_client();
        let opened = request(
            "watch",
            self.timeout,
            client.watch(target.key, Some(options)),
        )
        .await?;
        let stream = open(opened.split(), id, Arc::clone(&rx));
        *slot = Some(Arc::clone(&stream));
        Ok(Subscription { id, rx, stream })
    }
}

/// Starts the reader and writer tasks of a new stream whose first watcher
/// (`first_id`, routed to `first_tx`) was sent with the open request.
fn open(
    (mut sender, mut responses): (WatchRequestSender, WatchResponseStream),
    first_id: i64,
    first_tx: Arc<Inbox>,
) -> Arc<Stream> {
    let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel::<Cmd>();
    let stream = Arc::new(Stream {
        cmd: cmd_tx,
        routes: Mutex::new(Routes {
            alive: true,
            map: HashMap::from([(first_id, Route::Inbox(first_tx))]),
        }),
        tasks: Mutex::new(Vec::new()),
    });
    let weak: Weak<Stream> = Arc::downgrade(&stream);
    let writer_stream = weak.clone();
    let writer = tokio::spawn(async move {
        while let Some(cmd) = cmd_rx.recv().await {
            let sent = match cmd {
                Cmd::Create(key, options) => sender.watch(key, Some(options)).await,
                Cmd::Cancel(id) => sender.cancel(id).await,
            };
            if sent.is_err() {
                break;
            }
        }
        if let Some(stream) = writer_stream.upgrade() {
            stream.fail_all("the watch stream stopped taking requests");
        }
    });
    let reader_stream = weak.clone();
    let reader = tokio::spawn(async move {
        let why = loop {
            let resp = match responses.message().await {
                Ok(Some(resp)) => resp,
                Ok(None) => break "etcd closed the watch stream".to_string(),
                Err(e) => break format!("watch stream failed: {e}"),
            };
            let Some(stream) = reader_stream.upgrade() else {
                return;
            };
            let id = resp.watch_id();
            let mut routes = stream.routes();
            let Some(tx) = routes.map.get(&id) else {
                continue;
            };
            if resp.created() {
                tx.send(WatchMsg::Created);
            }
            if !resp.events().is_empty() {
                let events: Arc<[Ev]> = resp
                    .events()
                    .iter()
                    .filter_map(|e| {
                        let kv = e.kv()?;
                        Some(Ev {
                            put: e.event_type() == EventType::Put,
                            key: kv.key().to_vec(),
                            value: kv.value().to_vec(),
                            create_revision: kv.create_revision(),
                            mod_revision: kv.mod_revision(),
                        })
                    })
                    .collect();
                tx.send(WatchMsg::Events { events });
            }
            if resp.canceled() {
                let why = if resp.compact_revision() > 0 {
                    format!(
                        "watch start revision compacted at {}",
                        resp.compact_revision()
                    )
                } else {
                    format!("watch cancelled by etcd: {}", resp.cancel_reason())
                };
                tx.send(WatchMsg::Ended(why));
                routes.map.remove(&id);
            }
        };
        if let Some(stream) = reader_stream.upgrade() {
            stream.fail_all(&why);
        }
    });
    stream
        .tasks
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend([writer.abort_handle(), reader.abort_handle()]);
    stream
}
