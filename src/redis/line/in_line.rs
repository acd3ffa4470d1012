//! Read/write locks and semaphores on Redis: one call's entry in the
//! key's line (`line.rs`), entering it, waiting in it until granted, and
//! leaving it when the caller gives up.
//!
//! A waiter sleeps until a release that grants it publishes its id (see
//! `wake.rs`), the least PTTL of the holders ahead passes (a dead holder's
//! share frees then), or the next poll (`Core::waiter_poll`, in case a
//! message was lost); each wake-up runs `ENTER` in `check` mode, which
//! refreshes its record, confirms a grant (renewing it to the full TTL),
//! or answers that its entry is gone ([`crate::Error::SessionLost`]: it
//! never joins again at the back).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::redis::connect::node::{Admission, Call, Reach};
use crate::redis::connect::node_error::NodeError;
use crate::redis::line::held_entry;
use crate::redis::pace::{self, Pace};
use crate::redis::protocol::keys::{LockKeys, owner_value};
use crate::redis::protocol::line::{Entered, LineKeys, Mode, in_use_as_mutex, spell};
use crate::redis::protocol::line_lua::{ENTER_SCRIPT, LEAVE_SCRIPT};
use crate::redis::state::{Core, record_ttl};
use crate::semantics::admission::{Share, conflict};
use crate::semantics::armed::{Armed, TakeBack, turn_or_done};
use crate::util::observe;
use crate::{Context, Error, Key, LockGuard, Result};

/// Takes `share` of `key` if that needs no wait.
pub(crate) async fn try_shared(
    core: &Arc<Core>,
    key: &Key,
    share: Share,
) -> Result<Option<LockGuard>> {
    let mut entry = LineAttempt::new(core, key, share, Wakes::Never);
    let sent = Instant::now();
    match entry.enter(Mode::Try, core.poll()).await {
        Ok(Entered::Held(token)) => Ok(Some(entry.granted(token, sent))),
        Ok(Entered::Waits(_) | Entered::Gone) => {
            entry.set_armed(false);
            Ok(None)
        }
        Ok(refused) => {
            entry.set_armed(false);
            Err(entry.refusal(refused))
        }
        // Redis may still apply the request: dropping the entry (armed)
        // leaves the line in the background.
        Err(e) => Err(e),
    }
}

/// Waits in `key`'s line until `share` of it is granted, or the context
/// ends: a round, then a pause (`pace.rs`).
pub(crate) async fn wait_shared(
    core: &Arc<Core>,
    ctx: &Context,
    key: &Key,
    share: Share,
) -> Result<LockGuard> {
    let mut entry = LineAttempt::new(core, key, share, Wakes::OnGrant);
    let notify = Arc::clone(&entry.notify);
    let waited = async {
        core.single_node()
            .hub
            .ready(core.config.node_timeout())
            .await;
        // Join until a round is answered: an unanswered one may or may
        // not have put the entry in line, and `join` finds it if it did.
        let mut mode = Mode::Join;
        let mut pace = Pace::new(core, notify);
        loop {
            let sent = Instant::now();
            let poll = core.waiter_poll(0);
            match entry.enter(mode, poll).await {
                Ok(Entered::Held(token)) => return Ok(entry.granted(token, sent)),
                Ok(Entered::Waits(soonest)) => {
                    if mode == Mode::Join {
                        observe::queued(None);
                    }
                    mode = Mode::Check;
                    pace.after_busy(soonest.map(Duration::from_millis), poll)
                        .await;
                }
                Ok(refused) => return Err(entry.refusal(refused)),
                // Refresh the record before it expires.
                Err(e) => pace.after_error(e).await?,
            }
        }
    };
    match turn_or_done(ctx, key, waited).await {
        Ok(guard) => Ok(guard),
        Err(e) => {
            // Leave the line before reporting, so a caller who gave up
            // leaves nothing behind (and a grant that came meanwhile is
            // passed on); if Redis does not answer in time, the leave
            // carries on in the background.
            entry.abandon(core.config.node_timeout()).await;
            Err(e)
        }
    }
}

/// Whether an entry is woken by the release that grants it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wakes {
    /// A waiter: registered with the node's hub.
    OnGrant,
    /// A try: holds at once or never.
    Never,
}

/// One call's entry: dropping it while armed leaves the line in the
/// background, so a caller that gives up leaves nothing behind.
struct LineAttempt {
    core: Arc<Core>,
    key: Key,
    keys: LineKeys,
    share: Share,
    /// The entry's id: its line member and record name.
    id: String,
    owner: String,
    wakes: Wakes,
    notify: Arc<Notify>,
}

