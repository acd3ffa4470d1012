//! The conformance suite and Redis-only behaviour against one real
//! redis-server that the tests start themselves (see tests/support).

mod conformance;
mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use conformance::Backend;
use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Error, Key, Locker};
use support::redis_server::{self as rs, RedisServer};

struct Redis {
    urls: Vec<String>,
    base: RedisLocker,
}

async fn connect(urls: Vec<String>, test: &str, ttl: Duration) -> Redis {
    let config = RedisConfig::new(urls.clone())
        .with_prefix(rs::unique_prefix(test))
        .with_ttl(ttl);
    Redis {
        base: RedisLocker::connect(config, false).await.expect("connect"),
        urls,
    }
}

async fn redis(test: &str) -> Redis {
    connect(
        vec![rs::shared().url.clone()],
        test,
        Duration::from_secs(10),
    )
    .await
}

impl Redis {
    fn prefix(&self) -> &str {
        self.base.config().prefix()
    }
    fn queue(&self, key: &Key) -> String {
        format!("{}{key}/_OWNERS_/queue", self.prefix())
    }
    fn lock_key(&self, key: &Key) -> String {
        format!("{}{key}", self.prefix())
    }
}

#[async_trait]
impl Backend for Redis {
    fn locker(&self, fair: bool) -> Arc<dyn Locker> {
        Arc::new(self.base.locker(fair))
    }
    async fn wait_queued(&self, key: &Key, n: usize) {
        let queue = self.queue(key);
        let url = &self.urls[0];
        rs::wait_until(url, self.prefix(), || async {
            rs::zcard(url, &queue).await >= n
        })
        .await;
    }
    async fn wait_clean(&self) {
        for url in &self.urls {
            rs::wait_until(url, self.prefix(), || async {
                rs::keys_left(url, self.prefix()).await.is_empty()
            })
            .await;
        }
    }
    async fn is_clean(&self) -> bool {
        for url in &self.urls {
            if !rs::keys_left(url, self.prefix()).await.is_empty() {
                return false;
            }
        }
        true
    }
    async fn finish(&self) {
        for url in &self.urls {
            let left = rs::keys_left(url, self.prefix()).await;
            assert!(left.is_empty(), "keys left on {url}: {left:?}");
        }
    }
}

conformance_tests!(redis);

fn patient() -> Context {
    Context::background().with_timeout(Duration::from_secs(120))
}

async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}
