//! The Redis deployments of the fault runs and their faults: one
//! redis-server, a master + replica + three sentinels
//! (`tests/support/redis_sentinel.rs`), a cluster of three masters with a
//! replica each (`tests/support/redis_cluster.rs`), all on loopback, plus
//! a separate redis-server that no fault touches: the resource the
//! workers' fenced counter lives on (a lock service's failover must not
//! be what loses the resource's writes).
//!
//! Every wait here is on a state the servers report (`+switch-master`,
//! `ROLE`/`INFO replication`, `SENTINEL get-master-addr-by-name`,
//! `CLUSTER SLOTS`/`CLUSTER NODES`, a restarted server's "Ready" line),
//! re-read every 20 ms where the server has no event to subscribe to; the
//! deadlines only end a wait that would hang. Every process started here
//! is killed when dropped, also on failure (a stopped one too: SIGKILL
//! ends it), and the supports' own wrappers kill theirs.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::redis_fault::{Deployment, RedisFault};
use crate::support::redis_cluster::RedisCluster;
use crate::support::redis_sentinel::{Auth, MASTER, RedisSentinel};
use crate::support::redis_server::RedisServer;
use crate::{BoxError, mono_ns};

/// How long a fault may take to show (a failover, a restart) before the
/// run gives up on it: a hang guard, not a measured bound.
const HANG: Duration = Duration::from_secs(60);
/// Per-request timeout of the harness' own queries (a stopped server
/// accepts connections and never answers).
const QUERY: Duration = Duration::from_secs(1);

/// A redis-server started here (a restart), killed when dropped.
struct Own {
    child: Child,
    /// Its directory, when it is its own (removed when dropped).
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Own {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGCONT when dropped: a paused server is resumed on every path.
struct Paused(u32);

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

/// When an injection happened and when the deployment had its new master
/// (or its restarted server) ready: recovery is the first grant after
/// `switched`, measured from `start`.
pub struct Done {
    pub start: u64,
    pub switched: u64,
    /// The master before and after (the same for a restart).
    pub old: u16,
    pub new: u16,
    /// What happened, for the run's log.
    pub what: String,
}

/// A running deployment and the resource server.
pub struct Redis {
    pub which: Deployment,
    resource: RedisServer,
    /// The single instance: its port and directory (its process is in
    /// `own`).
    single: Option<(u16, tempfile::TempDir)>,
    sentinel: Option<RedisSentinel>,
    cluster: Option<RedisCluster>,
    /// Servers started here, by port: they replace the supports' servers
    /// killed by a fault.
    own: HashMap<u16, Own>,
    /// The slot of the workers' lock key (cluster).
    slot: u16,
}

fn redis_bin() -> String {
    std::env::var("REDIS_BIN").unwrap_or_else(|_| "redis-server".into())
}

/// Starts redis-server on `port` in `dir` with `args`; returns once it
/// logs that it accepts connections (its log is drained until it exits).
async fn spawn(port: u16, dir: &Path, args: &[&str]) -> Result<Child, BoxError> {
    let mut child = Command::new(redis_bin())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args([
            "--logfile",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
        ])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let out = child.stdout.take().ok_or("no redis-server stdout")?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut tail = Vec::new();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains("Ready to accept connections") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(Ok(()));
                }
            } else if tx.is_some() {
                tail.push(line);
            }
        }
        if let Some(tx) = tx.take() {
            let _ = tx.send(Err(tail.join("\n")));
        }
    });
    match tokio::time::timeout(HANG, rx).await {
        Ok(Ok(Ok(()))) => Ok(child),
        Ok(Ok(Err(log))) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("redis-server on port {port} exited before it was ready:\n{log}").into())
        }
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("redis-server on port {port} was not ready within {HANG:?}").into())
        }
    }
}

fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

/// `cmd` sent to the server at `port`, `None` on any error or timeout.
pub(crate) async fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Option<T> {
    let ask = async {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(QUERY))
            .set_response_timeout(Some(QUERY));
        let mut c = redis::Client::open(url(port))
            .ok()?
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()?;
        cmd.query_async(&mut c).await.ok()
    };
    tokio::time::timeout(QUERY * 2, ask).await.ok().flatten()
}

