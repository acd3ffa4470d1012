//! Several keys at once: 16 clients, each with its own locker (its own
//! connection and session lease), looping for a fixed window after a
//! warm-up; each step takes 2 distinct keys of 8, holds them and releases
//! them. Against one etcd, in one run:
//!
//! - **`lock_all`**, fair and unfair: both keys in one call;
//! - **sorted one-by-one**, fair and unfair: `lock` of each key in sorted
//!   order, holding the first while waiting for the second (what callers
//!   do without `lock_all`);
//! - **Go**: etcd's own `concurrency.Mutex`, one key after the other in
//!   sorted order (`examples/multimutex-go`, built by
//!   `scripts/build-example-go.sh multimutex-go` or named by `FAIRLOCK_MULTIMUTEX_GO`);
//! - **floor**: as `shared_rows.rs` defines it, a put then a delete, each
//!   client on a key of its own.
//!
//! Client `c` draws its pairs from a xorshift64 seeded with `c` (the Go
//! peer draws the same), so every row sees the same sequence of pairs.
//! The wait is the time to holding both keys. Grants count from the end of
//! the warm-up to the end of the window; the etcd revision is read with a
//! plain Get at both ends, and wr/op is that delta per grant. Each key's
//! holder count is raised after a grant and lowered before the release:
//! a count above 1 is an exclusion violation (must be 0).

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, LockGuard, Locker, MultiGuard};

use crate::report::Row;
use crate::workloads::{self, Res, Run};

const CLIENTS: usize = 16;
/// Keys per row; each step takes 2 of them.
const KEYS: usize = 8;

/// Client `c`'s pairs: xorshift64 seeded with `c` (`multimutex-go` has the
/// same).
struct Pairs(u64);

