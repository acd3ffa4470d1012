//! A queued waiter listening for its turn (see `queue.rs`, the wait): to its
//! locker's watch of its own queue keys, where a release touches its entry,
//! and once patient to its locker's vigil over the lock (a lock freed with
//! nobody to hand it on, `session/vigil.rs`); and how that watch is opened
//! around the enqueue ([`InLine`]), for a `lock` and for each key of a
//! `lock_all`.

use std::pin::Pin;
use std::sync::Arc;

use tokio::time::Sleep;

use super::attempt::LockAttempt;
use super::held_lock::Behind;
use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::own_watch::KeyListener;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::client::retry::{Budget, Retrying};
use crate::etcd::client::watch::WatchMsg;
use crate::etcd::protocol::keys::{LockKeys, passed_along, prefix_end};
use crate::etcd::session::handout::Lease;
use crate::etcd::session::state::LockerState;
use crate::etcd::session::vigil::Ticket;
use crate::semantics::fairness::Fairness;
use crate::util::backoff::Backoff;

/// What ended a wait.
pub(super) enum Signal {
    /// Fair: the releasing holder handed us the lock key.
    Handed { token: i64, behind: Behind },
    /// Unfair: the lock key was freed for us.
    Woken,
    /// The vigil found the lock free for us: re-read our place.
    Changed,
    /// Our locker's watch restarted: glance (a touch may have come
    /// meanwhile).
    Reopened,
    /// The lease was lost here (the waiter may revive it).
    LeaseLost,
}

/// The queued entry a [`Watching`] listens for: its attempt, its queue key
/// (created at `my_rev`) and the lease that key is bound to.
pub(super) struct Queued<'a> {
    pub attempt: &'a LockAttempt,
    pub queue_key: &'a [u8],
    pub my_rev: i64,
    pub lease: &'a Lease,
}

/// What a waiter listens to: its locker's watch of its own queue keys, and
/// once patient, its locker's vigil over the lock.
pub(super) struct Watching {
    own: KeyListener,
    /// Once patient: its place in the vigil (joining sends nothing).
    vigil: Option<Ticket>,
    /// Pauses between watches that failed to open.
    backoff: Backoff,
}

impl Watching {
    pub(super) fn new(own: KeyListener) -> Self {
        Watching {
            own,
            vigil: None,
            backoff: retry_backoff(),
        }
    }

    /// Waits for the next signal. Once `patience` has run out, also
    /// listens to the vigil.
    pub(super) async fn signal(
        &mut self,
        waiter: &Queued<'_>,
        mut patience: Pin<&mut Sleep>,
    ) -> EtcdResult<Signal> {
        let (attempt, my_rev) = (waiter.attempt, waiter.my_rev);
        loop {
            tokio::select! {
                msg = self.own.recv() => match msg {
                    WatchMsg::Events { events } => {
                        let mut woken = false;
                        // Our queue key's name may have been used before
                        // (see `session/slots.rs`): only changes after our enqueue
                        // are ours.
                        // The watch sends puts only (see `client/own_watch.rs`): a
                        // queue key that vanishes is found by the lease's loss
                        // or the patient re-read.
                        for ev in events.iter().filter(|e| e.key == waiter.queue_key && e.mod_revision > my_rev) {
                            if ev.create_revision == my_rev {
                                match attempt.state.fairness {
                                    Fairness::Fair => {
                                        let passed = passed_along(&attempt.keys, &attempt.value, &ev.value);
                                        return Ok(Signal::Handed {
                                            token: ev.mod_revision,
                                            behind: Behind::Passed(passed),
                                        });
                                    }
                                    Fairness::Unfair => woken = true,
                                }
                            }
                        }
                        if woken {
                            return Ok(Signal::Woken);
                        }
                    }
                    WatchMsg::Ended(_) => {
                        // The watch opened for this waiter once: failing
                        // to open it again is the stream's (a connection
                        // broken, etcd too busy to answer), not a refusal.
                        // Pause and try again; the glance that follows
                        // closes the gap either way.
                        // Until it is open again (the old listener's watch
                        // is over: it would never say more), or the lease
                        // is lost; the caller's deadline still ends it.
                        loop {
                            match Box::pin(listen_own(attempt, waiter.queue_key)).await {
                                Ok(own) => break self.own = own,
                                Err(_) if waiter.lease.lost.is_cancelled() => {
                                    return Ok(Signal::LeaseLost);
                                }
                                Err(_) => self.pause(waiter).await,
                            }
                        }
                        return Ok(Signal::Reopened);
                    }
                    WatchMsg::Created => {}
                },
                () = waiter.lease.lost.cancelled() => return Ok(Signal::LeaseLost),
                () = &mut patience, if self.vigil.is_none() => {
                    let vigils = &attempt.state.vigils;
                    self.vigil = Some(vigils.join(&attempt.keys, waiter.queue_key));
                }
                () = told(&self.vigil) => return Ok(Signal::Changed),
            }
        }
    }