impl LineAttempt {
    fn new(core: &Arc<Core>, key: &Key, share: Share, wakes: Wakes) -> Armed<Self> {
        let (kind, _, _) = spell(share);
        let id = format!("{kind}{}", uuid::Uuid::new_v4().simple());
        let notify = Arc::new(Notify::new());
        if wakes == Wakes::OnGrant {
            core.single_node().hub.register(&id, &notify);
        }
        Armed::new(LineAttempt {
            owner: owner_value(&id, &core.id),
            keys: LineKeys::new(LockKeys::new(core.nodes.layout, core.config.prefix(), key)),
            core: Arc::clone(core),
            key: key.clone(),
            share,
            id,
            wakes,
            notify,
        })
    }

    /// Runs `ENTER` once; the entry's record lives three `poll`s
    /// ([`record_ttl`]).
    async fn enter(&self, mode: Mode, poll: Duration) -> Result<Entered> {
        let (kind, limit, n) = spell(self.share);
        let config = &self.core.config;
        let hub = match self.wakes {
            Wakes::OnGrant => self.core.single_node().hub.id.clone(),
            Wakes::Never => "-".to_owned(),
        };
        let reply: Vec<i64> = self
            .core
            .single_node()
            .run(Call {
                script: &ENTER_SCRIPT,
                keys: &self.keys.script_keys(),
                args: vec![
                    self.id.clone(),
                    kind.to_owned(),
                    limit.to_string(),
                    n.to_string(),
                    self.owner.clone(),
                    hub,
                    config.ttl_ms().to_string(),
                    record_ttl(poll).as_millis().to_string(),
                    self.keys.entries.clone(),
                    self.keys.lock.wake.clone(),
                    mode.word().to_owned(),
                    config.data_loss_wait_ms(),
                ],
                reach: Reach::Replicas,
                admission: Admission::InTurn,
            })
            .await
            .map_err(|e| self.core.nodes.unavailable("lock", vec![e]))?;
        Entered::from_reply(&reply).ok_or_else(|| Error::Backend {
            backend: "redis",
            op: "lock",
            source: format!("unexpected answer to entering the line: {reply:?}").into(),
        })
    }

    /// The error for an answer that refuses the call.
    fn refusal(&self, answer: Entered) -> Error {
        match answer {
            Entered::Mutex => in_use_as_mutex(&self.key, self.share),
            Entered::Kind(present) => {
                conflict(&self.key, self.share, present).unwrap_or_else(|| Error::SessionLost {
                    key: self.key.to_string(),
                    reason: format!("the line holds {} instead", present.describe()),
                })
            }
            Entered::Gone => Error::SessionLost {
                key: self.key.to_string(),
                reason: "its entry in the line vanished (its record expired while this \
                         process was paused or Redis was unreachable, or someone deleted it)"
                    .into(),
            },
            Entered::Held(_) | Entered::Waits(_) => Error::Backend {
                backend: "redis",
                op: "lock",
                source: "a grant taken for a refusal".into(),
            },
        }
    }
}

impl Armed<LineAttempt> {
    /// The guard of a grant answered to a request sent at `sent`.
    fn granted(&mut self, token: u64, sent: Instant) -> LockGuard {
        self.set_armed(false);
        held_entry::guard(
            Arc::clone(&self.core),
            self.key.clone(),
            self.keys.clone(),
            self.id.clone(),
            token,
            sent,
        )
    }
}

impl TakeBack for LineAttempt {
    /// Leaves the line, at the pace of [`pace::leave`].
    fn take_back(&mut self) -> impl Future<Output = ()> + Send + 'static {
        let (keys, id) = (self.keys.clone(), self.id.clone());
        pace::leave(Arc::clone(&self.core), vec![0], move |core, nodes| {
            let (keys, id) = (keys.clone(), id.clone());
            async move {
                match send_leave(&core, &keys, &id).await {
                    Ok(_) => Vec::new(),
                    Err(_) => nodes,
                }
            }
        })
    }
}

/// Sends `LEAVE` for entry `id` once.
async fn send_leave(core: &Core, keys: &LineKeys, id: &str) -> Result<i64, NodeError> {
    core.single_node()
        .run::<i64>(Call {
            script: &LEAVE_SCRIPT,
            keys: &keys.script_keys(),
            args: vec![id.to_owned(), keys.entries.clone(), keys.lock.wake.clone()],
            reach: Reach::Master,
            admission: Admission::InTurn,
        })
        .await
}

impl Drop for LineAttempt {
    fn drop(&mut self) {
        if self.wakes == Wakes::OnGrant {
            self.core.single_node().hub.deregister(&self.id);
        }
    }
}
