//! The Redis masters: one connection and one wake-up hub per node,
//! requests bounded by a timeout, and the same script run on every node at
//! once. A cluster, or a master behind sentinels, is one node (see
//! `link.rs`).
//!
//! A call that grants or extends ([`Reach::Replicas`]) counts only once the
//! replicas acknowledged it (`WAIT` in the same pipeline, `replicas.rs`
//! says how many); an answer sent before the sentinels announced a
//! failover and received after does not count either (`sentinel.rs`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::{Cmd, FromRedisValue, Script, ScriptInvocation};
use tokio::sync::Semaphore;

use crate::redis::config::redis_config::RedisConfig;
use crate::redis::config::topology::{Deployment, Topology};
use crate::redis::config::url::{redact, with_port};
use crate::redis::connect::connect_error;
use crate::redis::connect::failed_op::FailedOp;
use crate::redis::connect::lanes::Lanes;
use crate::redis::connect::link::{Link, Subscribe};
use crate::redis::connect::node_error::{Failure, NodeError};
use crate::redis::connect::replicas::Replicas;
use crate::redis::connect::wake::Hub;
use crate::redis::protocol::keys::{Layout, wake_prefix};
use crate::redis::protocol::line_lua::{self, ENTER_SCRIPT};
use crate::redis::protocol::lock_lua::{self, ACQUIRE_SCRIPT, RELEASE_SCRIPT};
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
    /// The replicas a grant or extend must reach.
    replicas: Arc<Replicas>,
    /// The requests on their way to this node ([`IN_FLIGHT`]), one
    /// admission queue per [`Admission`].
    in_flight: Semaphore,
    holders_in_flight: Semaphore,
}

/// How many requests this process keeps on its way to one node; more wait
/// their turn before their timeout starts. The per-node timeout says the
/// node did not answer, so it must not count the time a request queues
/// behind this process's own: 10,000 `lock` calls at once from one
/// process took more than 250 ms to reach Redis, and the last ones failed
/// (`bench --curve queue 10000 --redis-only`; with the admission all were
/// served, see `docs/performance.md`). Redis runs one script at a
/// time, so a few dozen keep it busy; an admitted request waits behind at
/// most this many (about 4 ms at 30 us a script).
const IN_FLIGHT: usize = 128;

/// Which admission queue a request joins ([`IN_FLIGHT`] each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// A holder's request: an extend, a release, a leader's refresh. It
    /// waits behind other holders' requests only: 10,000 `lock` calls at
    /// once from one process on a loaded machine kept the holder's extend
    /// queued past its TTL, and it lost the lock (`tests/redis.rs`).
    Holder,
    /// Every other request (takes, waiters' rounds, reads), in turn.
    InTurn,
}

/// Where a call's writes must be before its answer counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// On the replicas too: a grant, an extend, a leader's record. Such an
    /// answer moves a holder's deadline, which a failover must not undo.
    Replicas,
    /// On the master: a release, a waiter leaving, a read. A failover
    /// that loses one delays the next holder at most (the key expires).
    Master,
}

/// One script call: the same keys on every node, arguments per node.
pub(crate) struct Call<'a> {
    pub script: &'a Script,
    pub keys: &'a [&'a str],
    pub args: Vec<String>,
    pub reach: Reach,
    pub admission: Admission,
}

