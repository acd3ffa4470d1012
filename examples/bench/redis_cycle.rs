//! The uncontended Redis cycle, interleaved: a PING round trip, the lock
//! floor (SET NX PX, then the Lua compare-and-del every Redis lock
//! releases with), fairlock's own scripts sent by hand unfair and fair
//! (the floor of fairlock's shape, `redis_hand.rs`), fairlock unfair and
//! fair, and the `rslock` crate take turns in rounds against one
//! redis-server, so that load on the machine falls on all of them alike.
//!
//! Every contender runs through the same harness: its own connection to
//! the server (set up and warmed before the rounds), one cycle at a time
//! in the bench's task (`sequential`), a batch of cycles per turn, the
//! order of turns rotating each round. A row reports the median of its
//! batch means; its ratios come from the same rounds.

use std::time::Duration;

use fairlock::redis::{RedisConfig, RedisLocker, ReplicaAcks};
use fairlock::{Context, Key, Locker};

use crate::redis_hand;
use crate::report::{Row, median};
use crate::workloads::{Fut2, Res, Run, sequential};

/// One contender: its row name and mode, and one cycle.
struct Contender {
    name: String,
    mode: &'static str,
    cycle: Box<dyn FnMut() -> Fut2<()>>,
    /// Batch means, in seconds.
    means: Vec<f64>,
    runs: Vec<Run>,
}

impl Contender {
    fn new(name: String, mode: &'static str, cycle: impl FnMut() -> Fut2<()> + 'static) -> Self {
        Contender {
            name,
            mode,
            cycle: Box::new(cycle),
            means: Vec::new(),
            runs: Vec::new(),
        }
    }

    async fn batch(&mut self, n: usize) -> Res<()> {
        let run = sequential(n, |_| (self.cycle)()).await?;
        self.means.push(run.mean().as_secs_f64());
        self.runs.push(run);
        Ok(())
    }

    fn median(&self) -> f64 {
        median(self.means.clone())
    }

    fn row(&mut self) -> Row {
        let runs = std::mem::take(&mut self.runs);
        let run = Run {
            elapsed: runs.iter().map(|r| r.elapsed).sum(),
            lat: runs.into_iter().flat_map(|r| r.lat).collect(),
        };
        Row::of(&self.name, self.mode, 1, 1, &run)
    }
}

const TTL: Duration = Duration::from_secs(10);

async fn connection(url: &str) -> Res<redis::aio::MultiplexedConnection> {
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?)
}

/// Where a set of rows runs: fairlock through `fairlock_url` (a server,
/// a cluster or sentinels), the round trip, the floor and rslock on the
/// master at `direct_url` (on a cluster, one whose slots hold `slot_tag`:
/// their keys carry it as a hash tag); `label` names the deployment in
/// the rows.
pub struct Target<'a> {
    pub fairlock_url: &'a str,
    pub direct_url: &'a str,
    pub slot_tag: Option<&'a str>,
    pub label: &'a str,
}

impl Target<'_> {
    /// A row name: `redis cycle[, label]: what`.
    fn name(&self, what: &str) -> String {
        match self.label {
            "" => format!("redis cycle: {what}"),
            label => format!("redis cycle, {label}: {what}"),
        }
    }

    /// A key of the direct contenders, in the tag's slot if any.
    fn direct_key(&self, prefix: &str, what: &str) -> String {
        match self.slot_tag {
            Some(tag) => format!("{prefix}{{{tag}}}{what}"),
            None => format!("{prefix}{what}"),
        }
    }
}

fn ping(t: &Target<'_>, c: redis::aio::MultiplexedConnection) -> Contender {
    Contender::new(t.name("PING round trip (RT)"), "-", move || {
        let mut c = c.clone();
        Box::pin(async move {
            let _: String = redis::cmd("PING").query_async(&mut c).await?;
            Ok(())
        })
    })
}

/// SET NX PX with a value unique per cycle, then the compare-and-delete
/// (EVALSHA of a loaded script).
fn floor(t: &Target<'_>, c: redis::aio::MultiplexedConnection, key: String) -> Contender {
    let cad = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end \
         return 0",
    );
    let mut n = 0u64;
    Contender::new(
        t.name("floor SET NX PX + Lua compare-and-del"),
        "-",
        move || {
            n += 1;
            let (mut c, key, cad) = (c.clone(), key.clone(), cad.clone());
            let value = format!("{n}");
            Box::pin(async move {
                let set: Option<String> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&value)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async(&mut c)
                    .await?;
                set.ok_or("floor: key busy")?;
                let deleted: i64 = cad.key(&key).arg(&value).invoke_async(&mut c).await?;
                if deleted != 1 {
                    return Err("floor: key not deleted".into());
                }
                Ok(())
            })
        },
    )
}

