//! The Redis deployments (`--redis-deployments`): the uncontended cycle
//! on one server, on a 3-master cluster (with a replica each) and on a
//! master behind three sentinels, interleaved as on one server (`redis_cycle.rs`), with
//! rslock (which has no cluster or sentinel client) on the master that
//! holds its key; and one failover of each, a master stopped under a held
//! lock: behind sentinels one whose key the replica lacks (as when the
//! write had not reached it, which with the default replica
//! acknowledgements cannot happen: these lockers run with
//! `ReplicaAcks::Off`, the window the acknowledgements close; how long
//! until the replica leads, until the holder is told its lock is lost,
//! until others are granted it and another key), on the cluster one whose
//! key reached the replica (with the default acknowledgements; until
//! the replica leads, the holder's extend is acknowledged there, another
//! key is granted). Sentinels here declare a master down after 1 s, the
//! cluster after its 1 s node timeout: the switch times are theirs.

use std::time::{Duration, Instant};

use fairlock::redis::{RedisConfig, RedisLocker, ReplicaAcks};
use fairlock::{Context, Key, Locker};

use crate::redis_cycle::{self, Target};
use crate::report::Row;
use crate::support::redis_cluster::{RedisCluster, wait_for};
use crate::support::redis_sentinel::{Auth, RedisSentinel, next_switch};
use crate::workloads::{Res, Run};

fn prefix(name: &str) -> String {
    format!("bench:{name}-{}:", uuid::Uuid::new_v4().simple())
}

async fn del(url: &str, key: &str) -> Res<()> {
    let mut c = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let () = redis::cmd("DEL").arg(key).query_async(&mut c).await?;
    Ok(())
}

/// A row of one measured duration (ms), for the failovers.
fn duration_row(name: String, d: Duration) -> Row {
    let run = Run {
        lat: vec![d],
        elapsed: d,
    };
    let mut row = Row::of(&name, "-", 1, 1, &run);
    row.ops_per_s = 0.0;
    row
}

/// What a failover took, each from the master's stop.
struct Failover {
    promoted: Duration,
    told: Duration,
    same_key: Duration,
    other_key: Duration,
}

impl Failover {
    fn rows(&self, label: &str) -> Vec<Row> {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        eprintln!(
            "bench: {label} failover, from the master's stop: replica leads {:.0} ms, holder \
             told {:.0} ms, same key granted {:.0} ms, another key {:.0} ms",
            ms(self.promoted),
            ms(self.told),
            ms(self.same_key),
            ms(self.other_key)
        );
        vec![
            duration_row(format!("{label} failover: replica leads"), self.promoted),
            duration_row(format!("{label} failover: holder told (lost)"), self.told),
            duration_row(
                format!("{label} failover: its key granted again"),
                self.same_key,
            ),
            duration_row(
                format!("{label} failover: another key granted"),
                self.other_key,
            ),
        ]
    }
}

/// From `stopped`: the holder's loss, and new grants of its key and of
/// another, each on a locker of its own.
async fn after_stop(
    held: fairlock::LockGuard,
    (same, other): (RedisLocker, RedisLocker),
    stopped: Instant,
) -> Res<(Duration, Duration, Duration)> {
    let ctx = Context::background().with_timeout(Duration::from_secs(120));
    let told = async {
        held.lost().await;
        stopped.elapsed()
    };
    let same_key = granted(&same, &ctx, "k", stopped);
    let other_key = granted(&other, &ctx, "k2", stopped);
    let (told, same_key, other_key) = tokio::join!(told, same_key, other_key);
    Ok((told, same_key?, other_key?))
}

