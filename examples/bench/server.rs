//! The etcd the benchmark runs against, and its `/metrics` counters.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// An etcd started by the benchmark (killed and removed on drop).
pub struct OwnEtcd {
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for OwnEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts a single-member etcd (data on disk, like the figures in
/// DESIGN.md) and returns it with its client endpoint.
pub fn start_etcd() -> Result<(OwnEtcd, String), String> {
    let bin = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
    let (client, peer) = (
        free_port().map_err(|e| e.to_string())?,
        free_port().map_err(|e| e.to_string())?,
    );
    let dir =
        std::env::temp_dir().join(format!("fairlock-bench-{}", uuid::Uuid::new_v4().simple()));
    let (curl, purl) = (
        format!("http://127.0.0.1:{client}"),
        format!("http://127.0.0.1:{peer}"),
    );
    let mut child = Command::new(&bin)
        .args(["--name", "bench", "--data-dir"])
        .arg(dir.join("data"))
        .args([
            "--listen-client-urls",
            &curl,
            "--advertise-client-urls",
            &curl,
        ])
        .args([
            "--listen-peer-urls",
            &purl,
            "--initial-advertise-peer-urls",
            &purl,
        ])
        .args(["--initial-cluster", &format!("bench={purl}")])
        .args(["--logger", "zap", "--log-level", "info"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("cannot start `{bin}` ({e}); install etcd-server or pass --endpoints")
        })?;
    let stderr = BufReader::new(child.stderr.take().ok_or("no stderr")?);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("serving client traffic") || line.contains("ready to serve client") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .map_err(|_| "etcd did not start within 60 s".to_string())?;
    Ok((OwnEtcd { child, dir }, format!("127.0.0.1:{client}")))
}

/// Counters from etcd's `/metrics` (plain HTTP on the client port).
#[derive(Clone, Debug, Default)]
pub struct Metrics(HashMap<String, f64>);

impl Metrics {
    pub fn scrape(endpoint: &str) -> Result<Metrics, String> {
        let host = endpoint.trim_start_matches("http://");
        let mut s = TcpStream::connect(host).map_err(|e| format!("/metrics: {e}"))?;
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n").map_err(|e| e.to_string())?;
        let mut body = String::new();
        s.read_to_string(&mut body).map_err(|e| e.to_string())?;
        let mut m = HashMap::new();
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            if let Some((name, value)) = line.rsplit_once(' ')
                && let Ok(v) = value.parse::<f64>()
            {
                m.insert(name.to_string(), v);
            }
        }
        Ok(Metrics(m))
    }

    /// Raft proposals committed: every etcd write.
    pub fn writes(&self) -> f64 {
        self.sum(|k| k == "etcd_server_proposals_committed_total")
    }

    /// Requests clients sent: unary calls handled plus messages received on
    /// watch and keepalive streams.
    pub fn requests(&self) -> f64 {
        self.sum(|k| {
            (k.starts_with("grpc_server_handled_total{")
                && !k.contains("grpc_type=\"bidi_stream\""))
                || (k.starts_with("grpc_server_msg_received_total{")
                    && k.contains("grpc_type=\"bidi_stream\""))
        })
    }

    fn sum(&self, pick: impl Fn(&str) -> bool) -> f64 {
        self.0.iter().filter(|(k, _)| pick(k)).map(|(_, v)| v).sum()
    }
}
