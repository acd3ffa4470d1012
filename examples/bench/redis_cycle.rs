//! The uncontended Redis cycle, interleaved: a PING round trip, the lock
//! floor (SET NX PX, then the Lua compare-and-del every Redis lock
//! releases with), fairlock unfair and fair, and the `rslock` crate take
//! turns in rounds against one redis-server, so that load on the machine
//! falls on all of them alike.
//!
//! Every contender runs through the same harness: its own connection to
//! the server (set up and warmed before the rounds), one cycle at a time
//! in the bench's task (`sequential`), a batch of cycles per turn, the
//! order of turns rotating each round. A row reports the median of its
//! batch means; its ratios come from the same rounds.

use std::time::Duration;

use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{Context, Key, Locker};

use crate::report::{Row, median};
use crate::workloads::{Fut2, Res, Run, sequential};

/// One contender: its row name and mode, and one cycle.
struct Contender {
    name: &'static str,
    mode: &'static str,
    cycle: Box<dyn FnMut() -> Fut2<()>>,
    /// Batch means, in seconds.
    means: Vec<f64>,
    runs: Vec<Run>,
}

impl Contender {
    fn new(
        name: &'static str,
        mode: &'static str,
        cycle: impl FnMut() -> Fut2<()> + 'static,
    ) -> Self {
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
        Row::of(self.name, self.mode, 1, 1, &run)
    }
}

const TTL: Duration = Duration::from_secs(10);

async fn connection(url: &str) -> Res<redis::aio::MultiplexedConnection> {
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?)
}

fn ping(c: redis::aio::MultiplexedConnection) -> Contender {
    Contender::new("redis cycle: PING round trip (RT)", "-", move || {
        let mut c = c.clone();
        Box::pin(async move {
            let _: String = redis::cmd("PING").query_async(&mut c).await?;
            Ok(())
        })
    })
}

/// SET NX PX with a value unique per cycle, then the compare-and-delete
/// (EVALSHA of a loaded script).
fn floor(c: redis::aio::MultiplexedConnection, key: String) -> Contender {
    let cad = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end \
         return 0",
    );
    let mut n = 0u64;
    Contender::new(
        "redis cycle: floor SET NX PX + Lua compare-and-del",
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

fn fairlock(l: RedisLocker, fair: bool) -> Contender {
    let key = Key::from(if fair { "fair" } else { "unfair" });
    Contender::new(
        "redis cycle: fairlock lock+unlock",
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
fn rslock(url: &str, resource: Vec<u8>) -> Contender {
    let rl = rslock::LockManager::new(vec![url.to_string()]);
    Contender::new(
        "redis cycle: peer rslock lock+unlock",
        "unfair",
        move || {
            let (rl, resource) = (rl.clone(), resource.clone());
            Box::pin(async move {
                let lock = rl
                    .acquire_no_guard(resource.as_slice(), TTL)
                    .await
                    .map_err(|e| format!("rslock: {e:?}"))?;
                rl.unlock(&lock).await;
                Ok(())
            })
        },
    )
}

/// The interleaved rows on the server at `url`: `rounds` rounds of one
/// batch of `batch` cycles per contender.
pub async fn rows(url: &str, prefix: &str, rounds: usize, batch: usize) -> Res<Vec<Row>> {
    let locker = |fair: bool| {
        let config = RedisConfig::new([url]).with_prefix(prefix);
        RedisLocker::connect(config, fair)
    };
    let mut all = vec![
        ping(connection(url).await?),
        floor(connection(url).await?, format!("{prefix}floor")),
        fairlock(locker(false).await?, false),
        fairlock(locker(true).await?, true),
        rslock(url, format!("{prefix}rslock").into_bytes()),
    ];
    // Connections up, scripts loaded, subscriptions ready.
    for c in &mut all {
        sequential(50, |_| (c.cycle)()).await?;
    }
    for round in 0..rounds {
        for i in 0..all.len() {
            let at = (round + i) % all.len();
            all[at].batch(batch).await?;
        }
    }
    let [ping, floor, unfair, fair, rslock] = &mut all[..] else {
        unreachable!("five contenders");
    };
    let (rt, fl, rs) = (ping.median(), floor.median(), rslock.median());
    let (un, fa) = (unfair.median(), fair.median());
    eprintln!(
        "bench: redis cycle, median of {rounds} batch means of {batch}: PING {:.1} us, floor \
         {:.1} us, fairlock unfair {:.1} us, fair {:.1} us, rslock {:.1} us; fairlock/floor \
         {:.2} / {:.2}, fairlock/rslock {:.2} / {:.2}, rslock/floor {:.2}",
        rt * 1e6,
        fl * 1e6,
        un * 1e6,
        fa * 1e6,
        rs * 1e6,
        un / fl,
        fa / fl,
        un / rs,
        fa / rs,
        rs / fl
    );
    let ratio_row = |mode, r: f64| {
        let none = Run {
            lat: Vec::new(),
            elapsed: Duration::from_secs(1),
        };
        let mut row = Row::of("redis cycle: fairlock / rslock", mode, 1, 1, &none);
        row.ops_per_s = 0.0;
        row.ratio(r, "x rslock (median of batch means)")
    };
    let of = "x floor (median of batch means)";
    Ok(vec![
        ping.row(),
        floor
            .row()
            .ratio(fl / (2.0 * rt), "x 2 RT (median of batch means)"),
        unfair.row().ratio(un / fl, of),
        fair.row().ratio(fa / fl, of),
        rslock.row().ratio(rs / fl, of),
        ratio_row("unfair", un / rs),
        ratio_row("fair", fa / rs),
    ])
}
