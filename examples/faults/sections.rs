//! The worker's cycle for the shared and election workloads, on any
//! backend's [`Locker`]: take a read lock, write lock, permit or
//! leadership, hold it, write through the fence, release. Every step is an
//! event line, as in `worker.rs`, so the orchestrator's machinery (holder
//! faults, recovery, intervals) serves all workloads; the `ACQ` line names
//! what was taken (`kind=...`). Where the write goes and how it is fenced
//! is the backend's [`Resource`]: `etcd_sections.rs` (a txn under the
//! guard's own key) and `redis_sections.rs` (a script on the resource
//! server that refuses older tokens).

use std::time::Duration;

use fairlock::{CancellationToken, Context, Error, Key, Leadership, LockGuard, Locker};

use crate::events::{Ev, Kind};
use crate::support::chain;
use crate::workload::{LIMIT, Section, Workload};

/// As `worker.rs`: long enough to outlast any fault here.
const LOCK_TIMEOUT: Duration = Duration::from_secs(20);

/// The worker's part in the cycle.
pub struct Cycle {
    /// Process number: names its writes.
    pub id: u64,
    /// How long a section is held before its write.
    pub hold: Duration,
    pub workload: Workload,
}

/// Where a section writes, on one backend.
#[allow(async_fn_in_trait)] // used in this binary only, never as `dyn`
pub trait Resource {
    /// More `ACQ` fields (etcd: `lease=<id>`), asked once the event is
    /// stamped.
    async fn acq_fields(&self) -> String;
    /// The fenced write of `value` (`<kind> <token> <worker> <seq>`) under
    /// `guard`: `ok`, `lost` (the fence refused it) or `err <why>`.
    async fn write(&self, guard: &LockGuard, kind: Section, value: String) -> String;
    /// After a loss (or `is_held()` false before the write): whatever the
    /// backend checks then (etcd: the same write under its compare alone,
    /// and the lease's state); returns the `REL` line's detail.
    async fn after_loss(&self, guard: &LockGuard, kind: Section, id: u64, seq: &mut u64) -> String;
}

/// The value a section writes: `<kind> <token> <worker> <seq>`.
pub fn value(kind: Section, token: u64, id: u64, seq: u64) -> String {
    format!("{} {token} {id} {seq}", kind.name())
}

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
pub async fn one<L: Locker, R: Resource>(
    c: &Cycle,
    locker: &L,
    res: &R,
    stop: &CancellationToken,
    seq: &mut u64,
) {
    let kind = match c.workload {
        Workload::Election => Section::Leader,
        _ => Section::shared_mix(*seq + c.id),
    };
    let ctx = Context::background().with_timeout(LOCK_TIMEOUT);
    let taken = tokio::select! {
        res = take(locker, &ctx, kind, c.id) => res,
        () = stop.cancelled() => return,
    };
    match taken {
        Ok(held) => section(c, res, held, kind, seq).await,
        Err(e) => {
            Ev::new(Kind::LockErr, 0, 0, chain(&e)).emit();
            // Pace retries while the backend is unavailable.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Even a worker that only ever errs moves through the mix.
    *seq += 1;
}

async fn take<L: Locker>(locker: &L, ctx: &Context, kind: Section, id: u64) -> Result<Held, Error> {
    let key = Key::from(kind.lock_key());
    Ok(match kind {
        Section::Read => Held::Guard(locker.read_lock(ctx, &key).await?),
        Section::Write => Held::Guard(locker.write_lock(ctx, &key).await?),
        Section::Permit => Held::Guard(locker.acquire_permits(ctx, &key, 1, LIMIT).await?),
        Section::Leader => Held::Leader(
            locker
                .campaign(ctx, &key, format!("p{id}").into_bytes())
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

/// The critical section: `ACQ` (kind, deadline, the backend's fields),
/// hold, `HELD` and `UNTIL`, the fenced write, after a loss the backend's
/// own check, `REL`, release.
async fn section<R: Resource>(c: &Cycle, res: &R, held: Held, kind: Section, seq: &mut u64) {
    let guard = held.guard();
    let token = guard.fencing_token();
    let mut acq = Ev::new(Kind::Acq, token, 0, "");
    let until = deadline(guard);
    let fields = res.acq_fields().await;
    let fields = if fields.is_empty() {
        fields
    } else {
        format!(" {fields}")
    };
    acq.detail = format!("until={until}{fields} kind={}", kind.name());
    acq.emit();
    let lost = guard.lost_token();
    let watcher = tokio::spawn(async move {
        lost.cancelled().await;
        Ev::new(Kind::Lost, token, 0, "").emit();
    });

    tokio::time::sleep(c.hold).await;
    let still = guard.is_held();
    Ev::new(Kind::Held, token, 0, if still { "1" } else { "0" }).emit();
    Ev::new(Kind::Until, token, 0, deadline(guard).to_string()).emit();

    // Written even when `is_held()` said no: the fence must refuse it.
    *seq += 1;
    Ev::new(Kind::WriteStart, token, *seq, kind.name()).emit();
    let outcome = res.write(guard, kind, value(kind, token, c.id, *seq)).await;
    Ev::new(Kind::Write, token, *seq, outcome.as_str()).emit();

    let mut ended = String::new();
    if outcome == "lost" || !still {
        ended = res.after_loss(guard, kind, c.id, seq).await;
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
