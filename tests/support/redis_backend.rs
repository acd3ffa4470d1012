//! Test support: the conformance suite's [`Backend`] on Redis, shared by
//! tests/redis.rs (one server, fair mode supported), tests/redlock.rs
//! (several servers, Redlock: fair mode refused) and tests/tls_redis.rs.

use std::sync::Arc;

use async_trait::async_trait;
use fairlock::conformance::Backend;
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Key, LockGuard, Locker};

use super::redis_server as rs;

/// A base locker on one or more redis-servers, with the URLs of the servers
/// whose keys the test checks.
pub struct RedisBackend {
    pub urls: Vec<String>,
    pub base: RedisLocker,
    /// Whether fair mode works here (one server; Redlock refuses it).
    fair: bool,
    /// Whether the conformance suite checks read/write locks and
    /// semaphores here (see [`RedisBackend::with_shared`]).
    shared: bool,
    /// On a cluster (whose masters are `urls`): a connection that routes
    /// reads of a lock's keys to their slot's master.
    cluster: Option<redis::cluster_async::ClusterConnection>,
}

impl RedisBackend {
    /// `base`, checked on `urls` (which may leave out configured servers
    /// that are down).
    pub fn new(base: RedisLocker, urls: Vec<String>) -> RedisBackend {
        let fair = !base.config().is_redlock();
        RedisBackend {
            urls,
            base,
            fair,
            shared: false,
            cluster: None,
        }
    }

    /// Has the conformance suite check read/write locks and semaphores:
    /// on one server (Redlock refuses them).
    #[must_use]
    pub fn with_shared(mut self) -> RedisBackend {
        self.shared = true;
        self
    }

    /// `base` on a cluster whose masters are at `masters`.
    pub async fn cluster(base: RedisLocker, masters: Vec<String>) -> RedisBackend {
        let conn = redis::cluster::ClusterClient::new(masters.clone())
            .expect("cluster client")
            .get_async_connection()
            .await
            .expect("cluster connection");
        RedisBackend {
            urls: masters,
            base,
            fair: true,
            shared: false,
            cluster: Some(conn),
        }
    }

    /// A base locker (not fair) connected with `config`, checked on all
    /// its URLs.
    pub async fn connect(config: RedisConfig) -> RedisBackend {
        let urls = config.urls().to_vec();
        let base = RedisLocker::connect(config, false).await.expect("connect");
        RedisBackend::new(base, urls)
    }

    pub fn prefix(&self) -> &str {
        self.base.config().prefix()
    }

    /// The Redis key of the fair queue of `key`.
    pub fn queue(&self, key: &Key) -> String {
        format!("{}/_OWNERS_/queue", self.lock_key(key))
    }

    /// The Redis key of the line of `key` as a read/write lock or
    /// semaphore (holders and waiters).
    pub fn line(&self, key: &Key) -> String {
        format!("{}/_OWNERS_/line", self.lock_key(key))
    }

    /// The Redis key of the record of entry `id` in the line of `key`.
    pub fn entry(&self, key: &Key, id: &str) -> String {
        format!("{}/_OWNERS_/e/{id}", self.lock_key(key))
    }

    /// The keys left under the prefix (but the fencing counter), as
    /// `url: key`, on every checked server.
    pub async fn keys_left(&self) -> Vec<String> {
        let mut left = Vec::new();
        for url in &self.urls {
            let keys = rs::keys_left(url, self.prefix()).await;
            left.extend(keys.into_iter().map(|k| format!("{url}: {k}")));
        }
        left
    }

    /// The Redis key that holds `key`'s lock (in a hash tag on a
    /// cluster).
    pub fn lock_key(&self, key: &Key) -> String {
        match self.cluster {
            Some(_) => format!("{}{{{key}}}", self.prefix()),
            None => format!("{}{key}", self.prefix()),
        }
    }

    /// A command on the node that holds its keys (on a cluster, routed).
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        match &self.cluster {
            Some(conn) => cmd.query_async(&mut conn.clone()).await,
            None => cmd.query_async(&mut rs::conn(&self.urls[0]).await).await,
        }
        .expect("query")
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn locker(&self, fair: bool) -> Arc<dyn Locker> {
        Arc::new(self.base.locker(fair))
    }
    /// Counts the mutex's fair waiters and, with read/write locks and
    /// semaphores, the callers in the key's line, holders included.
    async fn wait_queued(&self, key: &Key, n: usize) {
        if self.cluster.is_none() && !self.shared {
            return rs::wait_queued(&self.urls[0], self.prefix(), key, n).await;
        }
        let zcard = redis::cmd("ZCARD").arg(self.queue(key)).to_owned();
        let in_line = redis::cmd("ZCARD").arg(self.line(key)).to_owned();
        rs::wait_until_any(&self.urls, self.prefix(), || async {
            self.query::<usize>(&zcard).await + self.query::<usize>(&in_line).await >= n
        })
        .await;
    }
    async fn wait_clean(&self) {
        for url in &self.urls {
            rs::wait_clean(url, self.prefix()).await;
        }
    }
    /// No key under the prefix on any checked server (but the fencing
    /// counter), read once. A waiter that gave up removes its entry before
    /// returning, unless a server does not answer within the per-node
    /// timeout (then the removal goes on in the background, and this is
    /// `false`).
    async fn is_clean(&self) -> bool {
        self.keys_left().await.is_empty()
    }
    async fn finish(&self) {
        let left = self.keys_left().await;
        assert!(left.is_empty(), "keys left: {left:?}");
    }
    fn supports_fair(&self) -> bool {
        self.fair
    }
    fn supports_shared(&self) -> bool {
        self.shared
    }
    /// Everywhere but on Redlock, which refuses `lock_all`.
    fn supports_lock_all(&self) -> bool {
        !self.base.config().is_redlock()
    }
    /// On a cluster, every key of the checks in one slot: the hash tag
    /// `{all}` (Redis hashes `{all` of the lock key `<prefix>{{all}name}`).
    fn lock_all_key(&self, name: &str) -> Key {
        match self.cluster {
            Some(_) => Key::from(format!("{{all}}{name}")),
            None => Key::from(name),
        }
    }
}

/// Takes `key` on `locker` with `try_lock`, which must find it free.
pub async fn take<L: Locker + ?Sized>(locker: &L, key: &Key) -> LockGuard {
    locker.try_lock(key).await.expect("try_lock").expect("free")
}

/// Elections on the same store: each elector a fair locker of its own
/// (its own id) on the base locker's connections.
#[async_trait]
impl fairlock::conformance::ElectionBackend for RedisBackend {
    fn elector(&self) -> Arc<dyn fairlock::Elector> {
        Arc::new(self.base.elector())
    }
    /// The candidates in the election's fair queue (the leader holds the
    /// lock key, not a queue entry).
    async fn wait_candidates(&self, name: &Key, n: usize) {
        Backend::wait_queued(self, name, n).await;
    }
    async fn wait_clean(&self) {
        Backend::wait_clean(self).await;
    }
    async fn is_clean(&self) -> bool {
        Backend::is_clean(self).await
    }
    async fn finish(&self) {
        Backend::finish(self).await;
    }
}
