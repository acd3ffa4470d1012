//! The connection a node's requests go over, by deployment: a reconnecting
//! connection to one master, the `redis` crate's cluster connection (which
//! routes each script to its slot's master and follows `MOVED` and `ASK`),
//! or the master the sentinels name (`sentinel.rs`); and where the wake-up
//! subscriber of each connects.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, FromRedisValue, ScriptInvocation};

use super::config::RedisConfig;
use super::secure::{certificates, client, connection_info, invalid};
use super::sentinel::Primary;
use crate::Result;

/// Requests to one node, by deployment.
#[derive(Clone)]
pub(crate) enum Link {
    /// One master (a single instance, or one of Redlock's).
    Direct(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
    /// The master behind sentinels.
    Sentinel(Arc<Primary>),
}

/// Where a node's wake-up subscriber connects.
#[derive(Clone)]
pub(crate) enum Subscribe {
    /// One of these clients, the next one after a failure (a cluster
    /// delivers a `PUBLISH` on any node to subscribers on every node).
    Rotate(Vec<redis::Client>),
    /// The master the sentinels name at the time.
    Sentinel(Arc<Primary>),
}

impl Subscribe {
    /// The client to subscribe with on attempt `n`.
    pub async fn client(&self, n: usize) -> redis::RedisResult<redis::Client> {
        match self {
            Subscribe::Rotate(clients) => Ok(clients[n % clients.len()].clone()),
            Subscribe::Sentinel(primary) => primary.master().await,
        }
    }
}

impl Link {
    /// A reconnecting connection to the master at `url`, and its
    /// subscriber's client.
    pub fn direct(config: &RedisConfig, url: &str) -> Result<(Link, Subscribe)> {
        let client = client(config, url)?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout()))
            .set_response_timeout(None)
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager)
            .map_err(|e| invalid(url, &e))?;
        Ok((Link::Direct(conn), Subscribe::Rotate(vec![client])))
    }

    /// A client of the cluster whose seed nodes are at `urls` (connect
    /// with `get_async_connection`, which reads the slot map from a seed),
    /// and its subscriber's clients.
    pub fn cluster(
        config: &RedisConfig,
        urls: &[String],
    ) -> Result<(redis::cluster::ClusterClient, Subscribe)> {
        let mut infos = Vec::new();
        let mut subscribers = Vec::new();
        for url in urls {
            infos.push(connection_info(url, config.credentials())?);
            subscribers.push(client(config, url)?);
        }
        let mut builder = ClusterClientBuilder::new(infos)
            .connection_timeout(config.connect_timeout())
            .response_timeout(config.connect_timeout())
            .retries(6)
            .min_retry_wait(10)
            .max_retry_wait(200);
        if let Some(certs) = certificates(config, &urls[0])? {
            builder = builder.certs(certs);
        }
        let client = builder.build().map_err(|e| invalid(&urls[0], &e))?;
        Ok((client, Subscribe::Rotate(subscribers)))
    }

    /// The master that the sentinels at `urls` monitor as `master`.
    pub fn sentinel(
        config: &RedisConfig,
        urls: &[String],
        master: &str,
    ) -> Result<(Link, Subscribe)> {
        let primary = Arc::new(Primary::new(config, urls, master)?);
        Ok((
            Link::Sentinel(Arc::clone(&primary)),
            Subscribe::Sentinel(primary),
        ))
    }

    /// Runs a script.
    pub async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
    ) -> redis::RedisResult<T> {
        match self {
            Link::Direct(conn) => invocation.invoke_async(&mut conn.clone()).await,
            Link::Cluster(conn) => invocation.invoke_async(&mut conn.clone()).await,
            Link::Sentinel(primary) => {
                let mut conn = primary.connection().await?;
                let result = invocation.invoke_async(&mut conn).await;
                if let Err(e) = &result {
                    primary.after_failure(Some(e));
                }
                result
            }
        }
    }

    /// Sends a command (on a cluster: to the node at `at`, or where its
    /// keys route).
    pub async fn query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        at: Option<(&str, u16)>,
    ) -> redis::RedisResult<T> {
        match self {
            Link::Direct(conn) => cmd.query_async(&mut conn.clone()).await,
            Link::Cluster(conn) => match at {
                Some((host, port)) => {
                    let route = SingleNodeRoutingInfo::ByAddress {
                        host: host.to_owned(),
                        port,
                    };
                    let value = conn
                        .clone()
                        .route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                        .await?;
                    Ok(redis::from_redis_value(value)?)
                }
                None => cmd.query_async(&mut conn.clone()).await,
            },
            Link::Sentinel(primary) => {
                let mut conn = primary.connection().await?;
                let result = cmd.query_async(&mut conn).await;
                if let Err(e) = &result {
                    primary.after_failure(Some(e));
                }
                result
            }
        }
    }

    /// A request got no answer in time.
    pub fn no_answer(&self) {
        if let Link::Sentinel(primary) = self {
            primary.after_failure(None);
        }
    }
}
