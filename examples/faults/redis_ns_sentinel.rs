//! The deployment of the cut-off master fault (`redis_cutoff.rs`): two
//! data nodes (a master and its replica), three sentinels, the resource
//! server (the workers' fenced counter, which no fault touches) and the
//! workers, each in a network namespace of its own on one test network
//! (`tests/support/net.rs`, addresses 10.213.0.0/24 that exist only inside
//! those namespaces). Servers listen on their namespace's address only,
//! port 6379 (data, resource) or 26379 (sentinels); the sentinels and the
//! replica announce that address, so what the sentinels tell the workers
//! is reachable from the workers' namespaces. The harness reaches every
//! server through a gateway of its own (`Net::gateway`: a relay on the
//! host's 127.0.0.1 dialling from an observer node that no partition
//! touches), so `redis_deploy.rs`'s queries by port serve here too.
//!
//! Sentinels as in `tests/support/redis_sentinel.rs`: quorum 2,
//! `down-after-milliseconds 1000`, `failover-timeout 5000`.
//!
//! Teardown: dropping the deployment kills its processes, then the
//! network's drop deletes the namespaces (and the nft table of a cut
//! with them), also when the run fails half-way.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Stdio};

use crate::redis_deploy::{agreed_master, cmd, field, query, until};
use crate::support::net::Net;
use crate::support::proxy::Proxy;
use crate::support::redis_sentinel::MASTER;
use crate::{BoxError, mono_ns};

const DATA_PORT: u16 = 6379;
const SENTINEL_PORT: u16 = 26379;

/// The running deployment (see the module docs).
pub struct NsSentinel {
    /// Processes first: dropped (killed) before the network.
    procs: Vec<(String, Child)>,
    gateways: HashMap<Ipv4Addr, Proxy>,
    pub net: Net,
    /// The two data nodes and the sentinels (node indices).
    pub data: [usize; 2],
    pub sentinels: Vec<usize>,
    pub resource: usize,
    pub workers: Vec<usize>,
    dir: tempfile::TempDir,
}

