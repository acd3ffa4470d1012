//! A test network of Linux network namespaces, for faults a loopback
//! interface cannot show: a node cut off while its process runs, a
//! partition with both sides alive, packet loss.
//!
//! ```text
//!   node ns "<run>-n0"        bridge ns "<run>-br"        node ns "<run>-n1"
//!   lo, eth0 10.213.0.1 ---- p0 [ br0 ] p1 ---- eth0 10.213.0.2, lo
//! ```
//! Each node is a namespace with one veth into a bridge that lives in a
//! namespace of its own, so the host's interfaces and routes are never
//! touched. The 10.213.0.0/24 addresses exist only inside these
//! namespaces; two runs at once do not meet (each has its own bridge).
//!
//! Faults: [`Net::cut`] / [`Net::heal`] set a node's bridge port down/up;
//! [`Net::partition`] drops bridge traffic between a group of nodes and the
//! others (nftables `bridge` family, forward hook), [`Net::split`] between
//! two groups only; [`Net::loss`] drops a
//! share of a node's packets on eth0 (nftables `numgen random`). Delay is
//! the relay in `proxy.rs`, run inside a node.
//!
//! Processes run in a node with [`Net::command`] (`ip netns exec`). The
//! harness itself reaches a node through [`Net::dial`], which connects from
//! a thread that has joined an observer node's namespace (nodes made with
//! [`Net::add_observer`] are never part of a partition).
//!
//! Teardown: dropping the [`Net`] kills every process left in its
//! namespaces and deletes them. A run that is killed cannot do that, so
//! [`Net::new`] first deletes namespaces of earlier runs whose process is
//! gone (names carry the creating pid: `flnet-<pid>-...`).
//!
//! Needs root, `ip` (iproute2) and `nft` (nftables): see [`Net::unavailable`].

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use super::proxy::{Dial, Proxy};

/// Names of this crate's test namespaces start with this.
pub const PREFIX: &str = "flnet-";

/// Any error of the network harness, as text.
pub type NetError = Box<dyn std::error::Error + Send + Sync>;

/// One node: a namespace with eth0 on the bridge.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    /// The namespace's name (for `ip netns exec`).
    pub ns: String,
    pub ip: Ipv4Addr,
    /// Its port on the bridge, in the bridge's namespace.
    port: String,
    /// Never part of a partition (the harness's own view into the net).
    observer: bool,
}

/// A running test network (see the module docs).
pub struct Net {
    run: String,
    bridge: String,
    nodes: Vec<Node>,
}

/// Runs `ip`/`nft` style commands; an error carries their stderr.
fn sh(program: &str, args: &[&str], stdin: Option<&str>) -> Result<Output, NetError> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(out)
}

fn ip(args: &[&str]) -> Result<(), NetError> {
    sh("ip", args, None).map(drop)
}

/// Runs an nftables script in namespace `ns`.
fn nft(ns: &str, script: &str) -> Result<(), NetError> {
    sh("ip", &["netns", "exec", ns, "nft", "-f", "-"], Some(script)).map(drop)
}