/// The `EVALSHA` of `script` with `keys` and `args`, for a pipeline.
fn evalsha<A: AsRef<[u8]>>(script: &Script, keys: &[&str], args: &[A]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len()).arg(keys);
    for arg in args {
        cmd.arg(arg.as_ref());
    }
    cmd
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
        self.invoke(
            call.script,
            call.keys,
            &call.args,
            (call.reach, call.admission),
        )
        .await
    }

    /// Runs `script` with arguments that need not be text (an election's
    /// value), within the per-node timeout.
    pub async fn run_bytes<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&[u8]],
        (reach, admission): (Reach, Admission),
    ) -> Result<T, NodeError> {
        self.invoke(script, keys, args, (reach, admission)).await
    }

    /// Runs a script call of `keys` within the per-node timeout, and
    /// where it must reach the replicas, waits for them within as long
    /// again.
    async fn invoke<T: FromRedisValue, A: AsRef<[u8]>>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[A],
        (reach, admission): (Reach, Admission),
    ) -> Result<T, NodeError> {
        let invocation = invocation(script, keys, args);
        let needed = match reach {
            Reach::Replicas => self
                .replicas
                .needed(keys.first().copied().unwrap_or_default()),
            Reach::Master => 0,
        };
        let result = if needed == 0 {
            self.request(self.timeout, admission, self.link.invoke(&invocation))
                .await
        } else {
            // The script within the per-node timeout, then the replicas'
            // acknowledgement within as long again.
            let within = self.timeout;
            let sent =
                self.link
                    .invoke_acked(&invocation, evalsha(script, keys, args), needed, within);
            match self.request(self.timeout + within, admission, sent).await {
                Ok((answer, acked)) if acked >= needed => Ok(answer),
                Ok((_, acked)) => {
                    self.replicas.fell_short();
                    let failure = Failure::NotReplicated {
                        acked,
                        needed,
                        within,
                    };
                    Err(NodeError::new(&self.name, failure))
                }
                Err(e) => Err(e),
            }
        };
        result.map_err(|e| e.name_key(keys))
    }

    /// A plain command (for `status`), within the per-node timeout; on a
    /// cluster to the node at `at`, or where its keys route.
    pub async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        at: Option<(&str, u16)>,
    ) -> Result<T, NodeError> {
        self.request(self.timeout, Admission::InTurn, self.link.query(cmd, at))
            .await
    }

    /// Whether this node is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// Sends `PING`, within `timeout`.
    async fn ping(&self, timeout: Duration) -> Result<(), NodeError> {
        let cmd = redis::cmd("PING");
        self.request(
            timeout,
            Admission::InTurn,
            self.link.query::<String>(&cmd, None),
        )
        .await
        .map(drop)
    }

    /// The one request helper: `request` (not yet sent: it is a future)
    /// admitted among the [`IN_FLIGHT`] ones of its `admission` queue,
    /// then bounded by `timeout`,
    /// its error classified and named by this node; an answer that arrived
    /// after the sentinels announced a failover is a failure.
    async fn request<T>(
        &self,
        timeout: Duration,
        admission: Admission,
        request: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, NodeError> {
        let queue = match admission {
            Admission::Holder => &self.holders_in_flight,
            Admission::InTurn => &self.in_flight,
        };
        // Never closed, so never an error; a request is admitted anyway.
        let _admitted = queue.acquire().await.ok();
        let generation = self.link.generation();
        let failure = match tokio::time::timeout(timeout, request).await {
            Ok(Ok(value)) if self.link.generation() == generation => return Ok(value),
            Ok(Ok(_)) => Failure::MasterChanged,
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
        let acks = config.replica_acks();
        let node = |name: String, (link, subscribe): (Link, Subscribe)| Node {
            replicas: match &link {
                Link::Direct(_) => Replicas::master(acks),
                Link::Cluster(_) => Replicas::cluster(acks, &link),
                Link::Sentinel(primary) => {
                    primary.follow();
                    Replicas::sentinel(acks, primary)
                }
            },
            name,
            link,
            timeout: config.node_timeout(),
            hub: Hub::start(subscribe.clone(), &wake),
            subscribe,
            in_flight: Semaphore::new(IN_FLIGHT),
            holders_in_flight: Semaphore::new(IN_FLIGHT),
        };
        let mut list = Vec::new();
        match &topology.deployment {
            Deployment::Cluster => {
                let name = deployment_name(&topology);
                let (client, subscribe) = Link::cluster(config, &topology.urls)?;
                let lane = async || match tokio::time::timeout(
                    config.connect_timeout(),
                    client.get_async_connection(),
                )
                .await
                {
                    Ok(Ok(conn)) => Ok(conn),
                    Ok(Err(e)) => {
                        let error = NodeError::new(&name, Failure::classify(e));
                        Err(connect_error::failed(config, error))
                    }
                    Err(_) => {
                        let timeout = Failure::NoAnswer(config.connect_timeout());
                        Err(connect_error::failed(
                            config,
                            NodeError::new(&name, timeout),
                        ))
                    }
                };
                let lanes = Lanes {
                    plain: lane().await?,
                    acked: lane().await?,
                };
                list.push(node(name, (Link::Cluster(lanes), subscribe)));
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
        connect_error::check(config, nodes.list.len(), nodes.quorum, errors)?;
        // The lock path's scripts, so that a first lock does not spend its
        // per-node timeout on NOSCRIPT and a load (on a cluster, on every
        // node); a node that lacks them later still gets them on NOSCRIPT.
        for node in &nodes.list {
            let scripts = [
                &*ACQUIRE_SCRIPT,
                &*RELEASE_SCRIPT,
                &*lock_lua::LEAVE_SCRIPT,
                &*lock_lua::EXTEND_SCRIPT,
                &*ENTER_SCRIPT,
                &*line_lua::LEAVE_SCRIPT,
                &*line_lua::EXTEND_SCRIPT,
            ];
            let load = node.link.preload(&scripts);
            let _ = tokio::time::timeout(config.connect_timeout(), load).await;
        }
        // A cluster's or sentinels' listing of the replicas, before the
        // first grant counts on it.
        if let [node] = &nodes.list[..] {
            let read = tokio::time::timeout(config.connect_timeout(), node.replicas.read());
            let failure = match read.await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(Failure::classify(e)),
                Err(_) => Some(Failure::NoAnswer(config.connect_timeout())),
            };
            if let Some(failure) = failure {
                return Err(connect_error::failed(
                    config,
                    NodeError::new(&node.name, failure),
                ));
            }
        }
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

    /// `true` behind sentinels or on a cluster: a master may fail over.
    pub fn fails_over(&self) -> bool {
        matches!(&self.list[..], [node] if !matches!(node.link, Link::Direct(_)))
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
