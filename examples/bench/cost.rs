//! What a lock costs etcd (issue: a lock must not slow etcd down): etcd CPU
//! and raft proposals per cycle on many keys, against etcd's own Go recipe
//! in the same run; the raw-etcd token ring, the floor of a fair handoff;
//! and a soak that shows whether cycles/s stay flat as history grows
//! without compaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{EventType, WatchOptions};
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, Locker};

use crate::report::Row;
use crate::server::Metrics;
use crate::workloads::{self, Fut2, Res, Run, spread};

/// etcd's CPU time (user + system) from `/proc/<pid>/stat`, in seconds.
pub struct EtcdCpu {
    pid: Option<u32>,
    tick: f64,
}

impl EtcdCpu {
    /// Without a pid (an etcd the bench did not start) nothing is measured.
    pub fn new(pid: Option<u32>) -> Self {
        let hz = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(100.0);
        EtcdCpu {
            pid,
            tick: 1.0 / hz,
        }
    }

    pub fn seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid?)).ok()?;
        let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
        let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        Some(ticks * self.tick)
    }
}

/// CPU, proposals and requests before a phase.
pub struct Meter<'a> {
    cpu: &'a EtcdCpu,
    ep: &'a str,
    cpu0: Option<f64>,
    m0: Metrics,
}

impl<'a> Meter<'a> {
    pub fn start(cpu: &'a EtcdCpu, ep: &'a str) -> Res<Self> {
        Ok(Meter {
            cpu,
            ep,
            cpu0: cpu.seconds(),
            m0: Metrics::scrape(ep)?,
        })
    }

    /// `row` with the writes, requests and etcd CPU per op.
    pub fn finish(self, row: Row, ops: usize) -> Res<Row> {
        let m1 = Metrics::scrape(self.ep)?;
        let mut row = row.cost(&self.m0, &m1, ops);
        row.cpu_us_per_op = self
            .cpu0
            .zip(self.cpu.seconds())
            .map(|(a, b)| (b - a) * 1e6 / ops.max(1) as f64);
        Ok(row)
    }
}

/// `n` lockers on one connection, as `get_locker` hands them out after one
/// `register`: the connection fairlock makes (its own member choice), not
/// a plain etcd-client one, and writes sent together while others are on
/// their way, unless `batching` is off.
pub async fn shared_lockers(
    ep: &str,
    fair: bool,
    batching: bool,
    n: usize,
) -> Res<Vec<EtcdLocker>> {
    let prefix = format!("/bench/keys-{}/", uuid::Uuid::new_v4().simple());
    let config = EtcdConfig::new([ep])
        .with_prefix(prefix)
        .with_write_batching(batching);
    let first = EtcdLocker::connect(config, fair).await?;
    let mut lockers: Vec<EtcdLocker> = (1..n).map(|_| first.another(fair)).collect();
    lockers.push(first);
    Ok(lockers)
}

/// `tasks` tasks, each locking its own key with its own locker, over one
/// connection.
pub async fn many_keys(
    ep: &str,
    fair: bool,
    batching: bool,
    tasks: usize,
    dur: Duration,
) -> Res<Run> {
    let lockers = shared_lockers(ep, fair, batching, tasks).await?;
    let workers = lockers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let (l, key) = (l.clone(), Key::from(format!("k{i}")));
            move || {
                let (l, key) = (l.clone(), key.clone());
                Box::pin(async move {
                    l.lock(&Context::background(), &key).await?.unlock().await?;
                    Ok(())
                }) as Fut2<()>
            }
        })
        .collect();
    let run = spread(dur, workers).await;
    for l in lockers {
        l.close().await?;
    }
    run
}

/// How a raw-etcd floor cycle frees its key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// A plain delete, as etcd's Go recipe frees its own per-holder key.
    Delete,
    /// A txn guarded by the key's revision, as fairlock must free the
    /// shared lock key (a plain delete could remove the next holder's).
    GuardedTxn,
    /// fairlock fair's own two txns, uncontended, made by hand: the take
    /// also compares the queue range empty and would queue in its else
    /// branch; the release also compares the queue range and would read
    /// the lock key and the queue head in its else branch; values are
    /// owner strings. What fairlock's client adds is the gap to this.
    FairlockShape,
}

