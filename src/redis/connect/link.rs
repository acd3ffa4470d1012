//! The connection a node's requests go over, by deployment: a reconnecting
//! connection to one master, the `redis` crate's cluster connection (which
//! routes each script to its slot's master and follows `MOVED` and `ASK`),
//! or the master the sentinels name (`sentinel.rs`); and where the wake-up
//! subscriber of each connects.
//! Each node has two connections, its lanes (`lanes.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{
    Cmd, ErrorKind, FromRedisValue, Pipeline, Script, ScriptInvocation, ServerErrorKind, Value,
};

use crate::Result;
use crate::redis::config::redis_config::RedisConfig;
use crate::redis::connect::lanes::{Lane, Lanes};
use crate::redis::connect::secure::{certificates, client, connection_info, invalid};
use crate::redis::connect::sentinel::Primary;

/// Requests to one node, by deployment.
#[derive(Clone)]
pub(crate) enum Link {
    /// One master (a single instance, or one of Redlock's).
    Direct(Lanes<ConnectionManager>),
    /// A Redis Cluster.
    Cluster(Lanes<ClusterConnection>),
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
        let lane = || {
            ConnectionManager::new_lazy_with_config(client.clone(), manager.clone())
                .map_err(|e| invalid(url, &e))
        };
        let lanes = Lanes {
            plain: lane()?,
            acked: lane()?,
        };
        Ok((Link::Direct(lanes), Subscribe::Rotate(vec![client])))
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
            Link::Direct(l) => invocation.invoke_async(&mut l.plain.clone()).await,
            Link::Cluster(l) => invocation.invoke_async(&mut l.plain.clone()).await,
            Link::Sentinel(primary) => {
                primary
                    .run(Lane::Plain, |mut conn| async move {
                        invocation.invoke_async(&mut conn).await
                    })
                    .await
            }
        }
    }

    /// Runs a script, then `WAIT needed within` on the same connection (one
    /// pipeline: on a cluster both go to the master of the script's keys);
    /// returns the script's answer and how many replicas acknowledged it.
    /// A server that lacks the script gets it loaded first, as
    /// `invoke` does.
    pub async fn invoke_acked<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        evalsha: Cmd,
        needed: usize,
        within: Duration,
    ) -> redis::RedisResult<(T, usize)> {
        let mut pipe = redis::pipe();
        pipe.add_command(evalsha)
            .cmd("WAIT")
            .arg(needed)
            .arg(within.as_millis().max(1))
            .ignore_errors();
        let mut replies = self.acked_pipeline(&pipe).await?;
        if matches!(&replies[..], [Value::ServerError(e), _] if e.kind() == Some(ServerErrorKind::NoScript))
        {
            self.load(invocation, Lane::Acked).await?;
            replies = self.acked_pipeline(&pipe).await?;
        }
        let mut replies = replies.into_iter();
        let (Some(answer), Some(acked)) = (replies.next(), replies.next()) else {
            return Err(redis::RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "a script and WAIT got fewer than two replies",
            )));
        };
        let answer = T::from_redis_value(answer.extract_error()?)?;
        let acked = usize::from_redis_value(acked.extract_error()?)?;
        Ok((answer, acked))
    }

    /// Sends a pipeline on the acked lane; its replies, errors included.
    async fn acked_pipeline(&self, pipe: &Pipeline) -> redis::RedisResult<Vec<Value>> {
        match self {
            Link::Direct(l) => pipe.query_async(&mut l.acked.clone()).await,
            Link::Cluster(l) => pipe.query_async(&mut l.acked.clone()).await,
            Link::Sentinel(primary) => {
                primary
                    .run(Lane::Acked, |mut conn| async move {
                        pipe.query_async(&mut conn).await
                    })
                    .await
            }
        }
    }

    /// Loads `scripts` (`SCRIPT LOAD`; on a cluster on every node), until
    /// one fails.
    pub async fn preload(&self, scripts: &[&Script]) -> redis::RedisResult<()> {
        for script in scripts {
            self.load(&script.prepare_invoke(), Lane::Plain).await?;
        }
        Ok(())
    }

    /// Loads `script` (`SCRIPT LOAD`; on a cluster on every node) over
    /// `lane`.
    async fn load(&self, invocation: &ScriptInvocation<'_>, lane: Lane) -> redis::RedisResult<()> {
        match self {
            Link::Direct(l) => invocation.load_async(&mut l.get(lane)).await.map(drop),
            Link::Cluster(l) => invocation.load_async(&mut l.get(lane)).await.map(drop),
            Link::Sentinel(primary) => primary
                .run(lane, |mut conn| async move {
                    invocation.load_async(&mut conn).await
                })
                .await
                .map(drop),
        }
    }

    /// The generation of the connection requests go over: it changes when
    /// the sentinels announce a failover (`sentinel.rs`); 0 elsewhere.
    pub fn generation(&self) -> u64 {
        match self {
            Link::Sentinel(primary) => primary.generation(),
            _ => 0,
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
            Link::Direct(l) => cmd.query_async(&mut l.plain.clone()).await,
            Link::Cluster(l) => match at {
                Some((host, port)) => {
                    let route = SingleNodeRoutingInfo::ByAddress {
                        host: host.to_owned(),
                        port,
                    };
                    let value = l
                        .plain
                        .clone()
                        .route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                        .await?;
                    Ok(redis::from_redis_value(value)?)
                }
                None => cmd.query_async(&mut l.plain.clone()).await,
            },
            Link::Sentinel(primary) => {
                primary
                    .run(Lane::Plain, |mut conn| async move {
                        cmd.query_async(&mut conn).await
                    })
                    .await
            }
        }
    }

    /// A request got no answer in time.
    pub fn no_answer(&self) {
        if let Link::Sentinel(primary) = self {
            primary.after_failure(None, None);
        }
    }
}