/// The key of fairlock's rows in a mode.
fn fairlock_key(fair: bool) -> Key {
    Key::from(if fair { "fair" } else { "unfair" })
}

/// fairlock's scripts by hand (`redis_hand.rs`) on a connection of their
/// own, with the key of `l`'s row (on a cluster, the tag's key: the
/// connection goes to the master holding its slot); the check that they
/// send what `l` sends runs after the warm-up, when `l`'s requests go to
/// the same server (not on a cluster).
async fn by_hand(t: &Target<'_>, l: &RedisLocker, fair: bool) -> Res<Contender> {
    let c = connection(t.direct_url).await?;
    let key = t.slot_tag.map_or_else(|| fairlock_key(fair), Key::from);
    Ok(Contender::new(
        t.name("fairlock's scripts by hand (floor)"),
        if fair { "fair" } else { "unfair" },
        redis_hand::cycle(c, l.hand_cycle(&key)),
    ))
}

/// See [`by_hand`].
async fn check_by_hand(t: &Target<'_>, l: &RedisLocker, fair: bool) -> Res<()> {
    if t.slot_tag.is_some() {
        return Ok(());
    }
    let key = fairlock_key(fair);
    let c = connection(t.direct_url).await?;
    redis_hand::check_same_commands(t.direct_url, l, &key, &l.hand_cycle(&key), c).await
}

fn fairlock(t: &Target<'_>, l: RedisLocker, fair: bool, acks: Acks) -> Contender {
    let key = fairlock_key(fair);
    let name = match acks {
        Acks::Off => "fairlock lock+unlock",
        Acks::All => "fairlock lock+unlock, replicas acknowledge",
    };
    Contender::new(
        t.name(name),
        if fair { "fair" } else { "unfair" },
        move || {
            let (l, key) = (l.clone(), key.clone());
            Box::pin(async move {
                l.lock(&Context::background(), &key).await?.unlock().await?;
                Ok(())
            })
        },
    )
}

/// rslock's blocking acquire (`acquire_no_guard`, which loops until it
/// holds the lock) and its `unlock`.
fn rslock(t: &Target<'_>, resource: Vec<u8>) -> Contender {
    let rl = rslock::LockManager::new(vec![t.direct_url.to_string()]);
    Contender::new(t.name("peer rslock lock+unlock"), "unfair", move || {
        let (rl, resource) = (rl.clone(), resource.clone());
        Box::pin(async move {
            let lock = rl
                .acquire_no_guard(resource.as_slice(), TTL)
                .await
                .map_err(|e| format!("rslock: {e:?}"))?;
            rl.unlock(&lock).await;
            Ok(())
        })
    })
}

/// The interleaved rows on the server at `url`: `rounds` rounds of one
/// batch of `batch` cycles per contender.
pub async fn rows(url: &str, prefix: &str, rounds: usize, batch: usize) -> Res<Vec<Row>> {
    let target = Target {
        fairlock_url: url,
        direct_url: url,
        slot_tag: None,
        label: "",
    };
    rows_on(&target, prefix, rounds, batch).await
}

/// Whether a locker waits for the replicas to acknowledge its grants and
/// extends (`ReplicaAcks::All`, the default) or not (`Off`: the cycle
/// the scripts by hand send, and the floor of the other rows).
#[derive(Clone, Copy)]
enum Acks {
    Off,
    All,
}

