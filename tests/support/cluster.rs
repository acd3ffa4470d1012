//! A 3-member (or n-member) etcd cluster on free loopback ports, for fault
//! injection: find the leader, pause/resume, kill -9 and restart members.
//!
//! Each member runs under a bash wrapper that holds our end of a pipe, as
//! [`super::Etcd`] does: when the harness exits for any reason the pipe
//! closes and the wrapper kills its etcd and removes its data dir. To restart
//! a member we tell its wrapper to keep the data (`keep` on the pipe), then
//! start a new wrapper on the same data dir and ports with
//! `--initial-cluster-state existing`.
//!
//! The wrapper leaves the log pipe to etcd once it started it, so a member
//! that dies before it serves ends the wait for it at once.
//!
//! Timing: etcd's defaults, heartbeat 100 ms and election timeout 1000 ms
//! ([`ELECTION_TIMEOUT`]); the liveness bounds of the fault harness use them.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use super::emulate::{Relay, Version};
use super::{etcd_bin, free_port, on_free_ports};

/// etcd's default election timeout, which this cluster keeps.
pub const ELECTION_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long a member may take to report readiness before we give up.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Any error of the cluster harness, as text for the report.
pub type ClusterError = Box<dyn std::error::Error + Send + Sync>;

/// One member: fixed name, ports and data dir; a process while it runs.
struct Member {
    name: String,
    client_url: String,
    peer_url: String,
    /// Where it listens, when not where it is reached (behind a relay).
    listen: Option<Listen>,
    /// The network namespace it runs in (`None`: the host's loopback).
    netns: Option<String>,
    /// The endpoint the harness uses to reach it (`client_url` on
    /// loopback; a gateway into the namespace otherwise).
    access: String,
    data: PathBuf,
    running: Option<Running>,
}

/// Where a member behind relays listens: its own ports, which the relays
/// it advertises forward to (see [`Cluster::start_relayed`]).
#[derive(Clone, Debug)]
pub struct Listen {
    /// `http://127.0.0.1:port` for clients.
    pub client_url: String,
    /// `http://127.0.0.1:port` for peers.
    pub peer_url: String,
}

/// Where a member of [`Cluster::start_placed`] runs.
pub struct Placement {
    /// Network namespace (`ip netns exec`).
    pub netns: String,
    /// Its address there; etcd listens on ports 2379 (clients) and 2380.
    pub ip: std::net::Ipv4Addr,
    /// `host:port` through which the harness reaches its client port.
    pub access: String,
}

/// A running member's process, its wrapper and the tail of its log.
struct Running {
    pid: u32,
    wrapper: Child,
    pipe: ChildStdin,
    log: Arc<Mutex<VecDeque<String>>>,
}

/// A running etcd cluster. Dropping it stops every member and deletes the
/// data.
pub struct Cluster {
    members: Vec<Member>,
    initial_cluster: String,
    dir: PathBuf,
    /// The relays clients reach the members through when the tests
    /// emulate a newer etcd (loopback clusters only; see `emulate.rs`).
    relays: Vec<Relay>,
}

/// Kills etcd when we close the pipe (or exit); removes its data unless we
/// wrote `keep` first, which is how a restart keeps the member's state.
const WRAPPER: &str = r#"
    "$ETCD" "$@" & pid=$!
    echo "pid $pid" >&2
    exec 2>/dev/null
    read -r what || what=
    kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    [ "$what" = keep ] || rm -rf "$DATA"
"#;

impl Cluster {
    /// Starts `n` members and waits until each serves clients.
    ///
    /// # Errors
    /// When etcd is missing or a member does not become ready.
    pub fn start(n: usize) -> Result<Cluster, ClusterError> {
        on_free_ports(|| Cluster::start_on_free_ports(n))
    }

