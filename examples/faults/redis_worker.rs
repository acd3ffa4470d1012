//! A Redis worker process: lock -> critical section -> unlock until its
//! stdin closes, with the same event lines as `worker.rs`. The lock URL is
//! any the library takes (`redis://`, `redis+sentinel://`,
//! `redis+cluster://`), with the library's defaults but the TTL (and the
//! replica acknowledgements, if `FAIRLOCK_REPLICA_ACKS` is set).
//! The critical section sleeps `hold`, checks `is_held()`, then increments
//! a counter through a fence kept next to it on the resource server (a
//! plain `redis://` URL: the lock's own server, or one outside the faults):
//! a Lua script that refuses a fencing token lower than the highest it has
//! seen (as a resource guarded by tokens does), reported `lost` when
//! refused. With `--workload shared|election` the cycle is instead
//! `sections.rs`'s, writing through `redis_sections.rs`'s fence.

use std::io::Read;
use std::time::Duration;

use fairlock::redis::{RedisConfig, RedisLocker};
use fairlock::{CancellationToken, Context, Error, Key, Locker};

use crate::BoxError;
use crate::events::{Ev, Kind};
use crate::redis_sections::RedisResource;
use crate::sections::Cycle;
use crate::support::chain;
use crate::worker::LOCK_KEY;
use crate::workload::Workload;

/// Refuses a token below the fence; else raises the fence and increments.
const FENCED_INCR: &str = r"
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < fence then return -1 end
redis.call('SET', KEYS[2], ARGV[1])
return redis.call('INCR', KEYS[1])
";

pub struct Args {
    url: String,
    resource: String,
    prefix: String,
    counter: String,
    fence: String,
    fair: bool,
    ttl: Duration,
    hold: Duration,
    request_timeout: Duration,
    /// Process number, unique in the phase: names the sections' writes.
    id: u64,
    workload: Workload,
}

impl Args {
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut next = |what: &str| args.next().ok_or(format!("--redis-worker: missing {what}"));
        let url = next("url")?;
        let resource = next("resource url")?;
        let prefix = next("prefix")?;
        let counter = next("counter")?;
        let fence = next("fence")?;
        let fair = next("mode")? == "fair";
        let ms = |v: String| v.parse::<u64>().map(Duration::from_millis);
        let ttl = ms(next("ttl")?).map_err(|_| "--redis-worker: bad ttl")?;
        let hold = ms(next("hold")?).map_err(|_| "--redis-worker: bad hold")?;
        let request_timeout =
            ms(next("request timeout")?).map_err(|_| "--redis-worker: bad request timeout")?;
        let id = next("id")?.parse().map_err(|_| "--redis-worker: bad id")?;
        let workload = next("workload")?;
        let workload = Workload::parse(&workload).ok_or("--redis-worker: bad workload")?;
        Ok(Args {
            url,
            resource,
            prefix,
            counter,
            fence,
            fair,
            ttl,
            hold,
            request_timeout,
            id,
            workload,
        })
    }

    /// The arguments that make the orchestrator's child a Redis worker
    /// locking at `url`, holding each time for `hold` and writing the
    /// counter at `resource`; `proc` names its writes.
    pub fn to_argv(
        proc: usize,
        url: &str,
        resource: &str,
        prefix: &str,
        fair: bool,
        hold: Duration,
        o: &crate::Opts,
    ) -> Vec<String> {
        vec![
            "--redis-worker".into(),
            url.into(),
            resource.into(),
            format!("{prefix}locks:"),
            format!("{prefix}data:counter"),
            format!("{prefix}data:fence"),
            if fair { "fair" } else { "unfair" }.into(),
            o.ttl.as_millis().to_string(),
            hold.as_millis().to_string(),
            o.request_timeout.as_millis().to_string(),
            proc.to_string(),
            o.workload.name().into(),
        ]
    }
}

pub async fn run(a: Args) -> Result<(), BoxError> {
    let mut config = RedisConfig::new([a.url.clone()])
        .with_prefix(a.prefix.clone())
        .with_ttl(a.ttl);
    // As `connect_from_env` reads it: `off` shows what the acks prevent.
    if let Ok(acks) = std::env::var("FAIRLOCK_REPLICA_ACKS") {
        config = config.with_replica_acks(fairlock::redis::ReplicaAcks::parse(&acks)?);
    }
    let locker = RedisLocker::connect(config, a.fair).await?;
    // The counter write may take up to the request timeout (as the etcd
    // worker's read does): a holder cut off mid-write is still in its
    // critical section when its lease's local deadline passes.
    let conn_config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(a.request_timeout));
    let mut conn = redis::Client::open(a.resource.as_str())?
        .get_multiplexed_async_connection_with_config(&conn_config)
        .await?;
    let script = redis::Script::new(FENCED_INCR);
    Ev::new(Kind::Start, 0, 0, std::process::id().to_string()).emit();

    let stop = CancellationToken::new();
    let on_eof = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        on_eof.cancel();
    });

    let key = Key::from(LOCK_KEY);
    let mut seq = 0;
    let sections = RedisResource::new(conn.clone(), &a.counter, a.request_timeout);
    let cycle = Cycle {
        id: a.id,
        hold: a.hold,
        workload: a.workload,
    };
    while !stop.is_cancelled() {
        if a.workload != Workload::Mutex {
            crate::sections::one(&cycle, &locker, &sections, &stop, &mut seq).await;
            continue;
        }
        let ctx = Context::background().with_timeout(Duration::from_secs(20));
        let guard = tokio::select! {
            res = locker.lock(&ctx, &key) => res,
            () = stop.cancelled() => break,
        };
        let guard = match guard {
            Ok(g) => g,
            Err(e) => {
                Ev::new(Kind::LockErr, 0, 0, chain(&e)).emit();
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let token = guard.fencing_token();
        Ev::new(Kind::Acq, token, 0, "").emit();
        let lost = guard.lost_token();
        let watcher = tokio::spawn(async move {
            lost.cancelled().await;
            Ev::new(Kind::Lost, token, 0, "").emit();
        });
        tokio::time::sleep(a.hold).await;
        let held = guard.is_held();
        Ev::new(Kind::Held, token, 0, if held { "1" } else { "0" }).emit();
        seq += 1;
        Ev::new(Kind::WriteStart, token, seq, "").emit();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(a.counter.as_str())
            .key(a.fence.as_str())
            .arg(token);
        let call = invocation.invoke_async::<i64>(&mut conn);
        let outcome = match tokio::time::timeout(a.request_timeout, call).await {
            Ok(Ok(n)) if n >= 0 => "ok".to_string(),
            Ok(Ok(_)) => "lost".to_string(),
            Ok(Err(e)) => format!("err {e}"),
            Err(_) => "err no answer".to_string(),
        };
        Ev::new(Kind::Write, token, seq, outcome).emit();
        Ev::new(Kind::Rel, token, 0, "").emit();
        let unlocked = match guard.unlock().await {
            Ok(()) => "ok".to_string(),
            Err(Error::LockLost { .. }) => "lost".to_string(),
            Err(e) => format!("err {}", chain(&e)),
        };
        watcher.abort();
        Ev::new(Kind::Unl, token, 0, unlocked).emit();
    }
    drop(locker);
    Ev::new(Kind::Bye, 0, 0, "").emit();
    Ok(())
}
