//! Read/write locks and semaphores on one key: 16 clients, each with its
//! own locker (its own connection and session lease), looping for a fixed
//! window after a warm-up, against the floor and etcd's own Go
//! `recipe.RWMutex` (`examples/rwmutex-go`, built by
//! `scripts/build-example-go.sh rwmutex-go` or named by `FAIRLOCK_RWMUTEX_GO`) in the
//! same run.
//!
//! - **rw 90/10**: client `c`'s `i`-th grant is a write when
//!   `(i + c) % 10 == 0`, else a read; released at once. The Go peer runs
//!   the same rule.
//! - **semaphore**: `acquire_permits(1 of 4)` then unlock; etcd has no
//!   semaphore recipe (etcd issue 12490), so its rows stand beside
//!   fairlock's own mutex on one key and the floor.
//! - **floor**: a put then a delete, each client on its own key: two
//!   writes, what any lock that writes an entry to join and deletes it to
//!   leave pays per grant.
//!
//! Grants count from the end of the warm-up to the end of the window; the
//! etcd revision is read with a plain Get at both ends, and the rows' wr/op
//! is that revision delta per grant. Every client also checks exclusion as
//! it holds (a writer beside anyone, a reader beside a writer, more than 4
//! permits): the counts are raised after a grant and lowered before a
//! release, so any overlap seen is real.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, LockGuard, Locker};

use crate::report::Row;
use crate::workloads::{self, Res, Run};

const CLIENTS: usize = 16;
const LIMIT: u32 = 4;

/// What one client takes in one step of its loop.
#[derive(Clone, Copy, PartialEq)]
enum Op {
    Read,
    Write,
    Permit,
    Mutex,
    /// The floor: a put, then a delete.
    PutDelete,
}

/// Which ops a client runs: its `i`-th op.
#[derive(Clone, Copy)]
enum Mix {
    /// 90 % reads, 10 % writes.
    ReadWrite,
    Only(Op),
}

impl Mix {
    fn op(self, client: usize, i: usize) -> Op {
        match self {
            Mix::ReadWrite if (i + client).is_multiple_of(10) => Op::Write,
            Mix::ReadWrite => Op::Read,
            Mix::Only(op) => op,
        }
    }
}

/// Where a run is (it starts at 0, warming up): only grants made while
/// measuring count.
const MEASURING: u8 = 1;
const STOPPED: u8 = 2;

/// What all clients of one run share: the phase, the grant counts and the
/// holders of the moment.
#[derive(Default)]
struct Board {
    phase: AtomicU8,
    reads: AtomicUsize,
    writes: AtomicUsize,
    /// Readers or permit holders now.
    sharing: AtomicUsize,
    /// Writers or mutex holders now.
    alone: AtomicUsize,
    max_sharing: AtomicUsize,
    violations: AtomicUsize,
}

impl Board {
    /// Called once `op` is granted.
    fn enter(&self, op: Op) {
        match op {
            Op::Read | Op::Permit => {
                let n = self.sharing.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_sharing.fetch_max(n, Ordering::SeqCst);
                let broken = if op == Op::Read {
                    self.alone.load(Ordering::SeqCst) != 0
                } else {
                    n > LIMIT as usize
                };
                if broken {
                    self.violations.fetch_add(1, Ordering::SeqCst);
                }
            }
            Op::Write | Op::Mutex => {
                let n = self.alone.fetch_add(1, Ordering::SeqCst) + 1;
                if n != 1 || self.sharing.load(Ordering::SeqCst) != 0 {
                    self.violations.fetch_add(1, Ordering::SeqCst);
                }
            }
            Op::PutDelete => {}
        }
    }

    /// Called before `op` is released.
    fn leave(&self, op: Op) {
        match op {
            Op::Read | Op::Permit => self.sharing.fetch_sub(1, Ordering::SeqCst),
            Op::Write | Op::Mutex => self.alone.fetch_sub(1, Ordering::SeqCst),
            Op::PutDelete => 0,
        };
    }
}

/// One client: a locker on the key, or a raw connection with a key of its
/// own (the floor).
enum Client {
    Locker(EtcdLocker, Key),
    Raw(Box<etcd_client::Client>, String),
}

/// What a client holds between its grant and its release.
enum Held {
    Guard(LockGuard),
    Put,
}

impl Client {
    async fn acquire(&self, op: Op) -> Res<Held> {
        let ctx = Context::background();
        Ok(match (self, op) {
            (Client::Locker(l, k), Op::Read) => Held::Guard(l.read_lock(&ctx, k).await?),
            (Client::Locker(l, k), Op::Write) => Held::Guard(l.write_lock(&ctx, k).await?),
            (Client::Locker(l, k), Op::Permit) => {
                Held::Guard(l.acquire_permits(&ctx, k, 1, LIMIT).await?)
            }
            (Client::Locker(l, k), _) => Held::Guard(l.lock(&ctx, k).await?),
            (Client::Raw(c, k), _) => {
                (**c).clone().put(k.as_str(), "x", None).await?;
                Held::Put
            }
        })
    }

