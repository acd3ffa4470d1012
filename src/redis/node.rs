//! The Redis masters: one reconnecting connection and one wake-up hub per
//! node, requests bounded by a timeout, and the same script run on every
//! node at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script};

use super::config::RedisConfig;
use super::connect;
use super::error::{FailedOp, Failure, NodeError};
use super::secure;
use super::url::{redact, with_port};
use super::wake::Hub;
use super::wire::wake_prefix;
use crate::{Error, Result};

/// One Redis master.
pub(crate) struct Node {
    /// The URL without its password, with its port, for messages.
    pub name: String,
    conn: ConnectionManager,
    timeout: Duration,
    pub hub: Hub,
}

/// One script call: the same keys on every node, arguments per node.
pub(crate) struct Call<'a> {
    pub script: &'a Script,
    pub keys: &'a [&'a str],
    pub args: Vec<String>,
}

impl Node {
    /// Runs `call` on this node within the per-node timeout.
    pub async fn run<T: FromRedisValue>(&self, call: Call<'_>) -> Result<T, NodeError> {
        let mut invocation = call.script.prepare_invoke();
        for key in call.keys {
            invocation.key(*key);
        }
        for arg in &call.args {
            invocation.arg(arg);
        }
        let mut conn = self.conn.clone();
        self.request(self.timeout, invocation.invoke_async(&mut conn))
            .await
            .map_err(|e| e.name_key(call.keys))
    }

    /// A plain command (for `status`), within the per-node timeout.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, NodeError> {
        let mut conn = self.conn.clone();
        self.request(self.timeout, cmd.query_async(&mut conn)).await
    }

    /// Sends `PING`, within `timeout`.
    async fn ping(&self, timeout: Duration) -> Result<(), NodeError> {
        let mut conn = self.conn.clone();
        let cmd = redis::cmd("PING");
        self.request(timeout, cmd.query_async::<String>(&mut conn))
            .await
            .map(drop)
    }

    /// The one request helper: `request` bounded by `timeout`, its error
    /// classified and named by this node.
    async fn request<T>(
        &self,
        timeout: Duration,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, NodeError> {
        let failure = match tokio::time::timeout(timeout, request).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(error)) => Failure::classify(error),
            Err(_) => Failure::NoAnswer(timeout),
        };
        Err(NodeError::new(&self.name, failure))
    }
}

/// All the masters of one configuration, shared by every locker made from
/// it (one connection and one wake-up hub per node, not per locker).
pub(crate) struct Nodes {
    pub list: Vec<Node>,
    pub quorum: usize,
}

impl Nodes {
    /// Opens a connection to every node and checks that a quorum answers
    /// `PING` within the connect timeout. Nodes that do not answer yet are
    /// kept: their connections retry in the background.
    pub async fn connect(config: &RedisConfig) -> Result<Arc<Nodes>> {
        config.validate()?;
        let mut list = Vec::new();
        for url in config.urls() {
            let name = redact(&with_port(url));
            let client = secure::client(config, url)?;
            let manager = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(config.connect_timeout()))
                .set_response_timeout(None)
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_millis(500));
            let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager)
                .map_err(|e| connect::unreachable(config, name.clone(), Box::new(e)))?;
            let hub = Hub::start(client, &wake_prefix(config.prefix()));
            list.push(Node {
                name,
                conn,
                timeout: config.node_timeout(),
                hub,
            });
        }
        let nodes = Nodes {
            quorum: config.quorum(),
            list,
        };
        let pings = join_all(nodes.list.iter().map(|n| n.ping(config.connect_timeout()))).await;
        let errors: Vec<NodeError> = pings.into_iter().filter_map(Result::err).collect();
        connect::check(config, errors)?;
        Ok(Arc::new(nodes))
    }

    /// Runs `call(index, node)` on every node at once; results in node
    /// order.
    pub async fn all<'a, T, F>(&'a self, call: F) -> Vec<Result<T, NodeError>>
    where
        T: FromRedisValue,
        F: Fn(usize, &'a Node) -> Call<'a>,
    {
        join_all(
            self.list
                .iter()
                .enumerate()
                .map(|(i, node)| node.run(call(i, node))),
        )
        .await
    }

    /// Runs `call` on the nodes at `indexes` at once; results in that order.
    pub async fn some<'c, T: FromRedisValue>(
        &self,
        indexes: &[usize],
        call: impl Fn() -> Call<'c>,
    ) -> Vec<Result<T, NodeError>> {
        join_all(indexes.iter().map(|i| self.list[*i].run(call()))).await
    }

    /// `true` for Redlock (more than one node).
    pub fn is_redlock(&self) -> bool {
        self.list.len() > 1
    }

    /// The error for a request that too few nodes answered: the node's own
    /// error on a single instance, a quorum error on Redlock.
    pub fn unavailable(&self, op: &'static str, errors: Vec<NodeError>) -> Error {
        Error::from(FailedOp {
            op,
            total: self.list.len(),
            quorum: self.quorum,
            errors,
        })
    }
}
