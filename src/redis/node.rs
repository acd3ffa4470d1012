//! The Redis masters: one reconnecting connection and one wake-up hub per
//! node, requests bounded by the per-node timeout, and the same script run
//! on every node at once.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script};

use super::config::{RedisConfig, redact};
use super::keys::wake_prefix;
use super::secure::{self, NodeError};
use super::wake::Hub;
use crate::{BoxError, Error, Result};

/// One Redis master.
pub(crate) struct Node {
    /// The URL without its password, for messages.
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
    pub async fn run<T: FromRedisValue>(&self, call: Call<'_>) -> Result<T, BoxError> {
        let mut invocation = call.script.prepare_invoke();
        for key in call.keys {
            invocation.key(*key);
        }
        for arg in &call.args {
            invocation.arg(arg);
        }
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, invocation.invoke_async(&mut conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(Box::new(NodeError {
                node: self.name.clone(),
                error,
            })),
            Err(_) => Err(format!("{}: no answer within {:?}", self.name, self.timeout).into()),
        }
    }

    /// Sends `PING`, within `timeout`.
    async fn ping(&self, timeout: Duration) -> Result<(), BoxError> {
        let mut conn = self.conn.clone();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        match tokio::time::timeout(timeout, ping).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => Err(Box::new(NodeError {
                node: self.name.clone(),
                error,
            })),
            Err(_) => Err(format!("no answer within {timeout:?}").into()),
        }
    }

    /// A plain command (for `status`), within the per-node timeout.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, BoxError> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, cmd.query_async(&mut conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(Box::new(NodeError {
                node: self.name.clone(),
                error,
            })),
            Err(_) => Err(format!("{}: no answer within {:?}", self.name, self.timeout).into()),
        }
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
        let fail = |endpoints: String, source: BoxError| Error::Connect {
            backend: "redis",
            endpoints,
            timeout: config.connect_timeout(),
            source,
        };
        let mut list = Vec::new();
        for url in config.urls() {
            let name = redact(url);
            let client = secure::client(config, url)?;
            let manager = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(config.connect_timeout()))
                .set_response_timeout(None)
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_millis(500));
            let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager)
                .map_err(|e| fail(name.clone(), Box::new(e)))?;
            let hub = Hub::start(client, &wake_prefix(config.prefix()), &name);
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
        let mut failed: Vec<(String, BoxError)> = nodes
            .list
            .iter()
            .zip(pings)
            .filter_map(|(n, r)| r.err().map(|e| (n.name.clone(), e)))
            .collect();
        // Wrong TLS settings or credentials fail the same way on every
        // retry: report them even when a quorum answered.
        if let Some((name, e)) = failed
            .iter()
            .find(|(_, e)| secure::tls_failure(config, e).is_some())
        {
            let reason = secure::tls_failure(config, e).unwrap_or_default();
            let at = failed.iter().position(|(n, _)| n == name).unwrap_or(0);
            let (endpoints, source) = failed.swap_remove(at);
            return Err(Error::Tls {
                backend: "redis",
                endpoints,
                reason,
                source,
            });
        }
        let mut errors: Vec<BoxError> = Vec::new();
        let mut names = Vec::new();
        for (name, e) in failed {
            names.push(name);
            errors.push(e);
        }
        if let Some(refusal) = secure::refused("connect", &mut errors) {
            return Err(refusal);
        }
        if nodes.list.len() - errors.len() < nodes.quorum {
            let why = names
                .iter()
                .zip(&errors)
                .map(|(n, e)| match e.downcast_ref::<NodeError>() {
                    Some(_) => e.to_string(),
                    None => format!("{n}: {e}"),
                })
                .collect::<Vec<_>>()
                .join("; ");
            let source: BoxError = if nodes.list.len() > 1 {
                format!(
                    "{} of {} nodes answered, {} needed ({why})",
                    nodes.list.len() - errors.len(),
                    nodes.list.len(),
                    nodes.quorum
                )
                .into()
            } else {
                why.into()
            };
            return Err(fail(names.join(","), source));
        }
        Ok(Arc::new(nodes))
    }

    /// Runs `call(index, node)` on every node at once; results in node
    /// order.
    pub async fn all<'a, T, F>(&'a self, call: F) -> Vec<Result<T, BoxError>>
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

    /// `true` for Redlock (more than one node).
    pub fn is_redlock(&self) -> bool {
        self.list.len() > 1
    }

    /// The error for a request that too few nodes answered: the node's own
    /// error on a single instance, a quorum error on Redlock.
    pub fn unavailable(&self, op: &'static str, mut errors: Vec<BoxError>) -> Error {
        if let Some(refusal) = secure::refused(op, &mut errors) {
            return refusal;
        }
        let answered = self.list.len() - errors.len();
        let mut errors = errors.into_iter();
        let first = errors.next().unwrap_or_else(|| "no node answered".into());
        if !self.is_redlock() {
            return Error::Backend {
                backend: "redis",
                op,
                source: first,
            };
        }
        let rest: Vec<String> = errors.map(|e| e.to_string()).collect();
        let source = if rest.is_empty() {
            first
        } else {
            format!("{first}; {}", rest.join("; ")).into()
        };
        Error::Unavailable {
            backend: "redis",
            op,
            answered,
            needed: self.quorum,
            total: self.list.len(),
            source,
        }
    }
}