    fn start_on_free_ports(n: usize) -> Result<Cluster, ClusterError> {
        let dir = tempfile::Builder::new()
            .prefix("fairlock-faults-etcd-")
            .tempdir()?
            .keep();
        let members: Vec<Member> = (0..n)
            .map(|i| {
                let client_url = format!("http://127.0.0.1:{}", free_port());
                Member {
                    name: format!("m{i}"),
                    access: client_url.trim_start_matches("http://").into(),
                    client_url,
                    peer_url: format!("http://127.0.0.1:{}", free_port()),
                    listen: None,
                    netns: None,
                    data: dir.join(format!("m{i}")),
                    running: None,
                }
            })
            .collect();
        let mut cluster = Cluster::launch_all(members, dir)?;
        if let Some(version) = Version::from_env() {
            for m in &mut cluster.members {
                let relay = Relay::start(&m.access, version);
                m.access.clone_from(&relay.endpoint);
                cluster.relays.push(relay);
            }
        }
        Ok(cluster)
    }

    /// Starts one member per placement, each in its network namespace,
    /// and waits until each serves clients.
    ///
    /// # Errors
    /// When etcd is missing or a member does not become ready.
    pub fn start_placed(placements: Vec<Placement>) -> Result<Cluster, ClusterError> {
        let dir = tempfile::Builder::new()
            .prefix("fairlock-net-etcd-")
            .tempdir()?
            .keep();
        let members = placements
            .into_iter()
            .enumerate()
            .map(|(i, p)| Member {
                name: format!("m{i}"),
                client_url: format!("http://{}:2379", p.ip),
                peer_url: format!("http://{}:2380", p.ip),
                listen: None,
                netns: Some(p.netns),
                access: p.access,
                data: dir.join(format!("m{i}")),
                running: None,
            })
            .collect();
        Cluster::launch_all(members, dir)
    }

    /// Starts one member per entry on loopback, each listening at
    /// `listen` and advertising `(client, peer)` URLs (`http://host:port`)
    /// that relays started by the caller forward to `listen`: peers and
    /// clients then reach every member only through its relays (e.g. to
    /// add latency, `proxy.rs`).
    ///
    /// # Errors
    /// When etcd is missing or a member does not become ready.
    pub fn start_relayed(members: Vec<(Listen, String, String)>) -> Result<Cluster, ClusterError> {
        let dir = tempfile::Builder::new()
            .prefix("fairlock-relayed-etcd-")
            .tempdir()?
            .keep();
        let members = members
            .into_iter()
            .enumerate()
            .map(|(i, (listen, client_url, peer_url))| Member {
                name: format!("m{i}"),
                access: client_url.trim_start_matches("http://").into(),
                client_url,
                peer_url,
                listen: Some(listen),
                netns: None,
                data: dir.join(format!("m{i}")),
                running: None,
            })
            .collect();
        Cluster::launch_all(members, dir)
    }