pub(crate) fn cmd(args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(args[0]);
    c.arg(&args[1..]);
    c
}

/// Re-reads a state every 20 ms until `done` returns a value, or `HANG`.
pub(crate) async fn until<T, F, Fut>(what: &str, mut done: F) -> Result<T, BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + HANG;
    loop {
        if let Some(v) = done().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(format!("{what}: not within {HANG:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The master (ip, port) every sentinel at `ports` names, once they agree.
pub(crate) async fn agreed_master(ports: &[u16]) -> Result<(String, u16), BoxError> {
    until("the sentinels agreeing on a master", || async move {
        let mut named = Vec::new();
        for &p in ports {
            let addr: Vec<String> =
                query(p, &cmd(&["SENTINEL", "get-master-addr-by-name", MASTER])).await?;
            named.push((addr.first()?.clone(), addr.get(1)?.parse::<u16>().ok()?));
        }
        named
            .windows(2)
            .all(|w| w[0] == w[1])
            .then(|| named[0].clone())
    })
    .await
}

/// A field of `INFO` text.
pub(crate) fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// The server at `port` replicates the master at `master`, link up.
async fn replicates(port: u16, master: u16) -> bool {
    let Some(info) = query::<String>(port, &cmd(&["INFO", "replication"])).await else {
        return false;
    };
    field(&info, "role") == Some("slave")
        && field(&info, "master_port") == Some(master.to_string().as_str())
        && field(&info, "master_link_status") == Some("up")
}

/// One line of `CLUSTER NODES`.
#[derive(Debug)]
struct Node {
    id: String,
    port: u16,
    flags: String,
    master_id: Option<String>,
}

async fn cluster_nodes(port: u16) -> Option<Vec<Node>> {
    let text: String = query(port, &cmd(&["CLUSTER", "NODES"])).await?;
    Some(
        text.lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let port = f.get(1)?.split(['@', ',']).next()?.rsplit_once(':')?.1;
                Some(Node {
                    id: f[0].to_owned(),
                    port: port.parse().ok()?,
                    flags: f.get(2)?.to_string(),
                    master_id: f.get(3).filter(|m| **m != "-").map(|m| m.to_string()),
                })
            })
            .collect(),
    )
}

/// The port of the master serving `slot`, as the node at `port` says.
async fn slot_owner(port: u16, slot: u16) -> Option<u16> {
    let slots: Vec<redis::Value> = query(port, &cmd(&["CLUSTER", "SLOTS"])).await?;
    slots.iter().find_map(|range| {
        let parts: Vec<redis::Value> = redis::from_redis_value_ref(range).ok()?;
        let from: u16 = redis::from_redis_value_ref(parts.first()?).ok()?;
        let to: u16 = redis::from_redis_value_ref(parts.get(1)?).ok()?;
        let master: Vec<redis::Value> = redis::from_redis_value_ref(parts.get(2)?).ok()?;
        let port: u16 = redis::from_redis_value_ref(master.get(1)?).ok()?;
        (from..=to).contains(&slot).then_some(port)
    })
}

impl Redis {
    /// Starts the deployment `which` and the resource server; on a
    /// cluster, the faults target the slot of the workers' lock `key`.
    pub async fn start(which: Deployment, key: &str) -> Result<Redis, BoxError> {
        let resource = tokio::task::block_in_place(RedisServer::start);
        let mut d = Redis {
            which,
            resource,
            single: None,
            sentinel: None,
            cluster: None,
            own: HashMap::new(),
            slot: 0,
        };
        match which {
            Deployment::Single => {
                let port = crate::support::free_port();
                let dir = tempfile::Builder::new()
                    .prefix("fairlock-faults-redis-")
                    .tempdir()?;
                let child = spawn(port, dir.path(), &["--save", "", "--appendonly", "no"]).await?;
                d.own.insert(port, Own { child, _dir: None });
                d.single = Some((port, dir));
            }
            Deployment::Sentinel => {
                d.sentinel = Some(tokio::task::block_in_place(|| {
                    RedisSentinel::start(Auth::default())
                }));
            }
            Deployment::Cluster => {
                let c = tokio::task::block_in_place(RedisCluster::start);
                d.slot = c.slot(&format!("{{{key}}}")).await;
                d.cluster = Some(c);
            }
        }
        Ok(d)
    }

    /// The URL the workers lock at.
    pub fn url(&self) -> String {
        match (&self.single, &self.sentinel, &self.cluster) {
            (Some((port, _)), _, _) => url(*port),
            (_, Some(s), _) => s.url(),
            (_, _, Some(c)) => c.url(),
            _ => unreachable!("a deployment was started"),
        }
    }

    /// The URL of the resource server (the fenced counter).
    pub fn resource_url(&self) -> String {
        self.resource.url.clone()
    }

    /// What the deployment is, for the run's header.
    pub fn describe(&self) -> String {
        match self.which {
            Deployment::Single => format!("one redis-server at {}", self.url()),
            Deployment::Sentinel => format!(
                "master + replica + 3 sentinels (down-after-milliseconds 1000) at {}",
                self.url()
            ),
            Deployment::Cluster => format!(
                "cluster of 3 masters + 3 replicas (cluster-node-timeout 1000) at {}; the \
                 workers' key is in slot {}",
                self.url(),
                self.slot
            ),
        }
    }

    /// The process id of the server on `port`.
    fn pid(&self, port: u16) -> Result<u32, BoxError> {
        if let Some(o) = self.own.get(&port) {
            return Ok(o.child.id());
        }
        let support = self
            .sentinel
            .iter()
            .flat_map(|s| std::iter::once(&s.master).chain(std::iter::once(&s.replica)))
            .chain(self.cluster.iter().flat_map(|c| c.nodes.iter()))
            .find(|s| s.port == port);
        support
            .map(RedisServer::pid)
            .ok_or_else(|| format!("no server on port {port}").into())
    }

    fn signal(&self, port: u16, sig: &str) -> Result<u32, BoxError> {
        let pid = self.pid(port)?;
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(format!("kill {sig} {pid} (port {port}) failed").into());
        }
        Ok(pid)
    }

    /// kill -9 of the server on `port`; returns once it is gone.
    async fn kill(&mut self, port: u16) -> Result<(), BoxError> {
        if let Some(mut o) = self.own.remove(&port) {
            o.child.kill()?;
            o.child.wait()?;
            return Ok(());
        }
        let pid = self.signal(port, "-9")?;
        until("the killed server gone", || async move {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Gone, or a zombie its wrapper has not reaped yet.
            (stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z")).then_some(())
        })
        .await
    }

    /// The master's port as the sentinels name it (all three agree).
    async fn sentinel_master(&self) -> Result<u16, BoxError> {
        let s = self.sentinel.as_ref().ok_or("no sentinels")?;
        let ports: Vec<u16> = s.sentinels.iter().map(|s| s.port).collect();
        Ok(agreed_master(&ports).await?.1)
    }

    /// The current data masters (where the lock keys are).
    pub async fn masters(&self) -> Result<Vec<u16>, BoxError> {
        match self.which {
            Deployment::Single => Ok(self.single.iter().map(|(p, _)| *p).collect()),
            Deployment::Sentinel => Ok(vec![self.sentinel_master().await?]),
            Deployment::Cluster => {
                let c = self.cluster.as_ref().ok_or("no cluster")?;
                for n in &c.nodes {
                    if let Some(nodes) = cluster_nodes(n.port).await {
                        return Ok(nodes
                            .iter()
                            .filter(|n| n.flags.contains("master") && !n.flags.contains("fail"))
                            .map(|n| n.port)
                            .collect());
                    }
                }
                Err("no cluster node answers".into())
            }
        }
    }

    /// The keys under `prefix` on every master.
    pub async fn keys(&self, prefix: &str) -> Result<Vec<String>, BoxError> {
        let mut keys = Vec::new();
        for port in self.masters().await? {
            let found: Vec<String> = query(port, &cmd(&["KEYS", &format!("{prefix}*")]))
                .await
                .ok_or_else(|| format!("KEYS on port {port} failed"))?;
            keys.extend(found);
        }
        Ok(keys)
    }

    /// The hash slot of `key`, as a node of the cluster says (none: not a
    /// cluster, or no node answered).
    pub async fn keyslot(&self, key: &str) -> Option<u16> {
        for n in &self.cluster.as_ref()?.nodes {
            if let Some(slot) = query::<u16>(n.port, &cmd(&["CLUSTER", "KEYSLOT", key])).await {
                return Some(slot);
            }
        }
        None
    }

    /// Injects `fault`; returns once the deployment has its new master (or
    /// the restarted server is ready), the paused master resumed and the
    /// killed one started again: see [`Redis::whole`] for the rest.
    pub async fn inject(&mut self, fault: RedisFault) -> Result<Done, BoxError> {
        match fault {
            RedisFault::RestartVolatile | RedisFault::RestartDurable => self.restart(fault).await,
            RedisFault::SentinelFailover | RedisFault::SentinelKill | RedisFault::SentinelPause => {
                self.sentinel_fault(fault).await
            }
            RedisFault::ClusterFailover | RedisFault::ClusterKill | RedisFault::ClusterPause => {
                self.cluster_fault(fault).await
            }
            RedisFault::ClusterMigrate => self.migrate().await,
            RedisFault::SentinelCutoff => Err("a cut needs namespaces (redis_cutoff.rs)".into()),
        }
    }

    async fn restart(&mut self, fault: RedisFault) -> Result<Done, BoxError> {
        let (port, dir) = match &self.single {
            Some((port, dir)) => (*port, dir.path().to_owned()),
            None => return Err("no single instance".into()),
        };
        let durable = fault == RedisFault::RestartDurable;
        if durable {
            // Persistence on before the fault: the AOF written (rewrite
            // done) and every later write fsynced before its reply.
            for set in [["appendfsync", "always"], ["appendonly", "yes"]] {
                let ok: Option<String> =
                    query(port, &cmd(&["CONFIG", "SET", set[0], set[1]])).await;
                ok.ok_or("CONFIG SET failed")?;
            }
            until("the AOF rewrite", || async move {
                let info: String = query(port, &cmd(&["INFO", "persistence"])).await?;
                (field(&info, "aof_enabled") == Some("1")
                    && field(&info, "aof_rewrite_in_progress") == Some("0")
                    && field(&info, "aof_rewrite_scheduled") == Some("0")
                    && field(&info, "aof_last_bgrewrite_status") == Some("ok")
                    && field(&info, "aof_rewrites").is_some_and(|n| n != "0"))
                .then_some(())
            })
            .await?;
        }
        let start = mono_ns();
        self.kill(port).await?;
        let args: &[&str] = if durable {
            &[
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ]
        } else {
            // Nothing on disk either: it comes back empty.
            for entry in std::fs::read_dir(&dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    std::fs::remove_dir_all(path)?;
                } else {
                    std::fs::remove_file(path)?;
                }
            }
            &["--save", "", "--appendonly", "no"]
        };
        let child = spawn(port, &dir, args).await?;
        self.own.insert(port, Own { child, _dir: None });
        let switched = mono_ns();
        Ok(Done {
            start,
            switched,
            old: port,
            new: port,
            what: format!(
                "restarted in {:.0} ms",
                crate::ms(switched.saturating_sub(start))
            ),
        })
    }

    async fn sentinel_fault(&mut self, fault: RedisFault) -> Result<Done, BoxError> {
        let old = self.sentinel_master().await?;
        let s = self.sentinel.as_ref().ok_or("no sentinels")?;
        let sentinel = s.sentinels[0].port;
        let sentinels: Vec<u16> = s.sentinels.iter().map(|s| s.port).collect();
        let mut switches = s.switches().await;
        let start = mono_ns();
        let mut paused = None;
        match fault {
            RedisFault::SentinelFailover => {
                let ok: Option<String> =
                    query(sentinel, &cmd(&["SENTINEL", "FAILOVER", MASTER])).await;
                ok.ok_or("SENTINEL FAILOVER refused")?;
            }
            RedisFault::SentinelKill => self.kill(old).await?,
            _ => paused = Some(Paused(self.signal(old, "-STOP")?)),
        }
        // The switch away from `old`: a sentinel may repeat an earlier
        // one (seen once, the previous failover's, right after
        // subscribing), which must not pass for this one.
        let deadline = Instant::now() + HANG;
        let new = loop {
            let msg = tokio::time::timeout_at(deadline, switches.next())
                .await
                .map_err(|_| "no +switch-master")?
                .ok_or("the sentinel's events ended")?;
            let text: String = msg.get_payload()?;
            // "<name> <old ip> <old port> <new ip> <new port>"
            let port = |n| {
                text.split_whitespace()
                    .nth(n)
                    .and_then(|p| p.parse::<u16>().ok())
            };
            match (port(2), port(4)) {
                (Some(from), Some(to)) if from == old && to != old => break to,
                (Some(_), Some(_)) => println!("  (ignored +switch-master {text:?})"),
                _ => return Err(format!("odd +switch-master {text:?}").into()),
            }
        };
        // Every sentinel names the new master before the old one comes
        // back: a killed master started again before the sentinels saw it
        // down would stay the master, empty (seen once in a long run,
        // after a +switch-master away from it).
        until("every sentinel naming the new master", || {
            let sentinels = sentinels.clone();
            async move {
                for p in sentinels {
                    let addr: Vec<String> =
                        query(p, &cmd(&["SENTINEL", "get-master-addr-by-name", MASTER])).await?;
                    if addr.get(1)? != &new.to_string() {
                        return None;
                    }
                }
                Some(())
            }
        })
        .await?;
        let switched = mono_ns();
        drop(paused);
        if fault == RedisFault::SentinelKill {
            // Back empty, as a replica of the new master (as the
            // sentinels would make it). Started as a master, it was twice
            // in long runs promoted back by the sentinels a little later,
            // the promoted replica resyncing from it empty: a Sentinel
            // hazard of masters restarted without persistence, not what
            // this run is about.
            let dir = tempfile::Builder::new()
                .prefix("fairlock-faults-redis-")
                .tempdir()?;
            let new_port = new.to_string();
            let child = spawn(
                old,
                dir.path(),
                &[
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--replicaof",
                    "127.0.0.1",
                    &new_port,
                ],
            )
            .await?;
            self.own.insert(
                old,
                Own {
                    child,
                    _dir: Some(dir),
                },
            );
        }
        Ok(Done {
            start,
            switched,
            old,
            new,
            what: format!(
                "master {old} -> {new} after {:.0} ms",
                crate::ms(switched - start)
            ),
        })
    }

    async fn cluster_fault(&mut self, fault: RedisFault) -> Result<Done, BoxError> {
        let c = self.cluster.as_ref().ok_or("no cluster")?;
        let ports: Vec<u16> = c.nodes.iter().map(|n| n.port).collect();
        let slot = self.slot;
        let old = slot_owner(ports[0], slot)
            .await
            .ok_or("CLUSTER SLOTS failed")?;
        let nodes = cluster_nodes(old).await.ok_or("CLUSTER NODES failed")?;
        let me = nodes
            .iter()
            .find(|n| n.flags.contains("myself"))
            .ok_or("no myself in CLUSTER NODES")?;
        let replica = nodes
            .iter()
            .find(|n| n.master_id.as_deref() == Some(me.id.as_str()))
            .ok_or("the slot's master has no replica")?
            .port;
        // A restart needs the node's directory (its nodes.conf) and bus port.
        let mut config = Vec::new();
        if fault == RedisFault::ClusterKill {
            for name in ["dir", "cluster-port"] {
                let v: Vec<String> = query(old, &cmd(&["CONFIG", "GET", name]))
                    .await
                    .ok_or("CONFIG GET failed")?;
                config.push(v.get(1).cloned().ok_or("CONFIG GET: no value")?);
            }
        }
        let start = mono_ns();
        let mut paused = None;
        match fault {
            RedisFault::ClusterFailover => {
                let ok: Option<String> = query(replica, &cmd(&["CLUSTER", "FAILOVER"])).await;
                ok.ok_or("CLUSTER FAILOVER refused")?;
            }
            RedisFault::ClusterKill => self.kill(old).await?,
            _ => paused = Some(Paused(self.signal(old, "-STOP")?)),
        }
        let others: Vec<u16> = ports.iter().copied().filter(|&p| p != old).collect();
        until("the replica serving the slot", || {
            let others = others.clone();
            async move {
                for p in others {
                    if slot_owner(p, slot).await != Some(replica) {
                        return None;
                    }
                }
                Some(())
            }
        })
        .await?;
        let switched = mono_ns();
        drop(paused);
        if fault == RedisFault::ClusterKill {
            let dir = std::path::PathBuf::from(&config[0]);
            let child = spawn(
                old,
                &dir,
                &[
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "1000",
                    "--cluster-replica-validity-factor",
                    "0",
                    "--cluster-port",
                    &config[1],
                ],
            )
            .await?;
            self.own.insert(old, Own { child, _dir: None });
        }
        Ok(Done {
            start,
            switched,
            old,
            new: replica,
            what: format!(
                "slot {slot}: master {old} -> {replica} after {:.0} ms",
                crate::ms(switched - start)
            ),
        })
    }

    /// Moves the workers' slot to another master, keys and all, the way
    /// `redis-cli --cluster reshard` does.
    async fn migrate(&mut self) -> Result<Done, BoxError> {
        let c = self.cluster.as_ref().ok_or("no cluster")?;
        let ports: Vec<u16> = c.nodes.iter().map(|n| n.port).collect();
        let slot = self.slot;
        let slot_s = slot.to_string();
        let src = slot_owner(ports[0], slot)
            .await
            .ok_or("CLUSTER SLOTS failed")?;
        let nodes = cluster_nodes(src).await.ok_or("CLUSTER NODES failed")?;
        let id = |port: u16| {
            nodes
                .iter()
                .find(|n| n.port == port)
                .map(|n| n.id.clone())
                .ok_or_else(|| format!("no node {port} in CLUSTER NODES"))
        };
        let masters: Vec<u16> = nodes
            .iter()
            .filter(|n| n.flags.contains("master") && !n.flags.contains("fail"))
            .map(|n| n.port)
            .collect();
        let dst = *masters
            .iter()
            .find(|&&p| p != src)
            .ok_or("no other master")?;
        let (src_id, dst_id) = (id(src)?, id(dst)?);
        let ok = |r: Option<String>, what: &str| r.map(|_| ()).ok_or(format!("{what} failed"));
        let start = mono_ns();
        ok(
            query(
                dst,
                &cmd(&["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &src_id]),
            )
            .await,
            "SETSLOT IMPORTING",
        )?;
        ok(
            query(
                src,
                &cmd(&["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &dst_id]),
            )
            .await,
            "SETSLOT MIGRATING",
        )?;
        let mut moved = 0;
        for round in 0.. {
            if round == 1000 {
                return Err(format!("slot {slot}: keys still on {src} after 1000 MIGRATEs").into());
            }
            let keys: Vec<String> = query(src, &cmd(&["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"]))
                .await
                .ok_or("GETKEYSINSLOT failed")?;
            if keys.is_empty() {
                break;
            }
            let dst_s = dst.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &dst_s, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            let done: Option<String> = query(src, &cmd(&args)).await;
            // NOKEY (all expired meanwhile) is fine; an error is retried
            // on the next listing.
            if done.is_some() {
                moved += keys.len();
            }
        }
        // The new owner first, then the old one, then the others (as
        // redis-cli does), so no node sends clients back to the source.
        let mut order = vec![dst, src];
        order.extend(masters.iter().copied().filter(|&p| p != dst && p != src));
        for p in order {
            ok(
                query(p, &cmd(&["CLUSTER", "SETSLOT", &slot_s, "NODE", &dst_id])).await,
                "SETSLOT NODE",
            )?;
        }
        until("every node naming the slot's new master", || {
            let ports = ports.clone();
            async move {
                for p in ports {
                    if slot_owner(p, slot).await != Some(dst) {
                        return None;
                    }
                }
                Some(())
            }
        })
        .await?;
        let switched = mono_ns();
        Ok(Done {
            start,
            switched,
            old: dst,
            new: dst,
            what: format!(
                "slot {slot}: {src} -> {dst}, {moved} key(s) moved in {:.0} ms",
                crate::ms(switched - start)
            ),
        })
    }

    /// Waits until the deployment is whole again after `done`: the old
    /// master a replica of the new one with its link up, and every
    /// sentinel (or cluster node) seeing the new master and the replica
    /// (so that the next fault can fail over again). Returns when.
    pub async fn whole(&self, done: &Done) -> Result<u64, BoxError> {
        let (old, new) = (done.old, done.new);
        match self.which {
            Deployment::Single => {}
            Deployment::Sentinel => {
                let sentinels: Vec<u16> = self
                    .sentinel
                    .iter()
                    .flat_map(|s| s.sentinels.iter().map(|s| s.port))
                    .collect();
                // Whole: one master the three sentinels name, the other
                // node its replica with the link up, as they know it. The
                // sentinels sometimes fail back to the old master a little
                // after it returns (seen after kills, in long runs): that
                // is whole too, with the roles swapped (the workers follow
                // whichever master the sentinels name; a failback to a
                // node that came back empty is the data loss the epoch is
                // for, and the checkers judge what it did to the lock).
                let is_whole = |master: u16, replica: u16| {
                    let sentinels = sentinels.clone();
                    async move {
                        if !replicates(replica, master).await {
                            return None;
                        }
                        for p in sentinels {
                            let addr: Vec<String> =
                                query(p, &cmd(&["SENTINEL", "get-master-addr-by-name", MASTER]))
                                    .await?;
                            if addr.get(1)? != &master.to_string() {
                                return None;
                            }
                            let replicas: Vec<HashMap<String, String>> =
                                query(p, &cmd(&["SENTINEL", "REPLICAS", MASTER])).await?;
                            let known = replicas.iter().any(|r| {
                                r.get("port") == Some(&replica.to_string())
                                    && r.get("flags").map(String::as_str) == Some("slave")
                                    && r.get("master-link-status").map(String::as_str) == Some("ok")
                            });
                            if !known {
                                return None;
                            }
                        }
                        Some(())
                    }
                };
                let waited = until("the old master a replica the sentinels know", || async {
                    if is_whole(new, old).await.is_some() {
                        return Some(());
                    }
                    is_whole(old, new).await?;
                    println!("  (the sentinels failed back to {old}; {new} is its replica)");
                    Some(())
                })
                .await;
                if let Err(e) = waited {
                    return Err(format!("{e}; {}", sentinel_state(old, &sentinels).await).into());
                }
            }
            Deployment::Cluster => {
                let ports: Vec<u16> = self
                    .cluster
                    .iter()
                    .flat_map(|c| c.nodes.iter().map(|n| n.port))
                    .collect();
                let (slot, replica) = (self.slot, new);
                until("the old master a replica, every node agreeing", || {
                    let ports = ports.clone();
                    async move {
                        if !replicates(old, replica).await {
                            return None;
                        }
                        for p in ports {
                            let info: String = query(p, &cmd(&["CLUSTER", "INFO"])).await?;
                            let nodes = cluster_nodes(p).await?;
                            let count = |role: &str| {
                                nodes
                                    .iter()
                                    .filter(|n| n.flags.contains(role) && !n.flags.contains("fail"))
                                    .count()
                            };
                            if field(&info, "cluster_state") != Some("ok")
                                || count("master") != 3
                                || count("slave") != 3
                                || slot_owner(p, slot).await != Some(replica)
                            {
                                return None;
                            }
                        }
                        Some(())
                    }
                })
                .await?;
            }
        }
        Ok(mono_ns())
    }
}

/// What the old master and the sentinels say, for a failed wait.
async fn sentinel_state(old: u16, sentinels: &[u16]) -> String {
    let info: Option<String> = query(old, &cmd(&["INFO", "replication"])).await;
    let mut out = format!(
        "old master {old}: {}",
        info.unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("role") || l.starts_with("master_"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    for &p in sentinels {
        let addr: Option<Vec<String>> =
            query(p, &cmd(&["SENTINEL", "get-master-addr-by-name", MASTER])).await;
        let replicas: Option<Vec<HashMap<String, String>>> =
            query(p, &cmd(&["SENTINEL", "REPLICAS", MASTER])).await;
        let replicas: Vec<String> = replicas
            .unwrap_or_default()
            .iter()
            .map(|r| {
                format!(
                    "{} {} link {}",
                    r.get("port").map_or("?", String::as_str),
                    r.get("flags").map_or("?", String::as_str),
                    r.get("master-link-status").map_or("?", String::as_str)
                )
            })
            .collect();
        out.push_str(&format!(
            "; sentinel {p}: master {addr:?}, replicas {replicas:?}"
        ));
    }
    out
}