/// The floor of the many-keys cycle on raw etcd: `tasks` tasks over one
/// connection, each with a lease, create their own key in a txn (compare
/// free, put with the lease) and free it with `release`. The two rows side
/// by side price the release txn in etcd CPU.
pub async fn raw_cycles(ep: &str, release: Release, tasks: usize, dur: Duration) -> Res<Run> {
    use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
    let prefix = format!("/bench/raw-{}/", uuid::Uuid::new_v4().simple());
    let client = workloads::connect(ep).await?;
    let mut workers = Vec::new();
    let mut leases = Vec::new();
    for i in 0..tasks {
        let lease = client.clone().lease_grant(60, None).await?.id();
        leases.push(lease);
        let (client, key) = (client.clone(), format!("{prefix}k{i}"));
        workers.push(move || {
            let (mut c, key) = (client.clone(), key.clone());
            Box::pin(async move {
                let leased = Some(PutOptions::new().with_lease(lease));
                let mut take = Txn::new()
                    .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key.clone(), "raw floor", leased.clone())]);
                if release == Release::FairlockShape {
                    take = fairlock_take(&key, leased);
                }
                let token = c.txn(take).await?.header().map_or(0, |h| h.revision());
                let free = match release {
                    Release::Delete => {
                        c.delete(key, None).await?;
                        return Ok(());
                    }
                    Release::GuardedTxn => Txn::new()
                        .when([Compare::mod_revision(key.clone(), CompareOp::Equal, token)])
                        .and_then([TxnOp::delete(key, None)]),
                    Release::FairlockShape => fairlock_release(&key, token),
                };
                c.txn(free).await?;
                Ok(())
            }) as Fut2<()>
        });
    }
    let run = spread(dur, workers).await;
    for lease in leases {
        client.clone().lease_revoke(lease).await?;
    }
    run
}

/// An owner string as fairlock writes it (`src/api/owner.rs`), for
/// [`Release::FairlockShape`].
const OWNER: &str = "f0123456789abcdef0123456789abcdef pid=12345 host=bench-host at=1763950000000";

/// fairlock fair's take of a free lock key (`src/etcd/protocol/take.rs`,
/// `enqueue`): free and nobody queued, else queue.
fn fairlock_take(key: &str, leased: Option<etcd_client::PutOptions>) -> etcd_client::Txn {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    let queue = format!("{key}/_OWNERS_/");
    Txn::new()
        .when([
            Compare::create_revision(key, CompareOp::Equal, 0),
            Compare::create_revision(queue.clone(), CompareOp::Equal, 0).with_prefix(),
        ])
        .and_then([TxnOp::put(key, OWNER, leased.clone())])
        .or_else([TxnOp::put(
            format!("{queue}0123456789abcdef/f0"),
            OWNER,
            leased,
        )])
}

/// fairlock fair's release when nobody waits (`src/etcd/lock/release.rs`,
/// `release_once`): still ours and nobody queued, else read the lock key
/// and the queue head.
fn fairlock_release(key: &str, token: i64) -> etcd_client::Txn {
    use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};
    let queue = format!("{key}/_OWNERS_/");
    let head = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(4)
        .with_min_create_revision(1);
    Txn::new()
        .when([
            Compare::mod_revision(key, CompareOp::Equal, token),
            Compare::create_revision(queue.clone(), CompareOp::Less, 1).with_prefix(),
        ])
        .and_then([TxnOp::delete(key, None)])
        .or_else([
            TxnOp::get(key, Some(GetOptions::new().with_keys_only())),
            TxnOp::get(queue, Some(head)),
        ])
}

