//! What the benchmark measures: the floors (raw etcd operations), fairlock,
//! and etcd's own server-side lock (v3lock through etcd-client).

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, LockOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, Locker};

pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Latencies of one run and how long it took.
pub struct Run {
    pub lat: Vec<Duration>,
    pub elapsed: Duration,
}

impl Run {
    pub fn ops(&self) -> usize {
        self.lat.len()
    }
    pub fn per_s(&self) -> f64 {
        self.ops() as f64 / self.elapsed.as_secs_f64()
    }
    pub fn pct_us(&self, q: f64) -> u64 {
        let mut v = self.lat.clone();
        v.sort();
        v.get(((v.len().saturating_sub(1)) as f64 * q) as usize)
            .map_or(0, |d| d.as_micros() as u64)
    }
    pub fn mean(&self) -> Duration {
        self.lat.iter().sum::<Duration>() / self.lat.len().max(1) as u32
    }
}

pub async fn connect(ep: &str) -> Res<Client> {
    Ok(Client::connect([ep], None).await?)
}

/// How many keys exist under `prefix`.
pub async fn count(c: &Client, prefix: &str) -> Res<usize> {
    let opts = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    Ok(c.clone().get(prefix, Some(opts)).await?.count() as usize)
}

fn prefix(name: &str) -> String {
    format!("/bench/{name}-{}/", uuid::Uuid::new_v4().simple())
}

/// Runs `op` `n` times in sequence.
pub async fn sequential<F, Fut>(n: usize, mut op: F) -> Res<Run>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Res<()>>,
{
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        op(i).await?;
        lat.push(t.elapsed());
    }
    Ok(Run {
        lat,
        elapsed: start.elapsed(),
    })
}

/// C: one put at a time.
pub async fn put(ep: &str, n: usize) -> Res<Run> {
    let c = connect(ep).await?;
    let key = prefix("put");
    sequential(n, |i| {
        let mut c = c.clone();
        let key = key.clone();
        async move {
            c.put(key, i.to_string(), None).await?;
            Ok(())
        }
    })
    .await
}

/// R: one linearizable get at a time.
pub async fn get(ep: &str, n: usize) -> Res<Run> {
    let c = connect(ep).await?;
    let key = prefix("get");
    c.clone().put(key.clone(), "x", None).await?;
    sequential(n, |_| {
        let mut c = c.clone();
        let key = key.clone();
        async move {
            c.get(key, None).await?;
            Ok(())
        }
    })
    .await
}

/// C+P: a put, until a synced watch in another connection sees it.
pub async fn put_to_event(ep: &str, n: usize) -> Res<Run> {
    let (writer, reader) = (connect(ep).await?, connect(ep).await?);
    let key = prefix("c+p");
    let mut stream = reader
        .watch_client()
        .watch(key.clone(), Some(WatchOptions::new()))
        .await?;
    stream.message().await?; // created
    // Let the watch get synced (a fresh watch can start ~100 ms behind).
    for i in 0..20 {
        writer
            .clone()
            .put(key.clone(), format!("warm{i}"), None)
            .await?;
        stream.message().await?;
    }
    let mut lat = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let value = i.to_string();
        let t = Instant::now();
        writer.clone().put(key.clone(), value.clone(), None).await?;
        'seen: loop {
            let Some(resp) = stream.message().await? else {
                return Err("watch closed".into());
            };
            for ev in resp.events() {
                if ev.event_type() == EventType::Put
                    && ev.kv().is_some_and(|kv| kv.value() == value.as_bytes())
                {
                    break 'seen;
                }
            }
        }
        lat.push(t.elapsed());
    }
    Ok(Run {
        lat,
        elapsed: start.elapsed(),
    })
}

/// The floor lock cycle: txn create (pre-granted lease), then a
/// compare-and-delete txn.
pub async fn txn_cycle(c: &Client, lease: i64, key: &str, n: usize) -> Res<Run> {
    sequential(n, |_| {
        let mut c = c.clone();
        let key = key.to_string();
        async move {
            let take = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    "me",
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let resp = c.txn(take).await?;
            let rev = resp.header().map_or(0, |h| h.revision());
            let release = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
                .and_then([TxnOp::delete(key, None)]);
            c.txn(release).await?;
            Ok(())
        }
    })
    .await
}

/// fairlock lock+unlock on one key, one at a time.
pub async fn cycle(locker: &EtcdLocker, key: &Key, n: usize) -> Res<Run> {
    let ctx = Context::background();
    sequential(n, |_| {
        let (locker, key, ctx) = (locker.clone(), key.clone(), ctx.clone());
        async move {
            let g = locker.lock(&ctx, &key).await?;
            g.unlock().await?;
            Ok(())
        }
    })
    .await
}

