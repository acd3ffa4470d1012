//! The master behind Redis Sentinel: found through the sentinels (the
//! `redis` crate's `sentinel` feature asks them, and checks with `ROLE`
//! that the node they name is a master), and found again after a failover.
//!
//! What is written here by hand, and why: the crate finds a master once
//! and has no connection that follows a failover. [`Primary`] keeps one
//! connection to the master it found and forgets it
//! - as soon as a sentinel announces a failover of this master
//!   (`+switch-master` on its pub/sub; a task listens to one sentinel at a
//!   time, the next after a failure): an old master goes on answering as
//!   a master for seconds after its replica was promoted, and writes it
//!   acknowledges then are lost;
//! - when a request shows that the master is gone or no longer a master
//!   (the connection dropped or was refused, `READONLY` from a demoted
//!   master, no answer within the per-node timeout).
//!
//! Each announcement that moves the locker off a node starts a new
//! generation; an answer to a request sent in an earlier generation does
//! not count (`node.rs` turns it into a
//! failure), so nothing the old master says after the announcement moves
//! a holder's deadline. The next request asks the sentinels again. A
//! request that fails is not retried here: the locker's callers retry
//! (the watchdog until its deadline, so a lock held across a failover is
//! either extended on the new master, which then has it, or reported
//! lost). The replicas that must acknowledge a grant are those the
//! sentinels list (`replicas.rs` asks through [`Primary::replicas`]).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, TlsMode};
use tokio::task::AbortHandle;

use crate::Result;
use crate::redis::config::redis_config::RedisConfig;
use crate::redis::connect::lanes::{Lane, Lanes};
use crate::redis::connect::listing::{Listing, Master, Replica};
use crate::redis::connect::secure::{certificates, connection_info, invalid};
use crate::util::backoff::Backoff;

/// The sentinels' channel of completed failovers.
const SWITCH_CHANNEL: &str = "+switch-master";

/// The connections to the master (a lane each, `link.rs`), and the
/// master's address.
#[derive(Clone)]
struct Current {
    lanes: Lanes<MultiplexedConnection>,
    addr: String,
    /// How it was reached (credentials, TLS), to reach a replica alike.
    info: redis::ConnectionInfo,
    /// Tells it apart from the connections found before and after it.
    id: u64,
}

/// The master the sentinels name, and the connection to it.
pub(crate) struct Primary {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<Current>>,
    /// Counts the announced failovers that moved the locker off a node:
    /// an answer sent in an earlier generation does not count.
    generation: AtomicU64,
    /// The id of the next connection found.
    next_id: AtomicU64,
    /// The name the sentinels monitor the master under.
    master: String,
    connect_timeout: Duration,
    /// The task that follows the sentinels' failover announcements.
    follower: Mutex<Option<AbortHandle>>,
}

impl Primary {
    /// A client of the sentinels at `urls` for the master they monitor as
    /// `master`. Connects to nothing yet.
    pub fn new(config: &RedisConfig, urls: &[String], master: &str) -> Result<Primary> {
        let first = urls.first().map_or("", String::as_str);
        // The URLs' own credentials (from redis+sentinel://user:pw@...)
        // are the master's and, unless set apart, the sentinels'.
        let url_info = connection_info(first, None)?;
        let url_credentials = url_info
            .redis_settings()
            .password()
            .map(|pw| (url_info.redis_settings().username(), pw));
        let master_credentials = url_credentials.or(config.credentials());
        let sentinel_credentials = config.sentinel_credentials().or(master_credentials);
        let mut addrs = Vec::new();
        for url in urls {
            addrs.push(connection_info(url, None)?.addr().clone());
        }
        let err = |e: redis::RedisError| invalid(first, &e);
        let mut builder =
            SentinelClientBuilder::new(addrs, master, SentinelServerType::Master).map_err(err)?;
        if let Some((user, password)) = master_credentials {
            builder = builder.set_client_to_redis_password(password);
            if let Some(user) = user {
                builder = builder.set_client_to_redis_username(user);
            }
        }
        if let Some((user, password)) = sentinel_credentials {
            builder = builder.set_client_to_sentinel_password(password);
            if let Some(user) = user {
                builder = builder.set_client_to_sentinel_username(user);
            }
        }
        if let Some(certs) = certificates(config, first)? {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_redis_certificates(certs.clone())
                .set_client_to_sentinel_certificates(certs);
        }
        Ok(Primary {
            sentinels: tokio::sync::Mutex::new(builder.build().map_err(err)?),
            current: Mutex::new(None),
            generation: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            master: master.to_owned(),
            connect_timeout: config.connect_timeout(),
            follower: Mutex::new(None),
        })
    }

