//! The Redis masters: one connection and one wake-up hub per node,
//! requests bounded by a timeout, and the same script run on every node at
//! once. A cluster, or a master behind sentinels, is one node (see
//! `link.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::{FromRedisValue, Script, ScriptInvocation};

use super::config::RedisConfig;
use super::connect;
use super::error::{FailedOp, Failure, NodeError};
use super::link::{Link, Subscribe};
use super::topology::{Deployment, Topology};
use super::url::{redact, with_port};
use super::wake::Hub;
use super::wire::{Layout, wake_prefix};
use crate::{Error, Result};

/// One Redis master (or a whole cluster, or the master behind sentinels).
pub(crate) struct Node {
    /// The URL without its password, with its port, for messages.
    pub name: String,
    link: Link,
    timeout: Duration,
    pub hub: Hub,
    /// Where a subscriber of this node connects (election observers open
    /// their own).
    pub subscribe: Subscribe,
}

/// One script call: the same keys on every node, arguments per node.
pub(crate) struct Call<'a> {
    pub script: &'a Script,
    pub keys: &'a [&'a str],
    pub args: Vec<String>,
}

/// The call of `script` with `keys` and `args` (sent as `EVALSHA`, and
/// loaded first if the server does not have it).
pub(crate) fn invocation<'s, A: AsRef<[u8]>>(
    script: &'s Script,
    keys: &[&str],
    args: &[A],
) -> ScriptInvocation<'s> {
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(*key);
    }
    for arg in args {
        invocation.arg(arg.as_ref());
    }
    invocation
}

impl Node {
    /// Runs `call` on this node within the per-node timeout.
    pub async fn run<T: FromRedisValue>(&self, call: Call<'_>) -> Result<T, NodeError> {
        let invocation = invocation(call.script, call.keys, &call.args);
        self.invoke(&invocation, call.keys).await
    }

    /// Runs `script` with arguments that need not be text (an election's
    /// value), within the per-node timeout.
    pub async fn run_bytes<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T, NodeError> {
        self.invoke(&invocation(script, keys, args), keys).await
    }

    /// Runs a prepared script call of `keys` within the per-node timeout.
    async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        keys: &[&str],
    ) -> Result<T, NodeError> {
        self.request(self.timeout, self.link.invoke(invocation))
            .await
            .map_err(|e| e.name_key(keys))
    }

    /// A plain command (for `status`), within the per-node timeout; on a
    /// cluster to the node at `at`, or where its keys route.
    pub async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        at: Option<(&str, u16)>,
    ) -> Result<T, NodeError> {
        self.request(self.timeout, self.link.query(cmd, at)).await
    }

    /// Whether this node is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// Sends `PING`, within `timeout`.
    async fn ping(&self, timeout: Duration) -> Result<(), NodeError> {
        let cmd = redis::cmd("PING");
        self.request(timeout, self.link.query::<String>(&cmd, None))
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
            Err(_) => {
                self.link.no_answer();
                Failure::NoAnswer(timeout)
            }
        };
        Err(NodeError::new(&self.name, failure))
    }
}

/// All the masters of one configuration, shared by every locker made from
/// it (one connection and one wake-up hub per node, not per locker).
pub(crate) struct Nodes {
    pub list: Vec<Node>,
    pub quorum: usize,
    /// How lock keys are named here.
    pub layout: Layout,
}

