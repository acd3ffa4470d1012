//! A queued waiter listening for its turn (see `queue.rs`, the wait): to its
//! locker's watch of its own queue keys, where a release touches its entry,
//! and once patient to the deletion of its predecessor's entry or the lock
//! key; and how that watch is opened around the enqueue ([`InLine`]), for
//! a `lock` and for each key of a `lock_all`.

use std::pin::Pin;
use std::sync::Arc;

use tokio::time::Sleep;

use super::attempt::LockAttempt;
use super::held_lock::Behind;
use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::own_watch::Listener;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::client::retry::{Budget, Retrying};
use crate::etcd::client::watch::{Events, Subscription, Target, WatchMsg};
use crate::etcd::protocol::keys::{LockKeys, passed_along, prefix_end};
use crate::etcd::session::handout::Lease;
use crate::etcd::session::state::LockerState;
use crate::semantics::fairness::Fairness;
use crate::util::backoff::Backoff;

/// What ended a wait.
pub(super) enum Signal {
    /// Fair: the releasing holder handed us the lock key.
    Handed { token: i64, behind: Behind },
    /// Unfair: the lock key was freed for us.
    Woken,
    /// What we watch changed, or the watch restarted: re-read.
    Changed,
    /// Patience ran out with nothing to watch yet: re-read.
    Patient,
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
/// once patient, the deletion of `target` (its predecessor or the lock key).
pub(super) struct Watching {
    own: Listener,
    /// What to watch once patient, and from which revision: learnt by the
    /// first re-read (the enqueue reads nothing, to stay O(1) in etcd).
    target: Option<(Vec<u8>, i64)>,
    sub: Option<Subscription>,
    /// Pauses between watches that failed to open.
    backoff: Backoff,
}

impl Watching {
    pub(super) fn new(own: Listener) -> Self {
        Watching {
            own,
            target: None,
            sub: None,
            backoff: retry_backoff(),
        }
    }

    /// Waits for the next signal. Once `patience` has run out, also
    /// watches the target (or, with none known yet, asks for a read).
    pub(super) async fn signal(
        &mut self,
        waiter: &Queued<'_>,
        mut patience: Pin<&mut Sleep>,
    ) -> EtcdResult<Signal> {
        if patience.is_elapsed()
            && self.sub.is_none()
            && let Some(signal) = self.watch_target(waiter).await?
        {
            return Ok(signal);
        }
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
                        match Box::pin(listen_own(attempt)).await {
                            Ok(own) => self.own = own,
                            Err(e) if e.is_transient() => self.pause(waiter).await,
                            Err(e) => return Err(e),
                        }
                        return Ok(Signal::Changed);
                    }
                    WatchMsg::Created => {}
                },
                () = waiter.lease.lost.cancelled() => return Ok(Signal::LeaseLost),
                () = &mut patience, if self.sub.is_none() => {
                    if let Some(signal) = self.watch_target(waiter).await? {
                        return Ok(signal);
                    }
                }
                msg = Subscription::next_of(&mut self.sub) => match msg {
                    WatchMsg::Events { events } => {
                        let gone = self.target.as_ref().map(|t| t.0.as_slice());
                        if events.iter().any(|e| !e.put && Some(e.key.as_slice()) == gone) {
                            return Ok(Signal::Changed);
                        }
                    }
                    WatchMsg::Ended(_) => {
                        self.sub = None;
                        return Ok(Signal::Changed);
                    }
                    WatchMsg::Created => {}
                },
            }
        }
    }

    /// Once patient: opens the watch on the target (a re-read learns it
    /// first: [`Signal::Patient`]). A watch that fails to open for a
    /// reason that may pass (no answer, a member cut off) costs a pause and
    /// a re-read, not the waiter's place in line.
    async fn watch_target(&mut self, waiter: &Queued<'_>) -> EtcdResult<Option<Signal>> {
        let Some((key, since)) = &self.target else {
            return Ok(Some(Signal::Patient));
        };
        match Box::pin(watch_deletion(waiter, key, *since)).await {
            Ok(sub) => {
                self.sub = Some(sub);
                self.backoff = retry_backoff();
                Ok(None)
            }
            Err(e) if e.is_transient() => {
                self.pause(waiter).await;
                Ok(Some(Signal::Changed))
            }
            Err(e) => Err(e),
        }
    }

    /// Pauses before a watch is opened again; cut short if the lease is
    /// lost meanwhile.
    async fn pause(&mut self, waiter: &Queued<'_>) {
        waiter.lease.pause(&mut self.backoff).await;
    }

    /// Watches `target` from revision `since` from now on (once patient).
    pub(super) fn follow(&mut self, target: Vec<u8>, since: i64) {
        if self.target.as_ref().is_none_or(|(old, _)| *old != target) {
            self.sub = None; // watch the new target (once patient)
        }
        self.target = Some((target, since));
    }
}

/// Subscribes anew to the locker's watch of its own queue keys.
async fn listen_own(attempt: &LockAttempt) -> EtcdResult<Listener> {
    let own_prefix = attempt.keys.locker_queue(&attempt.state.id);
    let own_end = prefix_end(&own_prefix);
    attempt
        .state
        .watches
        .listen(&own_prefix, Some(&own_end))
        .await
}

/// Watches `key` (our predecessor's queue key, or the lock key) for its
/// deletion after revision `since`. Replays from there, so no deletion can
/// slip by; such a watch may start unsynced (~100 ms late), which only
/// matters when a lock was freed without a handoff.
async fn watch_deletion(waiter: &Queued<'_>, key: &[u8], since: i64) -> EtcdResult<Subscription> {
    waiter
        .attempt
        .state
        .hub
        .subscribe(Target {
            key: key.to_vec(),
            range_end: None,
            start_revision: Some(since + 1),
            events: Events::All,
        })
        .await
}

/// A waiter queued at `my_rev` on `lease`, listening to its locker's
/// watch of its own queue keys.
pub(super) struct InLine {
    pub my_rev: i64,
    pub lease: Arc<Lease>,
    pub own: Listener,
    pub own_watch: OwnWatch,
}

/// How the waiter listens to the locker's watch of its own queue keys.
pub(super) enum OwnWatch {
    /// It was open before the enqueue: no touch can have been missed.
    WasOpen,
    /// It was opened after the enqueue: re-read once to close the gap.
    OpenedAfter,
}

/// Before an enqueue under `keys`: the locker's watch of its own queue
/// keys there, subscribed to if it is open, so that no touch can be
/// missed. A locker that never waits never opens it.
pub(super) async fn own_watch_before(state: &LockerState, keys: &LockKeys) -> Option<Listener> {
    let own_prefix = keys.locker_queue(&state.id);
    let own_end = prefix_end(&own_prefix);
    Box::pin(state.watches.existing(&own_prefix, Some(&own_end))).await
}

/// After an enqueue that queued at `my_rev` on `lease`: the waiter, with
/// the watch [`own_watch_before`] found open, or opened now (the first
/// read then closes the gap).
pub(super) async fn own_watch_after(
    state: &LockerState,
    keys: &LockKeys,
    open_own: Option<Listener>,
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
                match Box::pin(state.watches.listen(&own_prefix, Some(&own_end))).await {
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