pub async fn locker(ep: &str, prefix: &str, fair: bool) -> Res<EtcdLocker> {
    let config = EtcdConfig::new([ep]).with_prefix(prefix);
    Ok(EtcdLocker::connect(config, fair).await?)
}

pub type Fut2<T> = std::pin::Pin<Box<dyn std::future::Future<Output = Res<T>> + Send>>;

/// Runs the workers (one per client, each with its own connection) for
/// `dur` after one untimed warm-up operation each; each call of a worker is
/// one operation.
pub async fn spread<W>(dur: Duration, workers: Vec<W>) -> Res<Run>
where
    W: FnMut() -> Fut2<()> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(workers.len() + 1));
    let mut handles = Vec::new();
    for mut w in workers {
        let barrier = Arc::clone(&barrier);
        handles.push(tokio::spawn(async move {
            w().await?; // warm-up: session lease, watches
            barrier.wait().await;
            let start = Instant::now();
            let mut lat = Vec::new();
            while start.elapsed() < dur {
                let t = Instant::now();
                w().await?;
                lat.push(t.elapsed());
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((lat, start.elapsed()))
        }));
    }
    barrier.wait().await;
    let mut lat = Vec::new();
    let mut elapsed = Duration::ZERO;
    for h in handles {
        let (l, e) = h.await??;
        lat.extend(l);
        elapsed = elapsed.max(e);
    }
    Ok(Run { lat, elapsed })
}

/// One contended key (or one key per client when `own_keys`), fairlock.
pub async fn fairlock_clients(
    ep: &str,
    fair: bool,
    clients: usize,
    dur: Duration,
    own_keys: bool,
) -> Res<Run> {
    let p = prefix(if fair { "fair" } else { "unfair" });
    let mut workers = Vec::new();
    for i in 0..clients {
        let l = locker(ep, &p, fair).await?;
        let key = Key::from(if own_keys {
            format!("k{i}")
        } else {
            "shared".to_string()
        });
        workers.push(move || {
            let (l, key) = (l.clone(), key.clone());
            Box::pin(async move {
                let g = l.lock(&Context::background(), &key).await?;
                g.unlock().await?;
                Ok(())
            }) as Fut2<()>
        });
    }
    spread(dur, workers).await
}

/// Raw puts from `clients` connections at once.
pub async fn puts_concurrent(ep: &str, clients: usize, dur: Duration) -> Res<Run> {
    let p = prefix("puts");
    let mut workers = Vec::new();
    for i in 0..clients {
        let c = connect(ep).await?;
        let key = format!("{p}k{i}");
        workers.push(move || {
            let (mut c, key) = (c.clone(), key.clone());
            Box::pin(async move {
                c.put(key, "v", None).await?;
                Ok(())
            }) as Fut2<()>
        });
    }
    spread(dur, workers).await
}

/// The floor lock cycle (txn create, compare-delete) from `clients`
/// connections at once, each on its own key.
pub async fn txn_cycles_concurrent(ep: &str, clients: usize, dur: Duration) -> Res<Run> {
    let p = prefix("txn32");
    let mut workers = Vec::new();
    for i in 0..clients {
        let c = connect(ep).await?;
        let lease = c.clone().lease_grant(60, None).await?.id();
        let key = format!("{p}k{i}");
        workers.push(move || {
            let (c, key) = (c.clone(), key.clone());
            Box::pin(async move {
                txn_cycle(&c, lease, &key, 1).await?;
                Ok(())
            }) as Fut2<()>
        });
    }
    spread(dur, workers).await
}

/// etcd's server-side lock (v3lock): lock with a kept-alive lease, unlock.
pub async fn v3lock_clients(ep: &str, clients: usize, dur: Duration) -> Res<Run> {
    let name = prefix("v3lock");
    let mut workers = Vec::new();
    let mut keepers = Vec::new();
    for _ in 0..clients {
        let c = connect(ep).await?;
        let lease = c.clone().lease_grant(30, None).await?.id();
        let (mut keeper, mut stream) = c.clone().lease_keep_alive(lease).await?;
        keepers.push(tokio::spawn(async move {
            loop {
                if keeper.keep_alive().await.is_err() || stream.message().await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }));
        let name = name.clone();
        workers.push(move || {
            let (mut c, name) = (c.clone(), name.clone());
            Box::pin(async move {
                let resp = c
                    .lock(name, Some(LockOptions::new().with_lease(lease)))
                    .await?;
                c.unlock(resp.key().to_vec()).await?;
                Ok(())
            }) as Fut2<()>
        });
    }
    let run = spread(dur, workers).await;
    for k in keepers {
        k.abort();
    }
    run
}
