//! What the scale curves (`scale.rs`) drive and read: the child processes
//! (`scale_child.rs`) and the server's memory, database and CPU.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::scale_child::rss_bytes;
use crate::server::Metrics;
use crate::workloads::Res;

/// How long a child may take to answer (taking 100,000 keys included).
const ANSWER: Duration = Duration::from_secs(600);

/// One child process of a curve.
pub struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    pid: u32,
    /// Its resident memory once connected, before any lock.
    pub base: f64,
}

impl Proc {
    /// Starts `bench --scale-child mode endpoint prefix n` and waits for
    /// its base memory.
    pub async fn start(mode: &str, endpoint: &str, prefix: &str, n: usize) -> Res<Proc> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--scale-child", mode, endpoint, prefix, &n.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().ok_or("child gone")?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut p = Proc {
            child,
            stdin,
            stdout,
            pid,
            base: 0.0,
        };
        p.base = p.answer("BASE").await?;
        Ok(p)
    }

    /// The number on the next line that starts with `word`.
    pub async fn answer(&mut self, word: &str) -> Res<f64> {
        let line = tokio::time::timeout(ANSWER, self.stdout.next_line())
            .await
            .map_err(|_| format!("child {}: no {word} in {ANSWER:?}", self.pid))??
            .ok_or_else(|| format!("child {} ended before {word}", self.pid))?;
        let value = line
            .strip_prefix(word)
            .ok_or_else(|| format!("child {}: {line:?}, expected {word}", self.pid))?
            .trim();
        Ok(if value.is_empty() {
            0.0
        } else {
            value.parse()?
        })
    }

    /// Sends one command line.
    pub async fn send(&mut self, command: &str) -> Res<()> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        stdin.write_all(format!("{command}\n").as_bytes()).await?;
        Ok(stdin.flush().await?)
    }

    /// Its grants so far (queue children).
    pub async fn count(&mut self) -> Res<f64> {
        self.send("count").await?;
        self.answer("COUNT").await
    }

    /// Its resident memory now.
    pub fn rss(&self) -> f64 {
        rss_bytes(self.pid)
    }

    /// An error if it has exited (a child ends only when told to, or on
    /// an error it printed).
    pub fn check_alive(&mut self) -> Res<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(format!("child {} exited early: {status}", self.pid).into()),
        }
    }

    /// Its CPU time so far, in seconds.
    pub fn cpu(&self) -> f64 {
        cpu_secs(self.pid)
    }

    /// Ends its input and waits for it to close its locker and exit.
    pub async fn finish(mut self) -> Res<()> {
        drop(self.stdin.take());
        match tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await {
            Ok(status) if status.as_ref().is_ok_and(|s| s.success()) => Ok(()),
            Ok(status) => Err(format!("child {} failed: {status:?}", self.pid).into()),
            Err(_) => Err(format!("child {} did not exit in 60 s", self.pid).into()),
        }
    }
}

/// The sum of every child's answer to `count`.
pub async fn total_count(procs: &mut [Proc]) -> Res<f64> {
    let mut sum = 0.0;
    for p in procs.iter_mut() {
        sum += p.count().await?;
    }
    Ok(sum)
}

/// The CPU time of every child so far, in seconds.
pub fn total_cpu(procs: &[Proc]) -> f64 {
    procs.iter().map(Proc::cpu).sum()
}

/// Ends every child.
pub async fn finish_all(procs: Vec<Proc>) -> Res<()> {
    for p in procs {
        p.finish().await?;
    }
    Ok(())
}

/// CPU time (user + system) of process `pid`, in seconds.
pub fn cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command's closing parenthesis; utime and stime
    // are the 12th and 13th of them, in clock ticks.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// The server of a curve: its process, and what it says of itself.
pub enum Server {
    Etcd { endpoint: String, pid: u32 },
    Redis { url: String, pid: u32 },
}

impl Server {
    pub fn endpoint(&self) -> &str {
        match self {
            Server::Etcd { endpoint, .. } => endpoint,
            Server::Redis { url, .. } => url,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Server::Etcd { .. } => "etcd",
            Server::Redis { .. } => "Redis",
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            Server::Etcd { pid, .. } | Server::Redis { pid, .. } => *pid,
        }
    }

    /// Its resident memory, in bytes.
    pub fn rss(&self) -> f64 {
        rss_bytes(self.pid())
    }

    /// etcd's database file size, or Redis's `used_memory`, in bytes.
    pub async fn data_bytes(&self) -> Res<f64> {
        match self {
            Server::Etcd { endpoint, .. } => Ok(Metrics::scrape(endpoint)?
                .get("etcd_mvcc_db_total_size_in_bytes")
                .unwrap_or(0.0)),
            Server::Redis { url, .. } => {
                let info = self.redis_info(url, "memory").await?;
                Ok(info_field(&info, "used_memory").unwrap_or(0.0))
            }
        }
    }

    /// How many lease renewals the server has received so far: etcd's
    /// keepalive messages, or Redis's commands (a Redis lock is renewed
    /// with a command per key).
    pub async fn renewals(&self) -> Res<f64> {
        match self {
            Server::Etcd { endpoint, .. } => Ok(Metrics::scrape(endpoint)?.sum_of(|k| {
                k.starts_with("grpc_server_msg_received_total{")
                    && k.contains("grpc_method=\"LeaseKeepAlive\"")
            })),
            Server::Redis { url, .. } => {
                let info = self.redis_info(url, "stats").await?;
                Ok(info_field(&info, "total_commands_processed").unwrap_or(0.0))
            }
        }
    }

    /// Waits `window` and says what the server did meanwhile: renewals
    /// per second (see [`Server::renewals`]) and its CPU, in percent of a
    /// core.
    pub async fn renewal_window(&self, window: Duration) -> Res<(f64, f64)> {
        let (r0, cpu0, t0) = (
            self.renewals().await?,
            cpu_secs(self.pid()),
            std::time::Instant::now(),
        );
        tokio::time::sleep(window).await;
        let secs = t0.elapsed().as_secs_f64();
        let renewals = self.renewals().await? - r0;
        let cpu = cpu_secs(self.pid()) - cpu0;
        Ok((renewals / secs, cpu / secs * 100.0))
    }

    /// How many keys wait in the fair queue of key `q` under `prefix`.
    pub async fn queued(&self, prefix: &str) -> Res<usize> {
        match self {
            Server::Etcd { endpoint, .. } => {
                let c = crate::workloads::connect(endpoint).await?;
                crate::workloads::count(&c, &format!("{prefix}q/_OWNERS_/")).await
            }
            Server::Redis { url, .. } => {
                let mut c = redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?;
                let n: usize = redis::cmd("ZCARD")
                    .arg(format!("{prefix}q/_OWNERS_/queue"))
                    .query_async(&mut c)
                    .await?;
                Ok(n)
            }
        }
    }

    async fn redis_info(&self, url: &str, section: &str) -> Res<String> {
        let mut c = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(redis::cmd("INFO").arg(section).query_async(&mut c).await?)
    }
}

fn info_field(info: &str, name: &str) -> Option<f64> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}