impl Drop for NsSentinel {
    fn drop(&mut self) {
        for (_, child) in &mut self.procs {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn redis_bin() -> String {
    std::env::var("REDIS_BIN").unwrap_or_else(|_| "redis-server".into())
}

impl NsSentinel {
    /// Builds the network, starts the servers; returns once the replica
    /// is in sync and every sentinel knows the replica and the two other
    /// sentinels.
    pub async fn start(workers: usize) -> Result<NsSentinel, BoxError> {
        let mut net = Net::new()?;
        let data = [net.add_node("d0")?, net.add_node("d1")?];
        let sentinels = (0..3)
            .map(|i| net.add_node(&format!("s{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let resource = net.add_node("res")?;
        let workers = (0..workers)
            .map(|i| net.add_node(&format!("w{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let observer = net.add_observer("obs")?;
        let mut d = NsSentinel {
            procs: Vec::new(),
            gateways: HashMap::new(),
            net,
            data,
            sentinels,
            resource,
            workers,
            dir: tempfile::Builder::new()
                .prefix("fairlock-faults-cutoff-")
                .tempdir()?,
        };
        let servers: Vec<usize> = [data[0], data[1], resource]
            .into_iter()
            .chain(d.sentinels.iter().copied())
            .collect();
        for &n in &servers {
            let node = d.net.node(n);
            let port = if d.sentinels.contains(&n) {
                SENTINEL_PORT
            } else {
                DATA_PORT
            };
            let gw = d
                .net
                .gateway(observer, SocketAddr::from((node.ip, port)))
                .await?;
            d.gateways.insert(node.ip, gw);
        }
        let master_ip = d.ip(data[0]).to_string();
        d.server(data[0], &[])?;
        d.server(data[1], &["--replicaof", &master_ip, "6379"])?;
        d.server(resource, &[])?;
        for &n in &[data[0], data[1], resource] {
            d.answers(n).await?;
        }
        for i in 0..3 {
            d.sentinel(d.sentinels[i], &master_ip)?;
        }
        let replica = d.port(data[1]);
        until("the replica in sync", || async move {
            let info: String = query(replica, &cmd(&["INFO", "replication"])).await?;
            (field(&info, "master_link_status") == Some("up")).then_some(())
        })
        .await
        .map_err(|e| d.failed(e))?;
        for &s in &d.sentinels {
            let port = d.port(s);
            until(
                "every sentinel knowing the replica and the others",
                || async move {
                    let fields: Vec<String> =
                        query(port, &cmd(&["SENTINEL", "MASTER", MASTER])).await?;
                    let get = |name: &str| {
                        let at = fields.iter().position(|f| f == name)?;
                        fields.get(at + 1).map(String::as_str)
                    };
                    (get("num-other-sentinels") == Some("2") && get("num-slaves") == Some("1"))
                        .then_some(())
                },
            )
            .await
            .map_err(|e| d.failed(e))?;
        }
        Ok(d)
    }

    pub fn ip(&self, node: usize) -> Ipv4Addr {
        self.net.node(node).ip
    }

    /// The harness's port (on 127.0.0.1) for the server of `node`.
    pub fn port(&self, node: usize) -> u16 {
        self.gateways
            .get(&self.ip(node))
            .map_or(0, |g| g.addr.port())
    }

    fn spawn(&mut self, node: usize, args: &[String]) -> Result<(), BoxError> {
        let name = self.net.node(node).name.clone();
        let child = self
            .net
            .command(node, redis_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server ({name}): {e}"))?;
        self.procs.push((name, child));
        Ok(())
    }

    /// A data server (or the resource server) in `node`.
    fn server(&mut self, node: usize, extra: &[&str]) -> Result<(), BoxError> {
        let (ip, name) = (self.ip(node).to_string(), &self.net.node(node).name);
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir)?;
        let mut args: Vec<String> = [
            "--bind",
            &ip,
            "--port",
            "6379",
            "--replica-announce-ip",
            &ip,
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--logfile",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(dir.join("redis.log").display().to_string());
        args.push("--dir".into());
        args.push(dir.display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        self.spawn(node, &args)
    }

    /// A sentinel in `node` monitoring the master at `master_ip`.
    fn sentinel(&mut self, node: usize, master_ip: &str) -> Result<(), BoxError> {
        let (ip, name) = (self.ip(node), &self.net.node(node).name);
        let dir = self.dir.path().join(name);
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {SENTINEL_PORT}\nbind {ip}\nprotected-mode no\ndaemonize no\n\
                 logfile \"{log}\"\ndir \"{dir}\"\n\
                 sentinel announce-ip {ip}\nsentinel announce-port {SENTINEL_PORT}\n\
                 sentinel monitor {MASTER} {master_ip} {DATA_PORT} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 5000\n",
                log = dir.join("sentinel.log").display(),
                dir = dir.display()
            ),
        )?;
        self.spawn(node, &[conf.display().to_string(), "--sentinel".into()])
    }

    /// Waits for the server of `node` to answer PING, or to exit.
    async fn answers(&mut self, node: usize) -> Result<(), BoxError> {
        let port = self.port(node);
        let name = self.net.node(node).name.clone();
        let gone = self
            .procs
            .iter_mut()
            .find(|(n, _)| *n == name)
            .ok_or("no such process")?;
        for _ in 0..1000 {
            if query::<String>(port, &cmd(&["PING"])).await.is_some() {
                return Ok(());
            }
            if gone.1.try_wait()?.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        Err(self.failed(format!("redis-server {name} did not answer").into()))
    }

    /// `e` with the tail of every server's log, for a failed wait.
    pub fn failed(&self, e: BoxError) -> BoxError {
        let mut out = e.to_string();
        for (name, _) in &self.procs {
            for file in ["redis.log", "sentinel.log"] {
                let path = self.dir.path().join(name).join(file);
                if let Ok(text) = std::fs::read_to_string(&path) {
                    let lines: Vec<&str> = text.lines().collect();
                    out.push_str(&format!("\n--- {name}/{file} (last lines):"));
                    for l in &lines[lines.len().saturating_sub(8)..] {
                        out.push_str(&format!("\n  {l}"));
                    }
                }
            }
        }
        out.into()
    }

    /// `redis+sentinel://` URL of the three sentinels, for the workers.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|&s| format!("{}:{SENTINEL_PORT}", self.ip(s)))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// The resource server's URL, for the workers.
    pub fn resource_url(&self) -> String {
        format!("redis://{}:{DATA_PORT}/", self.ip(self.resource))
    }

    /// The data node named master by every sentinel.
    pub async fn master(&self) -> Result<usize, BoxError> {
        let ports: Vec<u16> = self.sentinels.iter().map(|&s| self.port(s)).collect();
        let (ip, _) = agreed_master(&ports).await?;
        self.data_node(ip.parse::<Ipv4Addr>()?)
    }

    /// The data node at `ip`.
    pub fn data_node(&self, ip: Ipv4Addr) -> Result<usize, BoxError> {
        self.data
            .iter()
            .copied()
            .find(|&n| self.ip(n) == ip)
            .ok_or_else(|| format!("{ip} is no data node").into())
    }

    /// A subscription to the first sentinel's `+switch-master` events.
    pub async fn switches(&self) -> Result<redis::aio::PubSubStream, BoxError> {
        let url = format!("redis://127.0.0.1:{}/", self.port(self.sentinels[0]));
        let mut pubsub = redis::Client::open(url)?.get_async_pubsub().await?;
        pubsub.subscribe("+switch-master").await?;
        Ok(pubsub.into_on_message())
    }

    /// Cuts the data node `master` off from the other data node and the
    /// sentinels; the workers and the resource still reach it.
    pub fn cut(&self, master: usize) -> Result<(), BoxError> {
        let mut others: Vec<usize> = self.data.iter().copied().filter(|&n| n != master).collect();
        others.extend(&self.sentinels);
        self.net.split(&[master], &others)
    }

    /// Ends the cut.
    pub fn heal(&self) -> Result<(), BoxError> {
        self.net.heal_partition()
    }

    /// Waits until `replica` replicates `master` with its link up and
    /// every sentinel names `master` and lists `replica` as a replica with
    /// its link ok; returns when.
    pub async fn whole(&self, master: usize, replica: usize) -> Result<u64, BoxError> {
        let (mip, rip) = (self.ip(master).to_string(), self.ip(replica).to_string());
        let rport = self.port(replica);
        let ports: Vec<u16> = self.sentinels.iter().map(|&s| self.port(s)).collect();
        let waited = until("the old master a replica the sentinels know", || {
            let (mip, rip, ports) = (mip.clone(), rip.clone(), ports.clone());
            async move {
                let info: String = query(rport, &cmd(&["INFO", "replication"])).await?;
                if field(&info, "role") != Some("slave")
                    || field(&info, "master_host") != Some(mip.as_str())
                    || field(&info, "master_link_status") != Some("up")
                {
                    return None;
                }
                for p in ports {
                    let addr: Vec<String> =
                        query(p, &cmd(&["SENTINEL", "get-master-addr-by-name", MASTER])).await?;
                    let replicas: Vec<HashMap<String, String>> =
                        query(p, &cmd(&["SENTINEL", "REPLICAS", MASTER])).await?;
                    let known = replicas.iter().any(|r| {
                        r.get("ip") == Some(&rip)
                            && r.get("flags").map(String::as_str) == Some("slave")
                            && r.get("master-link-status").map(String::as_str) == Some("ok")
                    });
                    if addr.first() != Some(&mip) || !known {
                        return None;
                    }
                }
                Some(())
            }
        })
        .await;
        waited.map_err(|e| self.failed(e))?;
        Ok(mono_ns())
    }

    /// The keys under `prefix` on the master.
    pub async fn keys(&self, prefix: &str) -> Result<Vec<String>, BoxError> {
        let port = self.port(self.master().await?);
        query(port, &cmd(&["KEYS", &format!("{prefix}*")]))
            .await
            .ok_or_else(|| "KEYS on the master failed".into())
    }
}