    async fn release(&self, held: Held) -> Res<()> {
        match (held, self) {
            (Held::Guard(g), _) => g.unlock().await?,
            (Held::Put, Client::Raw(c, k)) => {
                (**c).clone().delete(k.as_str(), None).await?;
            }
            (Held::Put, Client::Locker(..)) => return Err("a put from a locker client".into()),
        }
        Ok(())
    }

    async fn close(self) -> Res<()> {
        if let Client::Locker(l, _) = self {
            l.close().await?;
        }
        Ok(())
    }
}

/// What a window measured.
struct Window {
    reads: usize,
    writes: usize,
    secs: f64,
    revisions: i64,
    /// Time to each grant in the window (fairlock's rows).
    lat: Vec<Duration>,
    /// p50 and p99 time to a grant, in microseconds, when only those came
    /// back (the Go peer's row).
    percentiles: Option<(u64, u64)>,
    max_sharing: usize,
    violations: usize,
}

impl Window {
    fn grants(&self) -> usize {
        self.reads + self.writes
    }
    fn per_s(&self) -> f64 {
        self.grants() as f64 / self.secs
    }
    fn revisions_per_grant(&self) -> f64 {
        self.revisions as f64 / self.grants().max(1) as f64
    }
    fn row(&self, name: &str, mode: &'static str, keys: usize) -> Row {
        let run = Run {
            lat: self.lat.clone(),
            elapsed: Duration::from_secs_f64(self.secs),
        };
        let mut row = Row::of(name, mode, CLIENTS, keys, &run);
        row.ops = self.grants();
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

/// Runs `clients` with `mix` for `warmup`, then measures for `dur`.
async fn window(
    ep: &str,
    clients: Vec<Client>,
    mix: Mix,
    warmup: Duration,
    dur: Duration,
) -> Res<Window> {
    let board = Arc::new(Board::default());
    let start = Arc::new(tokio::sync::Barrier::new(clients.len() + 1));
    let mut tasks = Vec::new();
    for (c, client) in clients.into_iter().enumerate() {
        let (board, start) = (Arc::clone(&board), Arc::clone(&start));
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut lat = Vec::new();
            let mut i = 0;
            while board.phase.load(Ordering::SeqCst) != STOPPED {
                let op = mix.op(c, i);
                i += 1;
                let t = Instant::now();
                let held = client.acquire(op).await?;
                let took = t.elapsed();
                board.enter(op);
                if board.phase.load(Ordering::SeqCst) == MEASURING {
                    let count = if op == Op::Write {
                        &board.writes
                    } else {
                        &board.reads
                    };
                    count.fetch_add(1, Ordering::SeqCst);
                    lat.push(took);
                }
                board.leave(op);
                client.release(held).await?;
            }
            client.close().await?;
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
        reads: board.reads.load(Ordering::SeqCst),
        writes: board.writes.load(Ordering::SeqCst),
        secs,
        revisions: rev1 - rev0,
        lat,
        percentiles: None,
        max_sharing: board.max_sharing.load(Ordering::SeqCst),
        violations: board.violations.load(Ordering::SeqCst),
    })
}

/// 16 fair lockers, each its own connection and session, on one key.
async fn lockers(ep: &str, name: &str) -> Res<Vec<Client>> {
    let prefix = format!("/bench/{name}-{}/", uuid::Uuid::new_v4().simple());
    let mut out = Vec::new();
    for _ in 0..CLIENTS {
        let config = EtcdConfig::new([ep]).with_prefix(prefix.clone());
        out.push(Client::Locker(
            EtcdLocker::connect(config, true).await?,
            Key::from("shared"),
        ));
    }
    Ok(out)
}

/// 16 raw connections, each with a key of its own.
async fn raw(ep: &str) -> Res<Vec<Client>> {
    let prefix = format!("/bench/put-delete-{}/", uuid::Uuid::new_v4().simple());
    let mut out = Vec::new();
    for c in 0..CLIENTS {
        out.push(Client::Raw(
            Box::new(workloads::connect(ep).await?),
            format!("{prefix}k{c}"),
        ));
    }
    Ok(out)
}

/// Builds (or finds) the Go peer: etcd's own `recipe.RWMutex`.
fn build_rwmutex_go() -> Option<String> {
    crate::go_peer::build_example_go(
        "FAIRLOCK_RWMUTEX_GO",
        "rwmutex-go",
        "the Go read/write peer (etcd's recipe.RWMutex)",
    )
}

/// Runs the Go peer for the same warm-up and window.
fn go_window(bin: &str, ep: &str, warmup: Duration, dur: Duration) -> Res<Window> {
    let out = Command::new(bin)
        .args(["-endpoints", ep, "-clients", &CLIENTS.to_string()])
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
                format!("Go read/write peer output lacks {k}: {text} {err}").into()
            })
    };
    Ok(Window {
        reads: field("reads")? as usize,
        writes: field("writes")? as usize,
        secs: field("secs")?,
        revisions: (field("rev1")? - field("rev0")?) as i64,
        lat: Vec::new(),
        percentiles: Some((field("p50_us")? as u64, field("p99_us")? as u64)),
        max_sharing: field("max_readers")? as usize,
        violations: field("violations")? as usize,
    })
}