    /// Starts following the sentinels' failover announcements, until the
    /// primary is dropped.
    pub fn follow(self: &Arc<Self>) {
        let task = tokio::spawn(follow(Arc::downgrade(self)));
        *self.follower.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.abort_handle());
    }

    /// The generation requests go out in now.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The sentinels announced `addr` (`host:port`) as the master: forgets
    /// a connection to any other node, starting a new generation.
    fn switched(&self, addr: &str) {
        let mut current = self.current();
        if current.as_ref().is_none_or(|c| c.addr != addr) {
            self.generation.fetch_add(1, Ordering::SeqCst);
            *current = None;
        }
    }

    /// The replicas of the master as the sentinels list them, with the
    /// address of the master this locker is connected to (if any).
    pub async fn replicas(&self) -> redis::RedisResult<Listing> {
        let client = self
            .sentinels
            .lock()
            .await
            .async_get_sentinel_client()
            .await?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let replicas: Vec<Replica> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(&self.master)
            .query_async(&mut conn)
            .await?;
        let master = self.current().clone().map(|c| Master {
            addr: c.addr,
            conn: c.lanes.plain,
            info: c.info,
        });
        // A short bound: the read runs at connect, within the connect
        // timeout, and in the background while requests use the last one.
        let ask = (self.connect_timeout / 2).min(Duration::from_secs(1));
        Ok(Listing::count(&replicas, master, ask).await)
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Current>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client of the master the sentinels name now (checked with `ROLE`).
    pub async fn master(&self) -> redis::RedisResult<redis::Client> {
        self.sentinels.lock().await.async_get_client().await
    }

    /// Runs `request` on the master's connection of `lane`; a failure that
    /// shows the master gone or demoted forgets the master's connections
    /// (not ones found since).
    pub async fn run<T, F, Fut>(&self, lane: Lane, request: F) -> redis::RedisResult<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let (lanes, id) = self.connection().await?;
        let result = request(lanes.get(lane)).await;
        if let Err(e) = &result {
            self.after_failure(Some(e), Some(id));
        }
        result
    }

    /// The connections to the master and their id, found through the
    /// sentinels when there are none.
    async fn connection(&self) -> redis::RedisResult<(Lanes<MultiplexedConnection>, u64)> {
        if let Some(current) = self.current().clone() {
            return Ok((current.lanes, current.id));
        }
        let mut sentinels = self.sentinels.lock().await;
        // Another request may have found it while this one waited.
        if let Some(current) = self.current().clone() {
            return Ok((current.lanes, current.id));
        }
        let generation = self.generation();
        let client = sentinels.async_get_client().await?;
        let info = client.get_connection_info().clone();
        let addr = info.addr().to_string();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let lanes = Lanes {
            plain: client
                .get_multiplexed_async_connection_with_config(&config)
                .await?,
            acked: client
                .get_multiplexed_async_connection_with_config(&config)
                .await?,
        };
        let mut current = self.current();
        // A failover announced meanwhile: the sentinels may have named the
        // old master.
        if self.generation() != generation {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "a failover was announced while connecting to the master",
            )));
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        *current = Some(Current {
            lanes: lanes.clone(),
            addr,
            info,
            id,
        });
        Ok((lanes, id))
    }

    /// Forgets the connection `id` (`None`: whichever is current) after
    /// `error` when it shows that the master may have changed (or `None`:
    /// no answer in time); a connection found since is kept.
    pub fn after_failure(&self, error: Option<&redis::RedisError>, id: Option<u64>) {
        if error.is_none_or(master_may_have_changed) {
            let mut current = self.current();
            if current
                .as_ref()
                .is_some_and(|c| id.is_none_or(|id| id == c.id))
            {
                *current = None;
            }
        }
    }
}

impl Drop for Primary {
    fn drop(&mut self) {
        if let Some(task) = self
            .follower
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

/// Listens to one sentinel's `+switch-master` at a time and forgets the
/// connection at every failover of `primary`'s master; after a failure,
/// the next sentinel that answers, after a pause.
async fn follow(primary: Weak<Primary>) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        let subscribed = async {
            let primary = primary.upgrade()?;
            let client = primary
                .sentinels
                .lock()
                .await
                .async_get_sentinel_client()
                .await
                .ok()?;
            let mut pubsub = client.get_async_pubsub().await.ok()?;
            pubsub.subscribe(SWITCH_CHANNEL).await.ok()?;
            Some(pubsub.into_on_message())
        };
        if let Some(mut events) = subscribed.await {
            backoff.reset();
            while let Some(msg) = events.next().await {
                let Some(primary) = primary.upgrade() else {
                    return;
                };
                let text: String = msg.get_payload().unwrap_or_default();
                // "<name> <old ip> <old port> <new ip> <new port>"
                let words: Vec<&str> = text.split_whitespace().collect();
                if let [name, _, _, ip, port] = words[..]
                    && name == primary.master
                {
                    primary.switched(&format!("{ip}:{port}"));
                }
            }
        }
        if primary.strong_count() == 0 {
            return;
        }
        backoff.sleep().await;
    }
}

/// Whether `e` means that the node may no longer be the master: its
/// connection broke or was refused, or it refuses writes as a replica.
fn master_may_have_changed(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))
}