impl Net {
    /// Why this machine cannot build a test network, or `None` if it can.
    pub fn unavailable() -> Option<String> {
        // SAFETY: geteuid has no preconditions and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            return Some("network namespaces need root (CI runs as root)".into());
        }
        for (tool, package) in [("ip", "iproute2"), ("nft", "nftables")] {
            let ok = Command::new(tool)
                .arg("-V")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                return Some(format!(
                    "`{tool}` not found: apt-get install {package} (scripts/test.sh does)"
                ));
            }
        }
        None
    }

    /// Deletes stale namespaces of killed runs, then creates the bridge.
    ///
    /// # Errors
    /// When a namespace, link or address cannot be made.
    pub fn new() -> Result<Net, NetError> {
        sweep_stale();
        let run = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        );
        let bridge = format!("{run}-br");
        let net = Net {
            run,
            bridge: bridge.clone(),
            nodes: Vec::new(),
        };
        ip(&["netns", "add", &bridge])?;
        ip(&["-n", &bridge, "link", "set", "lo", "up"])?;
        ip(&["-n", &bridge, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &bridge, "link", "set", "br0", "up"])?;
        Ok(net)
    }

    /// Adds a node; returns its index.
    ///
    /// # Errors
    /// When its namespace or link cannot be made.
    pub fn add_node(&mut self, name: &str) -> Result<usize, NetError> {
        self.add(name, false)
    }

    /// Adds a node that partitions leave alone (see the module docs).
    ///
    /// # Errors
    /// When its namespace or link cannot be made.
    pub fn add_observer(&mut self, name: &str) -> Result<usize, NetError> {
        self.add(name, true)
    }

    fn add(&mut self, name: &str, observer: bool) -> Result<usize, NetError> {
        let i = self.nodes.len();
        let last = u8::try_from(i + 1)
            .ok()
            .filter(|&n| n < 255)
            .ok_or("at most 254 nodes")?;
        let node = Node {
            name: name.into(),
            ns: format!("{}-{name}", self.run),
            ip: Ipv4Addr::new(10, 213, 0, last),
            port: format!("p{i}"),
            observer,
        };
        // Registered first: a half-made node is still deleted on drop.
        self.nodes.push(node.clone());
        let (ns, port) = (node.ns.as_str(), node.port.as_str());
        ip(&["netns", "add", ns])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&[
            "-n",
            &self.bridge,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            ns,
        ])?;
        ip(&["-n", &self.bridge, "link", "set", port, "master", "br0"])?;
        ip(&["-n", &self.bridge, "link", "set", port, "up"])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/24", node.ip),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        Ok(i)
    }

    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// Cuts node `i` off from every other node (its bridge port goes down;
    /// its processes keep running).
    ///
    /// # Errors
    /// When `ip` fails.
    pub fn cut(&self, i: usize) -> Result<(), NetError> {
        ip(&[
            "-n",
            &self.bridge,
            "link",
            "set",
            &self.nodes[i].port,
            "down",
        ])
    }

    /// Undoes [`Net::cut`].
    ///
    /// # Errors
    /// When `ip` fails.
    pub fn heal(&self, i: usize) -> Result<(), NetError> {
        ip(&["-n", &self.bridge, "link", "set", &self.nodes[i].port, "up"])
    }

    /// Cuts the nodes in `group` off from every other node except the
    /// observers; each side still reaches its own members. One partition
    /// at a time; [`Net::heal_partition`] ends it.
    ///
    /// # Errors
    /// When nft fails or a side is empty.
    pub fn partition(&self, group: &[usize]) -> Result<(), NetError> {
        let others: Vec<usize> = (0..self.nodes.len())
            .filter(|i| !self.nodes[*i].observer && !group.contains(i))
            .collect();
        self.split(group, &others)
    }

    /// Drops bridge traffic between the nodes in `a` and those in `b`;
    /// either side still reaches every node in neither (a master cut off
    /// from its replica and sentinels but not from its clients). One
    /// partition or split at a time; [`Net::heal_partition`] ends it.
    ///
    /// # Errors
    /// When nft fails or a side is empty.
    pub fn split(&self, a: &[usize], b: &[usize]) -> Result<(), NetError> {
        let set = |side: &[usize]| {
            side.iter()
                .filter(|&&i| !self.nodes[i].observer)
                .map(|&i| format!("\"{}\"", self.nodes[i].port))
                .collect::<Vec<_>>()
        };
        let (a, b) = (set(a), set(b));
        if a.is_empty() || b.is_empty() {
            return Err("a partition needs nodes on both sides".into());
        }
        let (a, b) = (a.join(", "), b.join(", "));
        // The chain is not called `fwd`: that is an nft keyword.
        nft(
            &self.bridge,
            &format!(
                "table bridge partition {{\n\
                 chain split {{\n\
                 type filter hook forward priority 0; policy accept;\n\
                 iifname {{ {a} }} oifname {{ {b} }} drop\n\
                 iifname {{ {b} }} oifname {{ {a} }} drop\n\
                 }}\n}}\n"
            ),
        )
    }

    /// Ends the partition.
    ///
    /// # Errors
    /// When there is none or nft fails.
    pub fn heal_partition(&self) -> Result<(), NetError> {
        nft(&self.bridge, "delete table bridge partition\n")
    }

    /// Drops `percent` (1-99) of node `i`'s packets on eth0, both ways.
    ///
    /// # Errors
    /// When nft fails or `percent` is out of range.
    pub fn loss(&self, i: usize, percent: u8) -> Result<(), NetError> {
        if !(1..=99).contains(&percent) {
            return Err(format!("loss {percent}% is not in 1-99").into());
        }
        nft(
            &self.nodes[i].ns,
            &format!(
                "table inet loss {{\n\
                 chain incoming {{\n\
                 type filter hook input priority 0; policy accept;\n\
                 iifname \"eth0\" numgen random mod 100 < {percent} drop\n\
                 }}\n\
                 chain outgoing {{\n\
                 type filter hook output priority 0; policy accept;\n\
                 oifname \"eth0\" numgen random mod 100 < {percent} drop\n\
                 }}\n}}\n"
            ),
        )
    }

    /// Ends [`Net::loss`] on node `i`.
    ///
    /// # Errors
    /// When there is none or nft fails.
    pub fn clear_loss(&self, i: usize) -> Result<(), NetError> {
        nft(&self.nodes[i].ns, "delete table inet loss\n")
    }

    /// `program` to run inside node `i` (`ip netns exec <ns> <program>`;
    /// `ip` execs it, so the child's pid is the program's).
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.nodes[i].ns]).arg(program);
        c
    }

    /// Runs `program args` inside node `i` and returns its stdout.
    ///
    /// # Errors
    /// When it cannot run or exits non-zero.
    pub fn run(&self, i: usize, program: &str, args: &[&str]) -> Result<String, NetError> {
        let mut all = vec!["netns", "exec", self.nodes[i].ns.as_str(), program];
        all.extend_from_slice(args);
        let out = sh("ip", &all, None)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A TCP connection to `to`, opened from inside node `from`'s namespace
    /// (by a thread that joins it; the socket stays in that namespace).
    ///
    /// # Errors
    /// When the namespace cannot be joined or the connection fails.
    pub async fn dial(&self, from: usize, to: SocketAddr) -> io::Result<tokio::net::TcpStream> {
        dial_in(self.nodes[from].ns.clone(), to).await
    }

    /// A relay on the host's loopback (`127.0.0.1:<any>`) to `to`, dialled
    /// from node `from`: how the harness reaches a node.
    ///
    /// # Errors
    /// When the listener cannot be bound.
    pub async fn gateway(&self, from: usize, to: SocketAddr) -> io::Result<Proxy> {
        let ns = self.nodes[from].ns.clone();
        let dial: Dial = Arc::new(move || Box::pin(dial_in(ns.clone(), to)));
        Proxy::start_with(SocketAddr::from(([127, 0, 0, 1], 0)), dial).await
    }

    /// Namespace names of this network (bridge first).
    pub fn namespaces(&self) -> Vec<String> {
        std::iter::once(self.bridge.clone())
            .chain(self.nodes.iter().map(|n| n.ns.clone()))
            .collect()
    }
}

