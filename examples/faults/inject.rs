//! Injecting the loopback faults into a running phase (the network ones
//! are in `net_phases.rs`), picking their holder, and waiting for the
//! recovery after each.

use std::time::Duration;

use etcd_client::GetOptions;
use tokio::time::Instant;

use crate::events::Kind;
use crate::fault::{Fault, Injection, PAST_TTL, REVOKED_PAUSE};
use crate::retry::retrying;
use crate::run::Phase;
use crate::support::cluster::send_signal;
use crate::workload::Workload;
use crate::{BoxError, mono_ns, worker};

/// How long a killed member stays down before its restart.
const MEMBER_DOWN: Duration = Duration::from_secs(2);

/// Normal running between faults, so each fault starts from a steady state.
const SETTLE: Duration = Duration::from_millis(1500);

/// Fault-free running at the start of each phase.
const BASELINE: Duration = Duration::from_secs(3);

/// How often a holder fault is retried when its target had already
/// released the lock when the signal landed.
const HOLDER_TRIES: usize = 3;

impl Phase<'_> {
    /// Injects `fault` (retrying a holder fault that missed its holder),
    /// waits for the recovery and records the injection.
    pub async fn inject(&mut self, fault: Fault) -> Result<Injection, BoxError> {
        let tries = if fault.on_holder() { HOLDER_TRIES } else { 1 };
        let mut inj = None;
        for _ in 0..tries {
            let done = self.inject_once(fault).await?;
            let missed = done.missed;
            self.push(done.clone());
            inj = Some(done);
            if !missed {
                break;
            }
        }
        inj.ok_or_else(|| "no injection".into())
    }

    pub fn push(&mut self, inj: Injection) {
        if let Some(prev) = self.injections.last_mut() {
            prev.end = inj.start;
        }
        self.injections.push(inj);
    }

    pub async fn inject_once(&mut self, fault: Fault) -> Result<Injection, BoxError> {
        let start = mono_ns();
        let mut inj = Injection::at(fault, start);
        match fault {
            Fault::Baseline => {
                tokio::time::sleep(BASELINE).await;
                inj.measure_from = mono_ns();
            }
            Fault::LeaderPause(d) => {
                let leader = self.cluster.wait_leader(Duration::from_secs(20)).await?;
                self.cluster.signal(leader, libc::SIGSTOP)?;
                tokio::time::sleep(d).await;
                self.cluster.signal(leader, libc::SIGCONT)?;
                inj.measure_from = mono_ns();
            }
            Fault::MemberKill | Fault::LeaderKill => {
                let leader = self.cluster.wait_leader(Duration::from_secs(20)).await?;
                let member = if fault == Fault::LeaderKill {
                    leader
                } else {
                    (leader + 1) % self.cluster.len()
                };
                self.cluster.kill(member)?;
                tokio::time::sleep(MEMBER_DOWN).await;
                let cluster = &mut *self.cluster;
                tokio::task::block_in_place(|| cluster.restart(member))?;
                inj.measure_from = mono_ns();
            }
            Fault::HolderPause | Fault::HolderKill | Fault::HolderRevoke => {
                let (proc, token) = self.fresh_holder().await?;
                let pid = self.shared.lock().procs.get(&proc).map_or(0, |p| p.pid);
                inj.target = Some(proc);
                if fault == Fault::HolderPause {
                    let stop = mono_ns();
                    send_signal(pid, libc::SIGSTOP)?;
                    tokio::time::sleep(self.o.ttl + PAST_TTL).await;
                    send_signal(pid, libc::SIGCONT)?;
                    inj.pause = Some((stop, mono_ns()));
                    inj.measure_from = stop;
                } else if fault == Fault::HolderRevoke {
                    // Stopped, so that it cannot see the loss before the
                    // next holder is granted: the sections overlap, as when
                    // etcd ends a lease early, and the fence must refuse
                    // its write.
                    let stop = mono_ns();
                    send_signal(pid, libc::SIGSTOP)?;
                    let revoked = self.revoke_lock_lease(token).await;
                    tokio::time::sleep(REVOKED_PAUSE).await;
                    send_signal(pid, libc::SIGCONT)?;
                    revoked?;
                    inj.measure_from = stop;
                } else {
                    let kill = mono_ns();
                    send_signal(pid, libc::SIGKILL)?;
                    if let Some(p) = self.shared.lock().procs.get_mut(&proc) {
                        p.killed_at = Some(kill);
                    }
                    inj.measure_from = kill;
                    self.respawn(proc)?;
                }
                inj.missed = self.released_before(proc, token, inj.measure_from);
            }
            net => self.inject_net(net, &mut inj).await?,
        }
        inj.recovery = self.await_recovery(&inj).await;
        Ok(inj)
    }

    /// Revokes the lease the lock key is bound to, as an operator's
    /// `etcdctl lease revoke` would, if the key is still the grant at
    /// `token` (else the target released already: the injection counts as
    /// missed, and no other worker's lease is touched). Retried like the
    /// orchestrator's other requests: its connection to a member that was
    /// killed and restarted before may fail once.
    pub async fn revoke_lock_lease(&self, token: u64) -> Result<(), BoxError> {
        // The other workloads' guards fence by their entry, some key under
        // the lock prefix: the one whose mod revision is the token.
        let (key, scope) = match self.o.workload {
            Workload::Mutex => (format!("{}{}", self.locks(), worker::LOCK_KEY), None),
            _ => (self.locks(), Some(GetOptions::new().with_prefix())),
        };
        retrying("lease revoke", || {
            let (mut client, key, scope) = (self.client.clone(), key.clone(), scope.clone());
            async move {
                let held = client.get(key, scope).await?;
                let lease = held
                    .kvs()
                    .iter()
                    .find(|kv| u64::try_from(kv.mod_revision()).ok() == Some(token))
                    .map(|kv| kv.lease());
                match lease {
                    Some(lease) => match client.lease_revoke(lease).await {
                        // An earlier try's revoke was applied after all.
                        Err(e) if crate::worker::lease_not_found(&e) => Ok(()),
                        done => done.map(drop).map_err(Into::into),
                    },
                    None => Ok(()),
                }
            }
        })
        .await
    }

    /// The next process to take the lock from now on, and its token: it is
    /// then in (or near) its `hold` sleep, before its fenced write.
    pub async fn fresh_holder(&self) -> Result<(usize, u64), BoxError> {
        let since = mono_ns();
        let (proc, _, token) = self
            .shared
            .wait_for(Instant::now() + Duration::from_secs(20), |log| {
                log.holder().filter(|&(_, t, _)| t > since)
            })
            .await
            .ok_or("no worker took the lock within 20 s")?;
        Ok((proc, token))
    }

    /// `true` if `proc` had already ended its critical section for `token`
    /// before `t` (its lines up to `t` are in: it wrote them before the
    /// signal, and the reader has had the whole pause or recovery to read).
    pub fn released_before(&self, proc: usize, token: u64, t: u64) -> bool {
        self.shared.lock().procs.get(&proc).is_some_and(|p| {
            p.events
                .iter()
                .any(|e| e.kind == Kind::Rel && e.token == token && e.t < t)
        })
    }

    /// Replaces killed process `proc` with a new one in its slot.
    pub fn respawn(&mut self, proc: usize) -> Result<(), BoxError> {
        let Some(slot) = self.slots.iter().position(|s| s.proc == proc) else {
            return Err(format!("worker process {proc} has no slot").into());
        };
        let _ = self.slots[slot].child.wait();
        self.spawn(slot)
    }

    /// Waits for the first grant after the injection healed (to a process
    /// other than the target, for holder faults); gives up at twice the
    /// liveness bound, which the checker reports.
    pub async fn await_recovery(&self, inj: &Injection) -> Option<u64> {
        let bound = inj.bound(self.o);
        let waited = Duration::from_nanos(mono_ns().saturating_sub(inj.measure_from));
        let deadline = Instant::now() + (bound * 2).saturating_sub(waited);
        let (from, target) = (inj.measure_from, inj.target);
        self.shared
            .wait_for(deadline, |log| {
                log.grants_after(from)
                    .into_iter()
                    .find(|&(_, p, _)| Some(p) != target)
                    .map(|(t, _, _)| t)
            })
            .await
    }

    /// Normal running before the next fault, and a leader in place.
    pub async fn settle(&mut self) -> Result<(), BoxError> {
        tokio::time::sleep(SETTLE).await;
        self.cluster.wait_leader(Duration::from_secs(20)).await?;
        Ok(())
    }
}