impl Pairs {
    fn new(client: usize) -> Pairs {
        Pairs(0x9E37_79B9_7F4A_7C15_u64.wrapping_mul(client as u64 + 1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Two distinct keys of [`KEYS`], in the order drawn.
    fn pair(&mut self) -> (usize, usize) {
        let a = (self.next() % KEYS as u64) as usize;
        let b = (self.next() % (KEYS as u64 - 1)) as usize;
        (a, if b >= a { b + 1 } else { b })
    }
}

/// Where a run is (it starts at 0, warming up).
const MEASURING: u8 = 1;
const STOPPED: u8 = 2;

/// What the clients of one run share.
#[derive(Default)]
struct Board {
    phase: AtomicU8,
    grants: AtomicUsize,
    holders: [AtomicUsize; KEYS],
    violations: AtomicUsize,
}

impl Board {
    fn enter(&self, keys: &[usize]) {
        for &k in keys {
            if self.holders[k].fetch_add(1, Ordering::SeqCst) != 0 {
                self.violations.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    fn leave(&self, keys: &[usize]) {
        for &k in keys {
            self.holders[k].fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// How a row takes its two keys.
#[derive(Clone, Copy)]
enum How {
    All,
    Sorted,
    /// The floor: a put, then a delete, of the client's own key.
    PutDelete,
}

enum Held {
    All(MultiGuard),
    /// The first key's guard, then the second's.
    Sorted(Box<(LockGuard, LockGuard)>),
    Put,
}

/// A locker, or a raw connection with a key of its own (the floor).
enum Client {
    Locker(EtcdLocker),
    Raw(Box<etcd_client::Client>, String),
}

impl Client {
    async fn acquire(&self, how: How, (a, b): (usize, usize)) -> Res<Held> {
        let ctx = Context::background();
        let key = |i: usize| Key::from(format!("k{i}"));
        Ok(match (how, self) {
            (How::All, Client::Locker(l)) => Held::All(l.lock_all(&ctx, &[key(a), key(b)]).await?),
            (_, Client::Locker(l)) => {
                let first = l.lock(&ctx, &key(a.min(b))).await?;
                Held::Sorted(Box::new((first, l.lock(&ctx, &key(a.max(b))).await?)))
            }
            (_, Client::Raw(c, own)) => {
                (**c).clone().put(own.as_str(), "x", None).await?;
                Held::Put
            }
        })
    }

    async fn release(&self, held: Held) -> Res<()> {
        match (held, self) {
            (Held::All(g), _) => g.unlock().await?,
            (Held::Sorted(both), _) => {
                let (first, second) = *both;
                second.unlock().await?;
                first.unlock().await?;
            }
            (Held::Put, Client::Raw(c, own)) => {
                (**c).clone().delete(own.as_str(), None).await?;
            }
            (Held::Put, Client::Locker(_)) => return Err("a put from a locker client".into()),
        }
        Ok(())
    }
}

/// What a window measured.
struct Window {
    grants: usize,
    secs: f64,
    revisions: i64,
    lat: Vec<Duration>,
    /// p50 and p99 in microseconds, when only those came back (Go).
    percentiles: Option<(u64, u64)>,
    violations: usize,
}

impl Window {
    fn per_s(&self) -> f64 {
        self.grants as f64 / self.secs
    }
    fn revisions_per_grant(&self) -> f64 {
        self.revisions as f64 / self.grants.max(1) as f64
    }
    fn row(&self, name: &str, mode: &'static str, keys: usize) -> Row {
        let run = Run {
            lat: self.lat.clone(),
            elapsed: Duration::from_secs_f64(self.secs),
        };
        let mut row = Row::of(name, mode, CLIENTS, keys, &run);
        row.ops = self.grants;
        row.ops_per_s = self.per_s();
        if let Some((p50, p99)) = self.percentiles {
            (row.p50_us, row.p99_us) = (p50, p99);
        }
        row.writes_per_op = Some(self.revisions_per_grant());
        row
    }
}

async fn revision(c: &etcd_client::Client) -> Res<i64> {
    let resp = c.clone().get("/bench/revision", None).await?;
    Ok(resp.header().map_or(0, |h| h.revision()))
}

/// 16 clients (lockers in `fair` mode under a fresh prefix, or raw
/// connections for the floor) running `how` for `warmup`, then `dur`.
async fn window(ep: &str, how: How, fair: bool, warmup: Duration, dur: Duration) -> Res<Window> {
    let prefix = format!("/bench/multi-{}/", uuid::Uuid::new_v4().simple());
    let board = Arc::new(Board::default());
    let start = Arc::new(tokio::sync::Barrier::new(CLIENTS + 1));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = match how {
            How::PutDelete => Client::Raw(
                Box::new(workloads::connect(ep).await?),
                format!("{prefix}own{c}"),
            ),
            _ => {
                let config = EtcdConfig::new([ep]).with_prefix(prefix.clone());
                Client::Locker(EtcdLocker::connect(config, fair).await?)
            }
        };
        let (board, start) = (Arc::clone(&board), Arc::clone(&start));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let (mut pairs, mut lat) = (Pairs::new(c), Vec::new());
            while board.phase.load(Ordering::SeqCst) != STOPPED {
                let pair = pairs.pair();
                let both = [pair.0, pair.1];
                let keys: &[usize] = match how {
                    How::PutDelete => &[],
                    _ => &both,
                };
                let t = Instant::now();
                let held = client.acquire(how, pair).await?;
                let took = t.elapsed();
                board.enter(keys);
                if board.phase.load(Ordering::SeqCst) == MEASURING {
                    board.grants.fetch_add(1, Ordering::SeqCst);
                    lat.push(took);
                }
                board.leave(keys);
                client.release(held).await?;
            }
            if let Client::Locker(l) = client {
                l.close().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(lat)
        }));
    }
    let c = workloads::connect(ep).await?;
    start.wait().await;
    tokio::time::sleep(warmup).await;
    let rev0 = revision(&c).await?;
    let t0 = Instant::now();
    board.phase.store(MEASURING, Ordering::SeqCst);
    tokio::time::sleep(dur).await;
    board.phase.store(STOPPED, Ordering::SeqCst);
    let secs = t0.elapsed().as_secs_f64();
    let rev1 = revision(&c).await?;
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    Ok(Window {
        grants: board.grants.load(Ordering::SeqCst),
        secs,
        revisions: rev1 - rev0,
        lat,
        percentiles: None,
        violations: board.violations.load(Ordering::SeqCst),
    })
}

/// Builds (or finds) the Go peer: etcd's `concurrency.Mutex`, one key
/// after the other.
fn build_multimutex_go() -> Option<String> {
    crate::go_peer::build_example_go(
        "FAIRLOCK_MULTIMUTEX_GO",
        "multimutex-go",
        "the Go multi-key peer (etcd's concurrency.Mutex)",
    )
}

/// Runs the Go peer for the same warm-up and window.
fn go_window(bin: &str, ep: &str, warmup: Duration, dur: Duration) -> Res<Window> {
    let out = Command::new(bin)
        .args(["-endpoints", ep, "-clients", &CLIENTS.to_string()])
        .args(["-keys", &KEYS.to_string()])
        .args(["-warmup", &format!("{}ms", warmup.as_millis())])
        .args(["-duration", &format!("{}ms", dur.as_millis())])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |k: &str| -> Res<f64> {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| {
                let err = String::from_utf8_lossy(&out.stderr);
                format!("Go multi-key peer output lacks {k}: {text} {err}").into()
            })
    };
    Ok(Window {
        grants: field("grants")? as usize,
        secs: field("secs")?,
        revisions: (field("rev1")? - field("rev0")?) as i64,
        lat: Vec::new(),
        percentiles: Some((field("p50_us")? as u64, field("p99_us")? as u64)),
        violations: field("violations")? as usize,
    })
}

/// The rows (with the Go peer's when `go`), and their summary lines.
pub async fn rows(ep: &str, quick: bool, go: bool, summary: &mut Vec<String>) -> Res<Vec<Row>> {
    let (warmup, dur) = if quick {
        (Duration::from_millis(500), Duration::from_secs(2))
    } else {
        (Duration::from_secs(1), Duration::from_secs(5))
    };
    let go = if go { build_multimutex_go() } else { None };
    summary.push(format!(
        "several keys at once: {CLIENTS} clients, 2 distinct keys of {KEYS} per grant, {} s \
         each after {:.1} s of warm-up; wr/op there is etcd revisions per grant, ratio is \
         grants/s over fairlock lock_all fair's",
        dur.as_secs_f64(),
        warmup.as_secs_f64()
    ));
    let mut measured: Vec<(&str, &'static str, usize, Window)> = Vec::new();
    for (name, mode, how, fair) in [
        ("fairlock lock_all, 2 of 8 keys", "fair", How::All, true),
        ("fairlock lock_all, 2 of 8 keys", "unfair", How::All, false),
        (
            "fairlock sorted one-by-one, 2 of 8",
            "fair",
            How::Sorted,
            true,
        ),
        (
            "fairlock sorted one-by-one, 2 of 8",
            "unfair",
            How::Sorted,
            false,
        ),
    ] {
        eprintln!("bench: several keys at once: {name}, {mode}");
        let w = window(ep, how, fair, warmup, dur).await?;
        measured.push((name, mode, KEYS, w));
    }
    match &go {
        Some(bin) => {
            eprintln!("bench: several keys at once: Go concurrency.Mutex, sorted one-by-one");
            let w = go_window(bin, ep, warmup, dur)?;
            measured.push(("peer: Go Mutex sorted one-by-one, 2 of 8", "fair", KEYS, w));
        }
        None => summary.push("no Go concurrency.Mutex row (--no-go, or its build failed)".into()),
    }
    eprintln!("bench: several keys at once: the put+delete floor");
    let floor = window(ep, How::PutDelete, true, warmup, dur).await?;
    measured.push((
        "floor: put + delete, 16 clients on 16 keys",
        "-",
        CLIENTS,
        floor,
    ));

    let base = measured[0].3.per_s().max(1e-9);
    let mut rows = Vec::new();
    let mut broken = 0;
    for (name, mode, keys, w) in &measured {
        rows.push(
            w.row(name, mode, *keys)
                .ratio(w.per_s() / base, "x lock_all fair"),
        );
        summary.push(format!(
            "{name} ({mode}): {:.0} grants/s, {:.2} revisions/grant, {:.2}x lock_all fair, {} \
             exclusion violations",
            w.per_s(),
            w.revisions_per_grant(),
            w.per_s() / base,
            w.violations
        ));
        broken += w.violations;
    }
    if broken > 0 {
        eprintln!("bench: EXCLUSION VIOLATED {broken} times in the several-keys rows");
    }
    Ok(rows)
}