    /// Pauses before a watch is opened again; cut short if the lease is
    /// lost meanwhile.
    async fn pause(&mut self, waiter: &Queued<'_>) {
        waiter.lease.pause(&mut self.backoff).await;
    }
}

/// Returns when the vigil tells the waiter to re-read; never without one.
async fn told(vigil: &Option<Ticket>) {
    match vigil {
        Some(ticket) => ticket.told().await,
        None => std::future::pending().await,
    }
}

/// Listens anew to the locker's watch of its own queue keys, for
/// `queue_key`.
async fn listen_own(attempt: &LockAttempt, queue_key: &[u8]) -> EtcdResult<KeyListener> {
    let own_prefix = attempt.keys.locker_queue(&attempt.state.id);
    let own_end = prefix_end(&own_prefix);
    attempt
        .state
        .watches
        .listen(&own_prefix, Some(&own_end), queue_key)
        .await
}

/// A waiter queued at `my_rev` on `lease`, listening to its locker's
/// watch of its own queue keys.
pub(super) struct InLine {
    pub my_rev: i64,
    pub lease: Arc<Lease>,
    pub own: KeyListener,
    pub own_watch: OwnWatch,
}

/// How the waiter listens to the locker's watch of its own queue keys.
pub(super) enum OwnWatch {
    /// It was open before the enqueue: no touch can have been missed.
    WasOpen,
    /// It was opened after the enqueue: re-read once to close the gap.
    OpenedAfter,
}

/// Before an enqueue of `queue_key` under `keys`: the locker's watch of
/// its own queue keys there, listened to for `queue_key` if it is open,
/// so that no touch can be missed. A locker that never waits never opens
/// it.
pub(super) async fn own_watch_before(
    state: &LockerState,
    keys: &LockKeys,
    queue_key: &[u8],
) -> Option<KeyListener> {
    let own_prefix = keys.locker_queue(&state.id);
    let own_end = prefix_end(&own_prefix);
    Box::pin(
        state
            .watches
            .existing(&own_prefix, Some(&own_end), queue_key),
    )
    .await
}

/// After an enqueue that queued at `my_rev` on `lease`: the waiter, with
/// the watch [`own_watch_before`] found open, or opened now (the first
/// read then closes the gap).
pub(super) async fn own_watch_after(
    state: &LockerState,
    (keys, queue_key): (&LockKeys, &[u8]),
    open_own: Option<KeyListener>,
    my_rev: i64,
    lease: Arc<Lease>,
) -> EtcdResult<InLine> {
    let own_prefix = keys.locker_queue(&state.id);
    let own_end = prefix_end(&own_prefix);
    let (own, own_watch) = match open_own {
        Some(listener) => {
            state.watches.touch(&own_prefix, Some(&own_end)).await;
            (listener, OwnWatch::WasOpen)
        }
        None => {
            // We are in line now: a watch that fails to open for a reason
            // that may pass (a member cut off) is opened again rather than
            // costing the place.
            let mut retrying = Retrying::new(Budget::WhileLeased(&lease.lost));
            let listener = loop {
                let listen = state.watches.listen(&own_prefix, Some(&own_end), queue_key);
                match Box::pin(listen).await {
                    Ok(listener) => break listener,
                    Err(e) => retrying.again(e).await?,
                }
            };
            (listener, OwnWatch::OpenedAfter)
        }
    };
    Ok(InLine {
        my_rev,
        lease,
        own,
        own_watch,
    })
}