/// How long from `stopped` until `locker` is granted `key`, retrying
/// every 20 ms while the deployment refuses (a `lock` whose first request
/// finds no master fails at once: the caller retries, as this does).
async fn granted(
    locker: &RedisLocker,
    ctx: &Context,
    key: &str,
    stopped: Instant,
) -> fairlock::Result<Duration> {
    loop {
        match locker.lock(ctx, &Key::from(key)).await {
            Ok(g) => {
                let d = stopped.elapsed();
                g.unlock().await?;
                return Ok(d);
            }
            Err(e @ (fairlock::Error::Timeout { .. } | fairlock::Error::Cancelled { .. })) => {
                return Err(e);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn lockers(url: &str, prefix: &str, acks: ReplicaAcks) -> Res<[RedisLocker; 3]> {
    // A new prefix: no data loss wait before its first grant.
    let config = RedisConfig::new([url])
        .with_prefix(prefix)
        .with_data_loss_wait(Duration::ZERO)
        .with_replica_acks(acks);
    let base = RedisLocker::connect(config, true).await?;
    Ok([base.locker(true), base.locker(true), base.locker(false)])
}

async fn sentinel_failover(d: &RedisSentinel) -> Res<Failover> {
    let p = prefix("sentinel-failover");
    let [holder, same, other] = lockers(&d.url(), &p, ReplicaAcks::Off).await?;
    let held = holder.lock(&Context::background(), &Key::from("k")).await?;
    let replica_url = d.data_url(d.replica.port);
    // The write that did not reach the replica.
    let lock_key = format!("{p}k");
    while {
        let mut c = redis::Client::open(replica_url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let v: Option<String> = redis::cmd("GET").arg(&lock_key).query_async(&mut c).await?;
        v.is_none()
    } {
        tokio::task::yield_now().await;
    }
    del(&replica_url, &lock_key).await?;
    let mut switches = d.switches().await;
    let stopped = Instant::now();
    d.master.stop();
    let (waited, promoted) = tokio::join!(after_stop(held, (same, other), stopped), async {
        next_switch(&mut switches).await;
        stopped.elapsed()
    });
    let (told, same_key, other_key) = waited?;
    Ok(Failover {
        promoted,
        told,
        same_key,
        other_key,
    })
}

/// The cluster's failover keeps the lock (its key reached the replica,
/// `WAIT`ed for): from the stop, until the replica leads, until the
/// holder's watchdog has its extend acknowledged by the new master (its
/// deadline moves; polled every ms), and until another key is granted.
async fn cluster_failover(c: &RedisCluster) -> Res<Vec<Row>> {
    let p = prefix("cluster-failover");
    let [holder, _, other] = lockers(&c.url(), &p, ReplicaAcks::All).await?;
    let held = holder.lock(&Context::background(), &Key::from("k")).await?;
    let lock_key = format!("{p}{{k}}");
    let old = c.owner(c.slot(&lock_key).await).await;
    let replica = RedisCluster::topology(&c.nodes[0].url)
        .await
        .into_iter()
        .find(|n| n.master_id.as_deref() == Some(old.id.as_str()))
        .ok_or("no replica of the lock's master")?;
    let replica_url = format!("redis://127.0.0.1:{}", replica.port);
    let mut m = redis::Client::open(format!("redis://127.0.0.1:{}", old.port))?
        .get_multiplexed_async_connection()
        .await?;
    // WAIT in short steps: the client's response timeout is shorter than
    // the replica's once-a-second acknowledgement.
    let mut acked: i64 = 0;
    for _ in 0..50 {
        acked = redis::cmd("WAIT")
            .arg(1)
            .arg(200)
            .query_async(&mut m)
            .await?;
        if acked >= 1 {
            break;
        }
    }
    if acked < 1 {
        return Err("the lock key did not reach the replica".into());
    }
    let before = held.valid_until();
    let stopped = Instant::now();
    c.server(old.port).stop();
    let promoted = async {
        wait_for(&replica_url, &["INFO", "replication"], |info| {
            info.contains("role:master")
        })
        .await;
        stopped.elapsed()
    };
    let kept = async {
        while held.valid_until() == before && held.is_held() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if held.is_held() {
            Ok(stopped.elapsed())
        } else {
            Err("the cluster lost a lock its new master has")
        }
    };
    let ctx = Context::background().with_timeout(Duration::from_secs(120));
    let another = granted(&other, &ctx, "k2", stopped);
    let (promoted, kept, another) = tokio::join!(promoted, kept, another);
    let (kept, another) = (kept?, another?);
    held.unlock().await?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "bench: cluster failover, from the master's stop: replica leads {:.0} ms, holder's \
         extend acknowledged by the new master {:.0} ms, another key granted {:.0} ms",
        ms(promoted),
        ms(kept),
        ms(another)
    );
    Ok(vec![
        duration_row("cluster failover: replica leads".into(), promoted),
        duration_row(
            "cluster failover: lock kept (extend on the new master)".into(),
            kept,
        ),
        duration_row("cluster failover: another key granted".into(), another),
    ])
}

/// The cluster and sentinel rows, on deployments started here (each
/// stopped master ends its deployment's run).
pub async fn rows(quick: bool) -> Res<Vec<Row>> {
    let (rounds, batch) = if quick { (10, 100) } else { (20, 200) };
    let mut rows = Vec::new();

    // One server first, so that the three deployments' rows come from one
    // run.
    let one = crate::support::redis_server::start_many(1);
    eprintln!("bench: redis {}", one[0].url);
    rows.extend(redis_cycle::rows(&one[0].url, &prefix("one"), rounds, batch).await?);
    drop(one);

    let cluster = RedisCluster::start();
    let tag = "bench";
    let owner = cluster.owner(cluster.slot(tag).await).await;
    let direct = format!("redis://127.0.0.1:{}", owner.port);
    let target = Target {
        fairlock_url: &cluster.url(),
        direct_url: &direct,
        slot_tag: Some(tag),
        label: "cluster",
    };
    eprintln!("bench: redis cluster {}", cluster.url());
    rows.extend(redis_cycle::rows_on(&target, &prefix("cl"), rounds, batch).await?);
    rows.extend(cluster_failover(&cluster).await?);
    drop(cluster);

    let sentinels = RedisSentinel::start(Auth::default());
    let master = sentinels.data_url(sentinels.master.port);
    let target = Target {
        fairlock_url: &sentinels.url(),
        direct_url: &master,
        slot_tag: None,
        label: "sentinel",
    };
    eprintln!("bench: redis sentinels {}", sentinels.url());
    rows.extend(redis_cycle::rows_on(&target, &prefix("se"), rounds, batch).await?);
    rows.extend(
        sentinel_failover(&sentinels)
            .await?
            .rows("sentinel (replica acks off)"),
    );
    Ok(rows)
}
