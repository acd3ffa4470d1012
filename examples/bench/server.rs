//! etcd's `/metrics` counters. (The benchmark's own etcd comes from the
//! tests' launcher, `tests/support`.)

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;

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

    /// The server's version (`etcd_server_version{server_version="3.5.16"}`).
    pub fn version(&self) -> Option<&str> {
        self.0.keys().find_map(|k| {
            k.strip_prefix("etcd_server_version{server_version=\"")?
                .strip_suffix("\"}")
        })
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

    /// One sample, by its name with labels.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.0.get(name).copied()
    }

    /// The sum of the samples `pick` chooses, by name with labels.
    pub fn sum_of(&self, pick: impl Fn(&str) -> bool) -> f64 {
        self.sum(pick)
    }

    fn sum(&self, pick: impl Fn(&str) -> bool) -> f64 {
        self.0.iter().filter(|(k, _)| pick(k)).map(|(_, v)| v).sum()
    }
}
