//! Wake-ups by pub/sub: one subscriber connection per node (shared by every
//! locker and waiter on it) listening on its own channel. On a cluster the
//! node is the whole cluster: its subscriber connects to one seed node
//! (the next one after a failure), since Redis Cluster delivers a
//! `PUBLISH` made on any node to the subscribers of every node; behind
//! sentinels it connects to the master they name at the time. A release
//! publishes the id of the one waiter it serves on that waiter's hub
//! channel; the hub wakes that waiter. Waiters also poll, slowly, in case a
//! message was lost (the subscriber reconnecting).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;

use crate::redis::connect::link::Subscribe;
use crate::redis::protocol::keys::wake_channel;
use crate::util::backoff::Backoff;

/// The wake-up side of one node.
pub(crate) struct Hub {
    /// Names this hub's channel; waiters write it in their queue records.
    pub id: String,
    shared: Arc<Subscribers>,
    task: AbortHandle,
}

struct Subscribers {
    waiters: Mutex<HashMap<String, Arc<Notify>>>,
    /// `true` while subscribed.
    ready: watch::Sender<bool>,
}

impl Subscribers {
    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Hub {
    /// Starts the subscriber task (it connects in the background).
    pub fn start(source: Subscribe, wake_prefix: &str) -> Hub {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let shared = Arc::new(Subscribers {
            waiters: Mutex::new(HashMap::new()),
            ready: watch::channel(false).0,
        });
        let channel = wake_channel(wake_prefix, &id);
        let task = tokio::spawn(listen(source, channel, Arc::clone(&shared)));
        Hub {
            id,
            shared,
            task: task.abort_handle(),
        }
    }

    /// Wakes `notify` whenever a release serves waiter `id`.
    pub fn register(&self, id: &str, notify: &Arc<Notify>) {
        self.shared
            .waiters()
            .insert(id.to_owned(), Arc::clone(notify));
    }

    /// How many waiters this hub wakes now.
    pub fn waiters(&self) -> usize {
        self.shared.waiters().len()
    }

    /// Stops waking waiter `id`.
    pub fn deregister(&self, id: &str) {
        self.shared.waiters().remove(id);
    }

    /// Waits until subscribed, at most `limit` (waiters then rely on
    /// polling until the subscription is up).
    pub async fn ready(&self, limit: Duration) {
        if *self.shared.ready.borrow() {
            return;
        }
        let mut rx = self.shared.ready.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|up| *up)).await;
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Subscribes and dispatches messages; reconnects after a loss, waking
/// every waiter then so none misses a release published meanwhile.
async fn listen(source: Subscribe, channel: String, shared: Arc<Subscribers>) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    let limit = Duration::from_secs(5);
    for attempt in 0.. {
        let pubsub = async {
            let client = source.client(attempt).await?;
            client.get_async_pubsub().await
        };
        if let Ok(Ok(pubsub)) = tokio::time::timeout(limit, pubsub).await {
            let (mut sink, mut stream) = pubsub.split();
            if let Ok(Ok(())) =
                tokio::time::timeout(Duration::from_secs(5), sink.subscribe(&channel)).await
            {
                backoff.reset();
                shared.ready.send_replace(true);
                for notify in shared.waiters().values() {
                    notify.notify_one();
                }
                while let Some(msg) = stream.next().await {
                    let Ok(id) = msg.get_payload::<String>() else {
                        continue;
                    };
                    if let Some(notify) = shared.waiters().get(&id) {
                        notify.notify_one();
                    }
                }
                shared.ready.send_replace(false);
            }
        }
        backoff.sleep().await;
    }
}