    fn launch_all(members: Vec<Member>, dir: PathBuf) -> Result<Cluster, ClusterError> {
        let n = members.len();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            members,
            initial_cluster,
            dir,
            relays: Vec::new(),
        };
        // All members must be launched before any can finish starting: a new
        // cluster needs a quorum to publish its members.
        let ready: Vec<_> = (0..n)
            .map(|i| cluster.launch(i, "new"))
            .collect::<Result<_, _>>()?;
        for (i, rx) in ready.into_iter().enumerate() {
            cluster.await_ready(i, &rx)?;
        }
        Ok(cluster)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// `true` if the cluster has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Client endpoints (`127.0.0.1:port`) of every member.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Client endpoint of member `i`, as the harness reaches it.
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].access.clone()
    }

    /// Client endpoints as etcd advertises them (inside a test network,
    /// what its nodes connect to).
    pub fn member_endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| m.client_url.trim_start_matches("http://").to_string())
            .collect()
    }

    /// Process id of member `i`, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].running.as_ref().map(|r| r.pid)
    }

    /// The last lines member `i` logged (for error reports).
    pub fn log_tail(&self, i: usize) -> String {
        self.members[i]
            .running
            .as_ref()
            .map(|r| {
                let log = r.log.lock().unwrap_or_else(|e| e.into_inner());
                log.iter().cloned().collect::<Vec<_>>().join("\n")
            })
            .unwrap_or_default()
    }

    /// Which member is the leader, asking every member for its status (each
    /// with `timeout`: a paused member does not answer). `None` unless every
    /// member that answers names the same leader, and that leader answers.
    pub async fn leader(&self, timeout: Duration) -> Option<usize> {
        let all: Vec<usize> = (0..self.len()).collect();
        self.leader_among(&all, timeout).await
    }

    /// The leader among `members` (some of them cut off from the others):
    /// `None` unless every one of them that answers names the same leader,
    /// and that leader is one of them and answers.
    pub async fn leader_among(&self, members: &[usize], timeout: Duration) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leaders = Vec::new();
        for &i in members {
            if let Some((id, leader)) = member_status(&self.endpoint(i), timeout).await {
                ids.push((i, id));
                leaders.push(leader);
            }
        }
        let first = *leaders.first()?;
        if first == 0 || leaders.iter().any(|&l| l != first) {
            return None;
        }
        ids.iter().find(|&&(_, id)| id == first).map(|&(i, _)| i)
    }

    /// Waits until a leader is known (see [`Cluster::leader`]), polling the
    /// members' status; etcd has no event for "a leader was elected" that a
    /// client outside the raft group can wait on.
    ///
    /// # Errors
    /// When no leader emerges within `within`.
    pub async fn wait_leader(&self, within: Duration) -> Result<usize, ClusterError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(leader) = self.leader(Duration::from_millis(500)).await {
                return Ok(leader);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("no etcd leader within {within:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until member `i` reports that it has no leader (after the
    /// election timeout with no quorum), polling its status like
    /// [`Cluster::wait_leader`].
    ///
    /// # Errors
    /// When it still names a leader after `within`.
    pub async fn wait_no_leader(&self, i: usize, within: Duration) -> Result<(), ClusterError> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let status = member_status(&self.endpoint(i), Duration::from_millis(500)).await;
            if matches!(status, Some((_, 0))) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("member {i} still names a leader after {within:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `signal` (e.g. `libc::SIGSTOP`) to member `i`.
    ///
    /// # Errors
    /// When the member does not run or the signal cannot be sent.
    pub fn signal(&self, i: usize, signal: libc::c_int) -> Result<(), ClusterError> {
        let pid = self
            .pid(i)
            .ok_or_else(|| format!("member {i} is not running"))?;
        send_signal(pid, signal)
    }

    /// Kills member `i` with SIGKILL, keeping its data for a restart.
    ///
    /// # Errors
    /// When the member does not run or the signal cannot be sent.
    pub fn kill(&mut self, i: usize) -> Result<(), ClusterError> {
        let mut running = self.members[i]
            .running
            .take()
            .ok_or_else(|| format!("member {i} is not running"))?;
        send_signal(running.pid, libc::SIGKILL)?;
        // The wrapper reaps etcd and exits; "keep" spares the data dir.
        let _ = running.pipe.write_all(b"keep\n");
        drop(running.pipe);
        running.wrapper.wait()?;
        Ok(())
    }

    /// Starts member `i` again on its data dir and ports, and waits until
    /// it serves clients.
    ///
    /// # Errors
    /// When it runs already or does not become ready.
    pub fn restart(&mut self, i: usize) -> Result<(), ClusterError> {
        if self.members[i].running.is_some() {
            return Err(format!("member {i} is already running").into());
        }
        let rx = self.launch(i, "existing")?;
        self.await_ready(i, &rx)
    }

    /// Spawns member `i`'s wrapper; the receiver reports its readiness.
    fn launch(&mut self, i: usize, state: &str) -> Result<mpsc::Receiver<Ready>, ClusterError> {
        let bin = etcd_bin();
        let m = &self.members[i];
        let mut command = match &m.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "bash"]);
                c
            }
            None => Command::new("bash"),
        };
        let mut child = command
            .arg("-c")
            .arg(WRAPPER)
            .arg("etcd-member-wrapper")
            .args(["--name", &m.name, "--data-dir"])
            .arg(&m.data)
            .args([
                "--listen-client-urls",
                m.listen.as_ref().map_or(&m.client_url, |l| &l.client_url),
            ])
            .args(["--advertise-client-urls", &m.client_url])
            .args([
                "--listen-peer-urls",
                m.listen.as_ref().map_or(&m.peer_url, |l| &l.peer_url),
            ])
            .args(["--initial-advertise-peer-urls", &m.peer_url])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", "fairlock-faults"])
            .args(["--logger", "zap", "--log-level", "info"])
            .env("ETCD", &bin)
            .env("DATA", &m.data)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let pipe = child.stdin.take().ok_or("no wrapper stdin")?;
        let stderr = child.stderr.take().ok_or("no wrapper stderr")?;
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, rx) = mpsc::channel();
        let tail = Arc::clone(&log);
        // With FAIRLOCK_CLUSTER_LOG=DIR, every line also goes to DIR/<name>.log
        // (for reading an election after a fault run).
        let mut copy = std::env::var_os("FAIRLOCK_CLUSTER_LOG").and_then(|dir| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(std::path::Path::new(&dir).join(format!("{}.log", m.name)))
                .ok()
        });
        // Read the log until etcd says it serves clients, and keep draining
        // it afterwards so etcd never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(f) = copy.as_mut() {
                    use std::io::Write as _;
                    let _ = writeln!(f, "{line}");
                }
                if let Some(p) = line.strip_prefix("pid ") {
                    if let Ok(pid) = p.trim().parse::<u32>() {
                        let _ = tx.send(Ready::Pid(pid));
                    }
                } else if line.contains("serving client traffic")
                    || line.contains("ready to serve client requests")
                {
                    let _ = tx.send(Ready::Serving);
                }
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() >= 40 {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            let _ = tx.send(Ready::Exited);
        });
        self.members[i].running = Some(Running {
            pid: 0,
            wrapper: child,
            pipe,
            log,
        });
        Ok(rx)
    }

    fn await_ready(&mut self, i: usize, rx: &mpsc::Receiver<Ready>) -> Result<(), ClusterError> {
        loop {
            match rx.recv_timeout(READY_TIMEOUT) {
                Ok(Ready::Pid(pid)) => {
                    if let Some(r) = self.members[i].running.as_mut() {
                        r.pid = pid;
                    }
                }
                Ok(Ready::Serving) => return Ok(()),
                Ok(Ready::Exited) => {
                    return Err(format!(
                        "etcd member {i} exited before serving clients:\n{}",
                        self.log_tail(i)
                    )
                    .into());
                }
                Err(_) => {
                    return Err(format!(
                        "etcd member {i} did not report readiness within {READY_TIMEOUT:?}:\n{}",
                        self.log_tail(i)
                    )
                    .into());
                }
            }
        }
    }

    /// Stops every member (SIGCONT first, so a paused one can die) and
    /// deletes all data.
    pub fn stop(&mut self) {
        for m in &mut self.members {
            if let Some(mut r) = m.running.take() {
                let _ = send_signal(r.pid, libc::SIGCONT);
                let _ = r.pipe.write_all(b"stop\n");
                drop(r.pipe);
                let _ = r.wrapper.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

enum Ready {
    Pid(u32),
    Serving,
    Exited,
}

/// `(member id, leader id)` from one member, or `None` if it does not answer
/// within `timeout`.
async fn member_status(endpoint: &str, timeout: Duration) -> Option<(u64, u64)> {
    let options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_timeout(timeout);
    let ask = async {
        let client = Client::connect([endpoint], Some(options)).await.ok()?;
        let status = client.maintenance_client().status().await.ok()?;
        Some((status.header()?.member_id(), status.leader()))
    };
    tokio::time::timeout(timeout, ask).await.ok().flatten()
}

/// Sends `signal` to `pid`.
///
/// # Errors
/// The OS error, e.g. when the process is gone.
pub fn send_signal(pid: u32, signal: libc::c_int) -> Result<(), ClusterError> {
    let pid = libc::pid_t::try_from(pid)?;
    if pid <= 0 {
        return Err("no process id".into());
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().into())
    }
}
