//! The election workload's observer process and the end of its phase:
//! observers converge on the real leader (`leader()`) once the faults are
//! over, with a leader and with an empty seat. [`finale`] and
//! [`stop_observer`] serve the etcd and the Redis runs.

use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use fairlock::{Key, Locker};
use tokio::time::Instant;

use crate::events::{Kind, Log, Shared};
use crate::retry::retrying;
use crate::run::{Phase, Slot};
use crate::support::cluster::ELECTION_TIMEOUT;
use crate::{BoxError, election_check, observer};

impl Phase<'_> {
    /// Starts the election workload's observer, outside the worker slots.
    pub fn spawn_observer(&mut self) -> Result<(), BoxError> {
        let proc = self.next_proc;
        self.next_proc += 1;
        let argv = observer::Args::to_argv(&self.cluster.endpoints(), &self.locks(), self.o);
        let mut child = Command::new(std::env::current_exe()?)
            .args(argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no observer stdout")?;
        self.shared.read(proc, child.id(), stdout);
        self.observer = Some(Slot {
            proc,
            stdin: child.stdin.take(),
            child,
        });
        Ok(())
    }

    /// [`finale`] on etcd, then the observer stops.
    pub async fn converge(&mut self) -> Result<Vec<election_check::Finding>, BoxError> {
        let Some(obs) = self.observer.as_ref().map(|s| s.proc) else {
            return Ok(Vec::new());
        };
        let config = observer::config(
            self.cluster.endpoints(),
            &self.locks(),
            self.o.ttl,
            self.o.request_timeout,
        );
        let locker = fairlock::etcd::EtcdLocker::connect(config, true).await?;
        let bound = self.o.ttl + ELECTION_TIMEOUT + self.o.margin;
        let findings = finale(&locker, &self.shared, obs, bound).await;
        let _ = locker.close().await;
        if let Some(mut slot) = self.observer.take() {
            let stdin = slot.stdin.take();
            stop_observer(&self.shared, slot.proc, stdin, &mut slot.child).await;
        }
        findings
    }
}

/// Observers converge: with the workers gone, the orchestrator itself
/// campaigns on `locker`; observer `obs`'s last state must become its
/// term (as `leader()` reads it) within `bound`, and after it resigns the
/// empty seat `leader()` reads.
pub async fn finale<L: Locker>(
    locker: &L,
    shared: &Shared,
    obs: usize,
    bound: Duration,
) -> Result<Vec<election_check::Finding>, BoxError> {
    let election = Key::from(crate::workload::ELECTION);
    let mut findings = Vec::new();
    // A killed worker's lease may hold the seat for a TTL yet.
    let ctx = fairlock::Context::background().with_timeout(Duration::from_secs(30));
    let leadership = locker.campaign(&ctx, &election, b"end".to_vec()).await?;
    let what = "the orchestrator leads";
    findings.push(observer_matches(locker, shared, &election, obs, what, bound).await);
    leadership.resign().await?;
    let what = "the seat is empty";
    findings.push(observer_matches(locker, shared, &election, obs, what, bound).await);
    Ok(findings)
}

/// Closes the observer's stdin, waits for its goodbye, kills it if it
/// does not say it.
pub async fn stop_observer(
    shared: &Shared,
    obs: usize,
    stdin: Option<ChildStdin>,
    child: &mut Child,
) {
    drop(stdin);
    let bye = shared
        .wait_for(Instant::now() + Duration::from_secs(30), |log| {
            log.procs
                .get(&obs)
                .is_some_and(|p| p.events.iter().any(|e| e.kind == Kind::Bye))
                .then_some(())
        })
        .await;
    if bye.is_none() {
        let _ = child.kill();
    }
    let _ = child.wait();
}

/// Reads `leader()` and waits (`bound`) for observer `obs`'s last state
/// to be the same term.
async fn observer_matches<L: Locker>(
    locker: &L,
    shared: &Shared,
    election: &Key,
    obs: usize,
    what: &str,
    bound: Duration,
) -> election_check::Finding {
    let read = retrying("leader()", || async {
        Ok(locker
            .leader(election)
            .await?
            .map_or(0, |l| l.fencing_token))
    })
    .await;
    let term = match read {
        Ok(term) => term,
        Err(e) => {
            return election_check::Finding {
                ok: false,
                text: format!("{what}: {e}"),
            };
        }
    };
    let seen = shared
        .wait_for(Instant::now() + bound, |log| {
            (last_observed(log, obs) == Some(term)).then_some(())
        })
        .await;
    election_check::Finding {
        ok: seen.is_some(),
        text: format!(
            "{what}: leader() read term {term} (0: none); the observer's last state {} \
             within {} ms",
            match seen {
                Some(()) => "matched it".to_string(),
                None => format!("was {:?}", last_observed(&shared.lock(), obs)),
            },
            bound.as_millis()
        ),
    }
}

/// Observer `proc`'s last state in `log`: `Some(term)` (0: an empty seat).
fn last_observed(log: &Log, proc: usize) -> Option<u64> {
    let p = log.procs.get(&proc)?;
    let last = p.events.iter().rev().find(|e| e.kind == Kind::Observed)?;
    Some(last.token)
}
