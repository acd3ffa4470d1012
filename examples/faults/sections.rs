//! The worker's cycle for the shared and election workloads: take a read
//! lock, write lock, permit or leadership, hold it, write through the
//! fence, release. Every step is an event line, as in `worker.rs`, so the
//! orchestrator's machinery (holder faults, recovery, intervals) serves
//! all workloads; the `ACQ` line names what was taken (`kind=...`).

use std::time::Duration;

use etcd_client::{Txn, TxnOp};
use fairlock::etcd::{EtcdLocker, FencedTxn};
use fairlock::{CancellationToken, Context, Error, Key, Leadership, LockGuard, Locker};

use crate::events::{Ev, Kind};
use crate::support::chain;
use crate::worker::{Args, lease_state};
use crate::workload::{ELECTION, LIMIT, PERMIT_KEY, RW_KEY, Section, Workload};

/// As `worker.rs`: long enough to outlast any fault here.
const LOCK_TIMEOUT: Duration = Duration::from_secs(20);

/// What a section holds: a guard, or a leadership (which resigns).
enum Held {
    Guard(LockGuard),
    Leader(Leadership),
}

impl Held {
    fn guard(&self) -> &LockGuard {
        match self {
            Held::Guard(g) => g,
            Held::Leader(l) => l.guard(),
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Held::Guard(g) => g.unlock().await,
            Held::Leader(l) => l.resign().await,
        }
    }
}

/// One cycle: waits for the workload's next section (giving up when
/// `stop` fires), then runs it. `seq` numbers the worker's writes.
pub async fn one(a: &Args, locker: &EtcdLocker, stop: &CancellationToken, seq: &mut u64) {
    let kind = match a.workload {
        Workload::Election => Section::Leader,
        _ => Section::shared_mix(*seq + a.id),
    };
    let ctx = Context::background().with_timeout(LOCK_TIMEOUT);
    let taken = tokio::select! {
        res = take(locker, &ctx, kind, a.id) => res,
        () = stop.cancelled() => return,
    };
    match taken {
        Ok(held) => section(a, locker, held, kind, seq).await,
        Err(e) => {
            Ev::new(Kind::LockErr, 0, 0, chain(&e)).emit();
            // Pace retries while etcd is unavailable.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Even a worker that only ever errs moves through the mix.
    *seq += 1;
}

async fn take(locker: &EtcdLocker, ctx: &Context, kind: Section, id: u64) -> Result<Held, Error> {
    Ok(match kind {
        Section::Read => Held::Guard(locker.read_lock(ctx, &Key::from(RW_KEY)).await?),
        Section::Write => Held::Guard(locker.write_lock(ctx, &Key::from(RW_KEY)).await?),
        Section::Permit => Held::Guard(
            locker
                .acquire_permits(ctx, &Key::from(PERMIT_KEY), 1, LIMIT)
                .await?,
        ),
        Section::Leader => Held::Leader(
            locker
                .campaign(ctx, &Key::from(ELECTION), format!("p{id}").into_bytes())
                .await?,
        ),
    })
}

/// The guard's deadline as CLOCK_MONOTONIC ns (0: none).
fn deadline(guard: &LockGuard) -> u64 {
    guard.valid_until().map_or(0, |d| {
        let left = d.saturating_duration_since(std::time::Instant::now());
        crate::mono_ns() + u64::try_from(left.as_nanos()).unwrap_or(u64::MAX / 2)
    })
}

/// The critical section: `ACQ` (kind, deadline, lease), hold, `HELD` and
/// `UNTIL`, the fenced write (`data` key: `<kind> <token> <worker> <seq>`),
/// after a loss the same write under etcd's compare alone, `REL`, release.
async fn section(a: &Args, locker: &EtcdLocker, held: Held, kind: Section, seq: &mut u64) {
    let guard = held.guard();
    let token = guard.fencing_token();
    let mut acq = Ev::new(Kind::Acq, token, 0, "");
    let until = deadline(guard);
    let lease = locker.session_lease().await.unwrap_or(0);
    acq.detail = format!("until={until} lease={lease:x} kind={}", kind.name());
    acq.emit();
    let lost = guard.lost_token();
    let watcher = tokio::spawn(async move {
        lost.cancelled().await;
        Ev::new(Kind::Lost, token, 0, "").emit();
    });

    tokio::time::sleep(a.hold).await;
    let still = guard.is_held();
    Ev::new(Kind::Held, token, 0, if still { "1" } else { "0" }).emit();
    Ev::new(Kind::Until, token, 0, deadline(guard).to_string()).emit();

    // Written even when `is_held()` said no: the fence must refuse it.
    *seq += 1;
    let value = format!("{} {token} {} {seq}", kind.name(), a.id);
    let put = || Txn::new().and_then([TxnOp::put(a.counter.as_str(), value.clone(), None)]);
    Ev::new(Kind::WriteStart, token, *seq, kind.name()).emit();
    let result = if a.unfenced {
        let mut kv = locker.client().kv_client();
        match tokio::time::timeout(a.request_timeout, kv.txn(put())).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("no answer".into()),
        }
    } else {
        match guard.fenced_txn(put()).await {
            Ok(_) => Ok(()),
            Err(Error::LockLost { .. }) => Err("lost".into()),
            Err(e) => Err(chain(&e)),
        }
    };
    let outcome = match &result {
        Ok(()) => "ok".to_string(),
        Err(lost) if lost == "lost" => "lost".to_string(),
        Err(e) => format!("err {e}"),
    };
    Ev::new(Kind::Write, token, *seq, outcome.as_str()).emit();

    let mut ended = "";
    if (outcome == "lost" || !still) && !a.unfenced {
        // The library may refuse locally (past the deadline): send the
        // same write under nothing but etcd's compare of the guard's key.
        *seq += 1;
        let value = format!("{} {token} {} {seq}", kind.name(), a.id);
        Ev::new(Kind::ProbeStart, token, *seq, kind.name()).emit();
        let outcome = match guard.fence() {
            Ok(fence) => {
                let probe = Txn::new().when([fence]).and_then([TxnOp::put(
                    a.counter.as_str(),
                    value,
                    None,
                )]);
                let mut kv = locker.client().kv_client();
                match tokio::time::timeout(a.request_timeout, kv.txn(probe)).await {
                    Ok(Ok(resp)) if resp.succeeded() => "ok".to_string(),
                    Ok(Ok(_)) => "rejected".to_string(),
                    Ok(Err(e)) => format!("err {e}"),
                    Err(_) => "err no answer".to_string(),
                }
            }
            Err(e) => format!("err {}", chain(&e)),
        };
        Ev::new(Kind::Probe, token, *seq, outcome).emit();
        ended = lease_state(a, locker, lease).await;
    }
    Ev::new(Kind::Rel, token, 0, ended).emit();
    let outcome = match held.release().await {
        Ok(()) => "ok".to_string(),
        Err(Error::LockLost { .. }) => "lost".to_string(),
        Err(e) => format!("err {}", chain(&e)),
    };
    watcher.abort();
    Ev::new(Kind::Unl, token, 0, outcome).emit();
}