/// The fair handoff floor on raw etcd: `clients` connections pass a token
/// round a ring. Each waits for an event on its own key on a long-lived
/// watch, then puts the next client's key: one write and one event per
/// handoff.
pub async fn ring(ep: &str, clients: usize, dur: Duration) -> Res<Run> {
    let prefix = format!("/bench/ring-{}/", uuid::Uuid::new_v4().simple());
    let handoffs = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut tasks = Vec::new();
    let mut first = None;
    for i in 0..clients {
        let mut c = workloads::connect(ep).await?;
        let mine = format!("{prefix}{i}");
        let next = format!("{prefix}{}", (i + 1) % clients);
        let mut events = c
            .watch_client()
            .watch(mine.clone(), Some(WatchOptions::new()))
            .await?;
        events.message().await?; // created
        if i == 0 {
            first = Some((c.clone(), mine.clone()));
        }
        let (handoffs, stop) = (Arc::clone(&handoffs), Arc::clone(&stop));
        tasks.push(tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    msg = events.message() => msg?,
                    () = stop.notified() => return Ok::<_, etcd_client::Error>(()),
                };
                let Some(msg) = msg else { return Ok(()) };
                for _ in msg
                    .events()
                    .iter()
                    .filter(|e| e.event_type() == EventType::Put)
                {
                    handoffs.fetch_add(1, Ordering::Relaxed);
                    c.put(next.clone(), "t", None).await?;
                }
            }
        }));
    }
    let (mut c, key) = first.ok_or("no clients")?;
    let start = Instant::now();
    c.put(key, "t", None).await?;
    tokio::time::sleep(dur).await;
    let n = handoffs.load(Ordering::Relaxed);
    let elapsed = start.elapsed();
    stop.notify_waiters();
    for t in tasks {
        t.abort();
    }
    Ok(Run {
        lat: vec![elapsed / n.max(1) as u32; n],
        elapsed,
    })
}

/// Cycles per window of a soak.
pub struct Soak {
    pub windows: Vec<usize>,
    pub window: Duration,
    /// etcd CPU seconds per window, when measured.
    pub cpu: Vec<Option<f64>>,
}

impl Soak {
    pub fn per_s(&self, i: usize) -> f64 {
        self.windows.get(i).copied().unwrap_or(0) as f64 / self.window.as_secs_f64()
    }
    pub fn cpu_us_per_cycle(&self, i: usize) -> Option<f64> {
        Some(self.cpu.get(i).copied()?? * 1e6 / self.windows.get(i).copied()?.max(1) as f64)
    }
}

/// One process, one connection: `keys` tasks on their own keys plus
/// `contended` tasks on one shared key, for `dur`, counted per `window`.
/// etcd is never compacted meanwhile: a lock whose cost grows with etcd's
/// history shows here as falling cycles/s.
pub async fn soak(
    ep: &str,
    fair: bool,
    (keys, contended): (usize, usize),
    dur: Duration,
    window: Duration,
    cpu: &EtcdCpu,
) -> Res<Soak> {
    let lockers = shared_lockers(ep, fair, true, keys + contended).await?;
    let count = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, l) in lockers.iter().enumerate() {
        let key = Key::from(if i < keys {
            format!("k{i}")
        } else {
            "shared".into()
        });
        let (l, count) = (l.clone(), Arc::clone(&count));
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < dur {
                l.lock(&Context::background(), &key).await?.unlock().await?;
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, fairlock::Error>(())
        }));
    }
    let (mut windows, mut cpus) = (Vec::new(), Vec::new());
    let (mut last, mut last_cpu) = (0, cpu.seconds());
    for w in 1..=(dur.as_secs_f64() / window.as_secs_f64()) as u32 {
        tokio::time::sleep_until((start + window * w).into()).await;
        let (now, now_cpu) = (count.load(Ordering::Relaxed), cpu.seconds());
        windows.push(now - last);
        cpus.push(now_cpu.zip(last_cpu).map(|(b, a)| b - a));
        eprintln!(
            "bench: soak {} window {w}: {:.0} cycles/s",
            if fair { "fair" } else { "unfair" },
            (now - last) as f64 / window.as_secs_f64()
        );
        (last, last_cpu) = (now, now_cpu);
    }
    for t in tasks {
        t.await??;
    }
    for l in lockers {
        l.close().await?;
    }
    Ok(Soak {
        windows,
        window,
        cpu: cpus,
    })
}