/// The interleaved rows on `t`.
pub async fn rows_on(t: &Target<'_>, prefix: &str, rounds: usize, batch: usize) -> Res<Vec<Row>> {
    // The data loss wait would hold each new prefix's first grant (in
    // the warm-up) for a TTL; the steady cycle is the same without it.
    let locker = |fair: bool, acks: Acks| {
        let config = RedisConfig::new([t.fairlock_url])
            .with_prefix(format!(
                "{prefix}{}",
                if matches!(acks, Acks::All) {
                    "acks:"
                } else {
                    ""
                }
            ))
            .with_data_loss_wait(Duration::ZERO)
            .with_replica_acks(match acks {
                Acks::Off => ReplicaAcks::Off,
                Acks::All => ReplicaAcks::All,
            });
        RedisLocker::connect(config, fair)
    };
    let url = t.direct_url;
    let (unfair_l, fair_l) = (
        locker(false, Acks::Off).await?,
        locker(true, Acks::Off).await?,
    );
    let (unfair_a, fair_a) = (
        locker(false, Acks::All).await?,
        locker(true, Acks::All).await?,
    );
    let mut all = vec![
        ping(t, connection(url).await?),
        floor(t, connection(url).await?, t.direct_key(prefix, "floor")),
        by_hand(t, &unfair_l, false).await?,
        by_hand(t, &fair_l, true).await?,
        fairlock(t, unfair_l.clone(), false, Acks::Off),
        fairlock(t, fair_l.clone(), true, Acks::Off),
        rslock(t, t.direct_key(prefix, "rslock").into_bytes()),
        fairlock(t, unfair_a, false, Acks::All),
        fairlock(t, fair_a, true, Acks::All),
    ];
    // Connections up, scripts loaded, subscriptions ready.
    for c in &mut all {
        sequential(50, |_| (c.cycle)()).await?;
    }
    check_by_hand(t, &unfair_l, false).await?;
    check_by_hand(t, &fair_l, true).await?;
    for round in 0..rounds {
        for i in 0..all.len() {
            let at = (round + i) % all.len();
            all[at].batch(batch).await?;
        }
    }
    let [
        ping,
        floor,
        hand_un,
        hand_fa,
        unfair,
        fair,
        rslock,
        unfair_acks,
        fair_acks,
    ] = &mut all[..]
    else {
        unreachable!("nine contenders");
    };
    let (ua, fa_acks) = (unfair_acks.median(), fair_acks.median());
    let (rt, fl, rs) = (ping.median(), floor.median(), rslock.median());
    let (hu, hf) = (hand_un.median(), hand_fa.median());
    let (un, fa) = (unfair.median(), fair.median());
    eprintln!(
        "bench: {}, median of {rounds} batch means of {batch}: PING {:.1} us, floor \
         {:.1} us, by hand unfair {:.1} us, fair {:.1} us, fairlock unfair {:.1} us, fair \
         {:.1} us, rslock {:.1} us; fairlock/by hand {:.3} / {:.3}, fairlock/rslock {:.3} / \
         {:.3}, by hand/rslock {:.3} / {:.3}, rslock/floor {:.2}",
        t.name("").trim_end_matches(": "),
        rt * 1e6,
        fl * 1e6,
        hu * 1e6,
        hf * 1e6,
        un * 1e6,
        fa * 1e6,
        rs * 1e6,
        un / hu,
        fa / hf,
        un / rs,
        fa / rs,
        hu / rs,
        hf / rs,
        rs / fl
    );
    let ratio_row = |what: &str, mode, r: f64, of| {
        let none = Run {
            lat: Vec::new(),
            elapsed: Duration::from_secs(1),
        };
        let mut row = Row::of(&t.name(what), mode, 1, 1, &none);
        row.ops_per_s = 0.0;
        row.ratio(r, of)
    };
    let of = "x floor (median of batch means)";
    let by_rs = "x rslock (median of batch means)";
    let by_hand = "x by hand (median of batch means)";
    Ok(vec![
        ping.row(),
        floor
            .row()
            .ratio(fl / (2.0 * rt), "x 2 RT (median of batch means)"),
        hand_un.row().ratio(hu / fl, of),
        hand_fa.row().ratio(hf / fl, of),
        unfair.row().ratio(un / fl, of),
        fair.row().ratio(fa / fl, of),
        rslock.row().ratio(rs / fl, of),
        ratio_row("fairlock / by hand", "unfair", un / hu, by_hand),
        ratio_row("fairlock / by hand", "fair", fa / hf, by_hand),
        ratio_row("fairlock / rslock", "unfair", un / rs, by_rs),
        ratio_row("fairlock / rslock", "fair", fa / rs, by_rs),
        ratio_row("by hand / rslock", "unfair", hu / rs, by_rs),
        ratio_row("by hand / rslock", "fair", hf / rs, by_rs),
        unfair_acks.row().ratio(ua / fl, of),
        fair_acks.row().ratio(fa_acks / fl, of),
        ratio_row(
            "replicas acknowledge / not",
            "unfair",
            ua / un,
            "x fairlock without (median of batch means)",
        ),
        ratio_row(
            "replicas acknowledge / not",
            "fair",
            fa_acks / fa,
            "x fairlock without (median of batch means)",
        ),
    ])
}
