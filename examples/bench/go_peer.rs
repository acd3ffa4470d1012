//! The Go peer: etcd's own `concurrency.Mutex` (`go-peer/main.go`), built
//! offline by `scripts/build-go-peer.sh`, run as a child process.

use std::process::Command;

use crate::report::Row;
use crate::workloads::Res;

/// Builds (or finds) the Go peer binary: etcd's own
/// `concurrency.Mutex`, built from `examples/bench/go-peer` by
/// `scripts/build-go-peer.sh`, or named by `FAIRLOCK_GO_PEER`.
pub fn build_go_peer() -> Option<String> {
    build(
        "FAIRLOCK_GO_PEER",
        "the Go peer (etcd's concurrency.Mutex)",
        &["scripts/build-go-peer.sh"],
    )
}

/// Builds (or finds) Go peer `name` of `examples/` (`what` it is, for the
/// messages): built by `scripts/build-example-go.sh`, or named by the
/// environment variable `var`.
pub fn build_example_go(var: &str, name: &str, what: &str) -> Option<String> {
    build(var, what, &["scripts/build-example-go.sh", name])
}

/// Runs the build script and arguments `script` (relative to the crate),
/// unless `var` names a binary; the binary's path is the script's last
/// line of output.
fn build(var: &str, what: &str, script: &[&str]) -> Option<String> {
    if let Ok(bin) = std::env::var(var) {
        return Some(bin);
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(script[0]);
    eprintln!("bench: building {what}...");
    let out = Command::new("bash")
        .arg(&path)
        .args(&script[1..])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "bench: {what}: build failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(str::to_string)
}

pub struct GoRun {
    pub ops: usize,
    pub ops_per_s: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub mode: String,
}

impl GoRun {
    pub fn named(&self, name: &str, clients: usize) -> Row {
        Row {
            name: name.into(),
            mode: "fair",
            clients,
            keys: if self.mode == "keys" { clients } else { 1 },
            ops: self.ops,
            ops_per_s: self.ops_per_s,
            p50_us: self.p50_us,
            p99_us: self.p99_us,
            ratio: None,
            ratio_of: "",
            writes_per_op: None,
            requests_per_op: None,
            cpu_us_per_op: None,
        }
    }
}

/// Runs the Go peer with `args` and reads the `key=value` fields of its
/// one output line.
fn run_peer(bin: &str, ep: &str, args: &[&str]) -> Res<impl Fn(&str) -> Res<f64> + use<>> {
    let out = Command::new(bin)
        .args(["-endpoints", ep])
        .args(args)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    Ok(move |k: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| format!("Go peer output lacks {k}: {text} {stderr}").into())
    })
}

pub fn go_run(bin: &str, ep: &str, mode: &str, clients: usize, n: usize) -> Res<GoRun> {
    let (clients, n) = (clients.to_string(), n.to_string());
    let field = run_peer(bin, ep, &["-mode", mode, "-clients", &clients, "-n", &n])?;
    Ok(GoRun {
        ops: field("ops")? as usize,
        ops_per_s: field("ops_per_s")?,
        p50_us: field("p50_us")? as u64,
        p99_us: field("p99_us")? as u64,
        mode: mode.into(),
    })
}

/// The Go peer's soak (16 own keys + 4 clients on one key) for `secs`:
/// cycles/s in the first and the last `window`, and the cycles in all.
pub fn go_soak(bin: &str, ep: &str, secs: u64, window: u64) -> Res<(f64, f64, f64)> {
    let (secs, window) = (format!("{secs}s"), format!("{window}s"));
    let field = run_peer(
        bin,
        ep,
        &[
            "-mode",
            "soak",
            "-clients",
            "16",
            "-contended",
            "4",
            "-duration",
            &secs,
            "-window",
            &window,
        ],
    )?;
    Ok((field("first_per_s")?, field("last_per_s")?, field("ops")?))
}
