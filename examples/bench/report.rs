//! The report: one row per measurement, printed as a table or JSON lines.

use crate::server::Metrics;
use crate::workloads::Run;

/// One line of the report.
pub struct Row {
    pub name: String,
    pub mode: &'static str,
    pub clients: usize,
    pub keys: usize,
    pub ops: usize,
    pub ops_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub ratio: Option<f64>,
    pub ratio_of: &'static str,
    pub writes_per_op: Option<f64>,
    pub requests_per_op: Option<f64>,
    /// etcd CPU time per op, in microseconds (when the bench started etcd).
    pub cpu_us_per_op: Option<f64>,
}

impl Row {
    pub fn of(name: &str, mode: &'static str, clients: usize, keys: usize, run: &Run) -> Row {
        Row {
            name: name.into(),
            mode,
            clients,
            keys,
            ops: run.ops(),
            ops_per_s: run.per_s(),
            p50_us: run.pct_us(0.5),
            p99_us: run.pct_us(0.99),
            ratio: None,
            ratio_of: "",
            writes_per_op: None,
            requests_per_op: None,
            cpu_us_per_op: None,
        }
    }
    pub fn ratio(mut self, r: f64, of: &'static str) -> Row {
        self.ratio = Some(r);
        self.ratio_of = of;
        self
    }
    pub fn cost(mut self, before: &Metrics, after: &Metrics, ops: usize) -> Row {
        let n = ops.max(1) as f64;
        self.writes_per_op = Some((after.writes() - before.writes()) / n);
        self.requests_per_op = Some((after.requests() - before.requests()) / n);
        self
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn print(rows: &[Row], json: bool) {
    if json {
        for r in rows {
            let opt = |v: Option<f64>| v.map_or("null".to_string(), |x| format!("{x:.3}"));
            println!(
                "{{\"name\":{:?},\"mode\":{:?},\"clients\":{},\"keys\":{},\"ops\":{},\"ops_per_s\":{:.1},\
                 \"p50_us\":{},\"p99_us\":{},\"ratio\":{},\"ratio_of\":{:?},\"writes_per_op\":{},\"requests_per_op\":{},\"etcd_cpu_us_per_op\":{}}}",
                r.name,
                r.mode,
                r.clients,
                r.keys,
                r.ops,
                r.ops_per_s,
                r.p50_us,
                r.p99_us,
                opt(r.ratio),
                r.ratio_of,
                opt(r.writes_per_op),
                opt(r.requests_per_op),
                opt(r.cpu_us_per_op)
            );
        }
        return;
    }
    println!(
        "{:<48} {:<6} {:>4} {:>5} {:>7} {:>9} {:>7} {:>8} {:>7} {:>7} {:>7}  ratio",
        "what",
        "mode",
        "cli",
        "keys",
        "ops",
        "ops/s",
        "p50us",
        "p99us",
        "wr/op",
        "req/op",
        "cpu/op"
    );
    for r in rows {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
        println!(
            "{:<48} {:<6} {:>4} {:>5} {:>7} {:>9.0} {:>7} {:>8} {:>7} {:>7} {:>7}  {}",
            r.name,
            r.mode,
            r.clients,
            r.keys,
            r.ops,
            r.ops_per_s,
            r.p50_us,
            r.p99_us,
            opt(r.writes_per_op),
            opt(r.requests_per_op),
            r.cpu_us_per_op
                .map_or("-".to_string(), |x| format!("{x:.0}")),
            r.ratio
                .map_or(String::new(), |x| format!("{x:.2} {}", r.ratio_of))
        );
    }
}

/// The ops/s of the row named `name` in `mode` with `clients` clients.
pub fn ops_of(rows: &[Row], name: &str, mode: &str, clients: usize) -> f64 {
    rows.iter()
        .find(|r| r.name == name && r.mode == mode && r.clients == clients)
        .map_or(0.0, |r| r.ops_per_s)
}