/// Connects to `to` from a thread inside namespace `ns`.
async fn dial_in(ns: String, to: SocketAddr) -> io::Result<tokio::net::TcpStream> {
    let stream = tokio::task::spawn_blocking(move || {
        let file = std::fs::File::open(format!("/run/netns/{ns}"))?;
        // setns(2) changes only this (blocking-pool) thread's namespace,
        // which is restored before the thread goes back to the pool.
        let home = std::fs::File::open("/proc/self/ns/net")?;
        enter(&file)?;
        let stream = std::net::TcpStream::connect_timeout(&to, std::time::Duration::from_secs(2));
        enter(&home)?;
        let stream = stream?;
        stream.set_nonblocking(true)?;
        Ok::<_, io::Error>(stream)
    })
    .await
    .map_err(io::Error::other)??;
    tokio::net::TcpStream::from_std(stream)
}

/// Moves the calling thread into the network namespace `file` refers to.
fn enter(file: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: setns(2) takes a valid fd we own for the call's duration.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Kills what runs in namespace `ns` and deletes it.
fn delete(ns: &str) {
    if let Ok(out) = sh("ip", &["netns", "pids", ns], None) {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<libc::pid_t>() {
                // SAFETY: kill(2) takes plain integers.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    let _ = ip(&["netns", "del", ns]);
}

/// Deletes `flnet-<pid>-...` namespaces whose creating process is gone.
fn sweep_stale() {
    let Ok(out) = sh("ip", &["netns", "list"], None) else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or_default();
        if pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            delete(name);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Nodes first, so no process is left talking into a dead bridge.
        for n in self.nodes.iter().rev() {
            delete(&n.ns);
        }
        delete(&self.bridge);
    }
}