impl Nodes {
    /// Opens a connection to every node and checks that a quorum answers
    /// `PING` within the connect timeout. Nodes that do not answer yet are
    /// kept: their connections retry in the background.
    pub async fn connect(config: &RedisConfig) -> Result<Arc<Nodes>> {
        config.validate()?;
        let topology = config.topology()?;
        let wake = wake_prefix(config.prefix());
        let node = |name: String, (link, subscribe): (Link, Subscribe)| Node {
            name,
            link,
            timeout: config.node_timeout(),
            hub: Hub::start(subscribe.clone(), &wake),
            subscribe,
        };
        let mut list = Vec::new();
        match &topology.deployment {
            Deployment::Cluster => {
                let name = deployment_name(&topology);
                let (client, subscribe) = Link::cluster(config, &topology.urls)?;
                let conn = match tokio::time::timeout(
                    config.connect_timeout(),
                    client.get_async_connection(),
                )
                .await
                {
                    Ok(Ok(conn)) => conn,
                    Ok(Err(e)) => {
                        let error = NodeError::new(&name, Failure::classify(e));
                        return Err(connect::failed(config, error));
                    }
                    Err(_) => {
                        let timeout = Failure::NoAnswer(config.connect_timeout());
                        return Err(connect::failed(config, NodeError::new(&name, timeout)));
                    }
                };
                list.push(node(name, (Link::Cluster(conn), subscribe)));
            }
            Deployment::Sentinel { master } => {
                let name = deployment_name(&topology);
                list.push(node(name, Link::sentinel(config, &topology.urls, master)?));
            }
            Deployment::Masters => {
                for url in &topology.urls {
                    list.push(node(redact(&with_port(url)), Link::direct(config, url)?));
                }
            }
        }
        let nodes = Nodes {
            quorum: config.quorum(),
            layout: Layout::of(&topology.deployment),
            list,
        };
        let pings = join_all(nodes.list.iter().map(|n| n.ping(config.connect_timeout()))).await;
        let errors: Vec<NodeError> = pings.into_iter().filter_map(Result::err).collect();
        connect::check(config, nodes.list.len(), nodes.quorum, errors)?;
        Ok(Arc::new(nodes))
    }

    /// Runs `call(index, node)` on every node at once; results in node
    /// order.
    pub async fn all<'a, T, F>(&'a self, call: F) -> Vec<Result<T, NodeError>>
    where
        T: FromRedisValue,
        F: Fn(usize, &'a Node) -> Call<'a>,
    {
        // One node (a server, a cluster, sentinels): no join.
        if let [node] = &self.list[..] {
            return vec![node.run(call(0, node)).await];
        }
        join_all(
            self.list
                .iter()
                .enumerate()
                .map(|(i, node)| node.run(call(i, node))),
        )
        .await
    }

    /// Runs `call(index)` on the nodes at `indexes` at once; results in that
    /// order.
    pub async fn some<'c, T: FromRedisValue>(
        &self,
        indexes: &[usize],
        call: impl Fn(usize) -> Call<'c>,
    ) -> Vec<Result<T, NodeError>> {
        if let [i] = indexes {
            return vec![self.list[*i].run(call(*i)).await];
        }
        join_all(indexes.iter().map(|i| self.list[*i].run(call(*i)))).await
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

/// A cluster's or sentinels' name for messages, without passwords:
/// `redis+cluster://h1:7000,h2:7001` or
/// `redis+sentinel://s1:26379,s2:26379/mymaster`.
fn deployment_name(topology: &Topology) -> String {
    let (scheme, rest) = topology.urls[0].split_once("://").unwrap_or(("redis", ""));
    let user = rest.rsplit_once('@').map(|(user, _)| user);
    let hosts: Vec<&str> = topology
        .urls
        .iter()
        .map(|u| {
            u.rsplit_once('@').map_or(
                u.split_once("://").map_or(u.as_str(), |(_, h)| h),
                |(_, h)| h,
            )
        })
        .collect();
    let path = match &topology.deployment {
        Deployment::Sentinel { master } => format!("/{master}"),
        _ => String::new(),
    };
    let name = match user {
        Some(user) => format!(
            "{scheme}+{}://{user}@{}{path}",
            topology.deployment.name(),
            hosts.join(",")
        ),
        None => format!(
            "{scheme}+{}://{}{path}",
            topology.deployment.name(),
            hosts.join(",")
        ),
    };
    redact(&name)
}
