//! Test support: a real Redis Cluster (three masters, three replicas) of
//! redis-server processes on free loopback ports, made into a cluster with
//! `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`
//! (`valkey-cli` for Valkey), each under the wrapper of
//! `redis_server.rs` (killed and removed when the tests end).
#![allow(dead_code)]

use std::ffi::OsString;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::redis_server::{RedisServer, Spec, cli_bin, conn};

/// A running cluster.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

/// One node of `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// The id of its master, for a replica.
    pub master_id: Option<String>,
}

impl RedisCluster {
    /// Starts six servers and makes them a cluster of three masters with a
    /// replica each; returns once every node says `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                std::thread::spawn(|| {
                    let bus = super::free_port();
                    RedisServer::start_spec(&Spec {
                        extra: [
                            "--cluster-enabled",
                            "yes",
                            "--cluster-node-timeout",
                            "1000",
                            // A replica takes over however long ago it
                            // last heard from its master (without it, the
                            // replicas here never started a failover).
                            "--cluster-replica-validity-factor",
                            "0",
                            "--cluster-port",
                            &bus.to_string(),
                        ]
                        .iter()
                        .map(OsString::from)
                        .collect(),
                        ..Spec::default()
                    })
                })
            })
            .collect();
        let nodes: Vec<RedisServer> = handles
            .into_iter()
            .map(|h| h.join().expect("start cluster node"))
            .collect();
        let mut cmd = Command::new(cli_bin());
        cmd.arg("--cluster").arg("create");
        for n in &nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = cmd
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        super::redis_server::block_on(async {
            for n in &cluster.nodes {
                wait_for(&n.url, &["CLUSTER", "INFO"], |info| {
                    info.contains("cluster_state:ok")
                })
                .await;
            }
            // `cluster_state:ok` comes before every node has heard (by
            // gossip) which nodes became replicas: until then a node lists
            // a replica as a master, and a test that picks "another master"
            // from that list sends it commands only masters take.
            for n in &cluster.nodes {
                wait_for(&n.url, &["CLUSTER", "NODES"], |nodes| {
                    let count = |role: &str| {
                        nodes
                            .lines()
                            .filter(|l| {
                                l.split_whitespace()
                                    .nth(2)
                                    .is_some_and(|f| f.contains(role))
                            })
                            .count()
                    };
                    count("master") == 3 && count("slave") == 3
                })
                .await;
            }
            // Grants wait for every replica (`WAIT`): a master streams
            // writes to a replica only from the replica's first
            // acknowledgement after its sync (up to a second after the
            // sync); until then every grant falls short. Ready when a
            // write on each master is acknowledged.
            for n in &cluster.nodes {
                super::redis_server::replicated(&n.url).await;
            }
        });
        cluster
    }

    /// `redis+cluster://` with two of the nodes as seeds.
    pub fn url(&self) -> String {
        format!(
            "redis+cluster://127.0.0.1:{},127.0.0.1:{}",
            self.nodes[0].port, self.nodes[1].port
        )
    }

    /// The server listening on `port`.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
    }

    /// The nodes as the node at `url` sees them.
    pub async fn topology(url: &str) -> Vec<ClusterNode> {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut conn(url).await)
            .await
            .expect("cluster nodes");
        text.lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let port = f.get(1)?.split(['@', ',']).next()?.rsplit_once(':')?.1;
                let flags = f.get(2)?;
                Some(ClusterNode {
                    id: f[0].to_owned(),
                    port: port.parse().ok()?,
                    master: flags.contains("master") && !flags.contains("fail"),
                    master_id: (f.get(3) != Some(&"-")).then(|| f[3].to_owned()),
                })
            })
            .collect()
    }

    /// The URLs of the masters that serve slots now.
    pub async fn master_urls(&self) -> Vec<String> {
        let live = self.live_url();
        Self::topology(&live)
            .await
            .into_iter()
            .filter(|n| n.master)
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }

    /// The URL of a node that is up.
    fn live_url(&self) -> String {
        self.nodes
            .iter()
            .find(|n| std::net::TcpStream::connect(("127.0.0.1", n.port)).is_ok())
            .map(|n| n.url.clone())
            .expect("a live node")
    }

    /// The slot of `key`.
    pub async fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut conn(&self.live_url()).await)
            .await
            .expect("keyslot")
    }

    /// The master that serves `slot` now, as the node at a live URL sees it.
    pub async fn owner(&self, slot: u16) -> ClusterNode {
        let live = self.live_url();
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn(&live).await)
            .await
            .expect("cluster slots");
        let port = slots
            .iter()
            .find_map(|range| {
                let parts: Vec<redis::Value> = redis::from_redis_value_ref(range).ok()?;
                let from: u16 = redis::from_redis_value_ref(parts.first()?).ok()?;
                let to: u16 = redis::from_redis_value_ref(parts.get(1)?).ok()?;
                let master: Vec<redis::Value> = redis::from_redis_value_ref(parts.get(2)?).ok()?;
                let port: u16 = redis::from_redis_value_ref(master.get(1)?).ok()?;
                (from..=to).contains(&slot).then_some(port)
            })
            .expect("an owner of the slot");
        Self::topology(&live)
            .await
            .into_iter()
            .find(|n| n.port == port)
            .expect("the owner in CLUSTER NODES")
    }
}

/// One cluster per test binary, started on first use.
pub fn shared() -> &'static RedisCluster {
    static SHARED: OnceLock<RedisCluster> = OnceLock::new();
    SHARED.get_or_init(RedisCluster::start)
}

/// Waits until the answer to `command` (`CLUSTER INFO`, `INFO replication`)
/// of the node at `url` satisfies `done` (re-reading it every 20 ms: a
/// cluster's state changes announce themselves by no event a client can
/// subscribe to). Guards against a hang only.
pub async fn wait_for(url: &str, command: &[&str], done: impl Fn(String) -> bool) {
    let wait = async {
        loop {
            if let Ok(mut c) = super::redis_server::client_for(url)
                .get_multiplexed_async_connection()
                .await
                && let Ok(info) = redis::cmd(command[0])
                    .arg(&command[1..])
                    .query_async::<String>(&mut c)
                    .await
                && done(info)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), wait)
        .await
        .unwrap_or_else(|_| {
            let nodes = std::process::Command::new(cli_bin())
                .args(["-u", url, "cluster", "nodes"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            panic!("the cluster node at {url} never reached the state; it sees:\n{nodes}")
        });
}
