//! The master behind Redis Sentinel: found through the sentinels (the
//! `redis` crate's `sentinel` feature asks them, and checks with `ROLE`
//! that the node they name is a master), and found again after a failover.
//!
//! What is written here by hand, and why: the crate finds a master once
//! and has no connection that follows a failover. [`Primary`] keeps one
//! connection to the master it found and forgets it when a request shows
//! that the master is gone or no longer a master (the connection dropped
//! or was refused, `READONLY` from a demoted master, no answer within the
//! per-node timeout); the next request asks the sentinels again. A request
//! that fails that way is not retried here: the locker's callers retry
//! (the watchdog until its deadline, so a lock held across a failover is
//! either extended on the new master, which then has it, or reported
//! lost).

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, TlsMode};

use super::config::RedisConfig;
use super::secure::{certificates, connection_info, invalid};
use crate::Result;

/// The master the sentinels name, and the connection to it.
pub(crate) struct Primary {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<MultiplexedConnection>>,
    connect_timeout: Duration,
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
            connect_timeout: config.connect_timeout(),
        })
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<MultiplexedConnection>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client of the master the sentinels name now (checked with `ROLE`).
    pub async fn master(&self) -> redis::RedisResult<redis::Client> {
        self.sentinels.lock().await.async_get_client().await
    }

    /// The connection to the master, found through the sentinels when
    /// there is none.
    pub async fn connection(&self) -> redis::RedisResult<MultiplexedConnection> {
        if let Some(conn) = self.current().clone() {
            return Ok(conn);
        }
        let mut sentinels = self.sentinels.lock().await;
        // Another request may have found it while this one waited.
        if let Some(conn) = self.current().clone() {
            return Ok(conn);
        }
        let client = sentinels.async_get_client().await?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        *self.current() = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the connection after `error` when it shows that the master
    /// may have changed (or `None`: no answer in time).
    pub fn after_failure(&self, error: Option<&redis::RedisError>) {
        if error.is_none_or(master_may_have_changed) {
            *self.current() = None;
        }
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