/// The rows, and their summary lines.
pub async fn rows(ep: &str, quick: bool, summary: &mut Vec<String>) -> Res<Vec<Row>> {
    let (warmup, dur) = if quick {
        (Duration::from_millis(500), Duration::from_secs(2))
    } else {
        (Duration::from_secs(1), Duration::from_secs(5))
    };
    let go = build_rwmutex_go();
    let mut rows = Vec::new();
    let secs = dur.as_secs_f64();
    summary.push(format!(
        "read/write and semaphore rows: {CLIENTS} clients, {secs} s each after {:.1} s of \
         warm-up; wr/op there is etcd revisions per grant",
        warmup.as_secs_f64()
    ));

    eprintln!("bench: read/write locks and semaphores: the put+delete floor");
    let floor = window(ep, raw(ep).await?, Mix::Only(Op::PutDelete), warmup, dur).await?;
    rows.push(floor.row("floor: put + delete, 16 clients on 16 keys", "-", CLIENTS));
    let ratio = |w: &Window| w.per_s() / floor.per_s().max(1e-9);

    eprintln!("bench: read/write locks and semaphores: fairlock rw 90/10");
    let rw = window(ep, lockers(ep, "rw").await?, Mix::ReadWrite, warmup, dur).await?;
    rows.push(
        rw.row("fairlock rw 90/10, 1 key", "fair", 1)
            .ratio(ratio(&rw), "x put+delete floor"),
    );
    let mut line = format!(
        "rw 90/10, 1 key: fairlock {:.0} grants/s ({:.0} reads/s, {:.0} writes/s), {:.2} \
         revisions/grant, {:.2}x the floor, {} readers at most at once, {} exclusion violations",
        rw.per_s(),
        rw.reads as f64 / rw.secs,
        rw.writes as f64 / rw.secs,
        rw.revisions_per_grant(),
        ratio(&rw),
        rw.max_sharing,
        rw.violations
    );
    match &go {
        Some(bin) => {
            eprintln!("bench: read/write locks and semaphores: Go recipe.RWMutex 90/10");
            let peer = go_window(bin, ep, warmup, dur)?;
            rows.push(
                peer.row("peer: Go recipe.RWMutex 90/10, 1 key", "fair", 1)
                    .ratio(rw.per_s() / peer.per_s().max(1e-9), "fairlock rw / this"),
            );
            line += &format!(
                "; Go recipe.RWMutex {:.0} grants/s ({:.0} reads/s, {:.0} writes/s), {:.2} \
                 revisions/grant, {} readers at most at once, {} exclusion violations; \
                 fairlock / Go = {:.2}x grants/s",
                peer.per_s(),
                peer.reads as f64 / peer.secs,
                peer.writes as f64 / peer.secs,
                peer.revisions_per_grant(),
                peer.max_sharing,
                peer.violations,
                rw.per_s() / peer.per_s().max(1e-9)
            );
        }
        None => line += "; no Go recipe.RWMutex row (its build failed)",
    }
    summary.push(line);

    eprintln!("bench: read/write locks and semaphores: fairlock mutex, semaphore of 4");
    let mutex = window(
        ep,
        lockers(ep, "mutex16").await?,
        Mix::Only(Op::Mutex),
        warmup,
        dur,
    )
    .await?;
    rows.push(
        mutex
            .row("fairlock mutex, 1 key", "fair", 1)
            .ratio(ratio(&mutex), "x put+delete floor"),
    );
    let sem = window(
        ep,
        lockers(ep, "sem4").await?,
        Mix::Only(Op::Permit),
        warmup,
        dur,
    )
    .await?;
    rows.push(
        sem.row("fairlock semaphore 1 of 4, 1 key", "fair", 1)
            .ratio(ratio(&sem), "x put+delete floor"),
    );
    summary.push(format!(
        "semaphore 1 of 4, 1 key: fairlock {:.0} grants/s, {:.2} revisions/grant, {:.2}x the \
         floor, {:.2}x fairlock's mutex on 1 key ({:.0}/s), {:.2}x its rw 90/10; {} holders \
         at most at once (limit {LIMIT}), {} violations; no Go peer: etcd has no semaphore \
         recipe (etcd issue 12490)",
        sem.per_s(),
        sem.revisions_per_grant(),
        ratio(&sem),
        sem.per_s() / mutex.per_s().max(1e-9),
        mutex.per_s(),
        sem.per_s() / rw.per_s().max(1e-9),
        sem.max_sharing,
        sem.violations
    ));
    summary.push(format!(
        "floor, put + delete, 16 clients on 16 keys: {:.0} cycles/s, {:.2} revisions/cycle",
        floor.per_s(),
        floor.revisions_per_grant()
    ));
    let broken = rw.violations + mutex.violations + sem.violations;
    if broken > 0 {
        eprintln!("bench: EXCLUSION VIOLATED {broken} times in the read/write or semaphore rows");
    }
    Ok(rows)
}
