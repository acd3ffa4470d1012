//! Test support: the conformance suite's [`Backend`] on Redis, shared by
//! tests/redis.rs (one server, fair mode supported) and tests/redlock.rs
//! (several servers, Redlock: fair mode refused).
//!
//! It implements `conformance::Backend`, which only the test binaries that
//! also declare `mod conformance` have, so it is not declared in
//! tests/support/mod.rs: those two files include it with
//! `#[path = "support/redis_backend.rs"] mod redis_backend;`.
#![allow(dead_code)]

use std::sync::Arc;

use async_trait::async_trait;
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Key, LockGuard, Locker};

use crate::conformance::Backend;
use crate::support::redis_server as rs;

/// A base locker on one or more redis-servers, with the URLs of the servers
/// whose keys the test checks.
pub struct RedisBackend {
    pub urls: Vec<String>,
    pub base: RedisLocker,
    /// Whether fair mode works here (one server; Redlock refuses it).
    fair: bool,
}

impl RedisBackend {
    /// `base`, checked on `urls` (which may leave out configured servers
    /// that are down).
    pub fn new(base: RedisLocker, urls: Vec<String>) -> RedisBackend {
        let fair = !base.config().is_redlock();
        RedisBackend { urls, base, fair }
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
        rs::queue_key(self.prefix(), key)
    }

    /// The Redis key that holds `key`'s lock.
    pub fn lock_key(&self, key: &Key) -> String {
        format!("{}{key}", self.prefix())
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn locker(&self, fair: bool) -> Arc<dyn Locker> {
        Arc::new(self.base.locker(fair))
    }
    async fn wait_queued(&self, key: &Key, n: usize) {
        rs::wait_queued(&self.urls[0], self.prefix(), key, n).await;
    }
    async fn wait_clean(&self) {
        for url in &self.urls {
            rs::wait_clean(url, self.prefix()).await;
        }
    }
    /// Waits (on keyspace events) until nothing is left: a waiter that
    /// gave up removes its entry before returning unless Redis is slower
    /// than the per-node timeout, when the removal goes on in the
    /// background; a machine under load must not make that a failure.
    /// Entries that are never removed still fail (the wait panics).
    async fn is_clean(&self) -> bool {
        self.wait_clean().await;
        true
    }
    async fn finish(&self) {
        for url in &self.urls {
            let left = rs::keys_left(url, self.prefix()).await;
            assert!(left.is_empty(), "keys left on {url}: {left:?}");
        }
    }
    fn supports_fair(&self) -> bool {
        self.fair
    }
}

/// A deadline that only guards against a hang.
pub fn patient() -> Context {
    Context::background().with_timeout(std::time::Duration::from_secs(120))
}

/// Takes `key` on `locker` with `try_lock`, which must find it free.
pub async fn take<L: Locker + ?Sized>(locker: &L, key: &Key) -> LockGuard {
    locker.try_lock(key).await.expect("try_lock").expect("free")
}
