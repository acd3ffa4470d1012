//! The take-all rounds of `lock_all` (`all_keys.rs`): `try_lock_all`,
//! and unfair `lock_all`, which waits between rounds as a single-key
//! waiter does, holding no key, with one queue entry where a key is held
//! (`protocol/lock_all_lua.rs`, TAKE ALL); and the one runner of both
//! scripts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::Notify;

use crate::redis::connect::node::{Admission, Call, Reach};
use crate::redis::lock::attempt::send_leave;
use crate::redis::lock::held_lock;
use crate::redis::pace::{self, Pace};
use crate::redis::protocol::keys::{LockKeys, owner_value, waiter_id};
use crate::redis::protocol::line::in_use_as_line;
use crate::redis::protocol::lock_all_lua::{
    AllAnswer, ENQUEUE_ALL_SCRIPT, Part, Shared, TAKE_ALL_SCRIPT, keys_and_args, read,
};
use crate::redis::protocol::lock_args::Joined;
use crate::redis::state::{Core, record_ttl};
use crate::semantics::armed::{Armed, TakeBack, turn_or_done};
use crate::util::observe;
use crate::{Context, Key, LockGuard, Result};

/// `KEYS` per lock of the scripts (lock, queue, fence).
const PER_LOCK: usize = 3;

/// `try_lock_all`: every key in one script if each is free for a newcomer
/// (fair: and nobody queued), else none; ridden out while replicas are
/// slow to acknowledge, as `try_lock` is.
pub(crate) async fn try_lock_all(core: &Arc<Core>, keys: &[Key]) -> Result<Option<Vec<LockGuard>>> {
    let once = async || {
        let mut attempt = AllAttempt::new(core, keys, false);
        let took = attempt.take(core.poll()).await;
        let within = core.config.node_timeout();
        match took {
            Ok(Took::All(guards)) => Ok(Some(guards)),
            // Taken, but too late to count: given back.
            Ok(Took::Late) => {
                attempt.abandon(within).await;
                Ok(None)
            }
            // What the script did is not known (a grant that fell short
            // of the replicas): given back before the next try.
            Err(e) => {
                attempt.abandon(within).await;
                Err(e)
            }
            Ok(Took::Busy(_)) => {
                attempt.set_armed(false);
                Ok(None)
            }
            Ok(Took::InUse(i)) => {
                attempt.set_armed(false);
                Err(in_use_as_line(&keys[i]))
            }
        }
    };
    core.riding_out_replicas(once).await
}

/// Unfair `lock_all`: take-all rounds until all are taken, waiting between
/// them as a single-key waiter does (its one entry is woken by a release).
pub(crate) async fn unfair(
    core: &Arc<Core>,
    ctx: &Context,
    keys: &[Key],
) -> Result<Vec<LockGuard>> {
    let mut attempt = AllAttempt::new(core, keys, true);
    let notify = Arc::clone(&attempt.notify);
    let waited = async {
        core.wakeups_ready().await;
        let mut pace = Pace::new(core, notify);
        loop {
            let poll = core.waiter_poll(0);
            match attempt.take(poll).await {
                Ok(Took::All(guards)) => return Ok(guards),
                // The next round confirms it.
                Ok(Took::Late) => {}
                Ok(Took::Busy(expires_in)) => {
                    if attempt.rounds == 1 {
                        observe::queued(None);
                    }
                    pace.after_busy(expires_in, poll).await;
                }
                Ok(Took::InUse(i)) => return Err(in_use_as_line(&keys[i])),
                Err(e) => pace.after_error(e).await?,
            }
        }
    };
    match turn_or_done(ctx, &keys[0], waited).await {
        Ok(guards) => Ok(guards),
        Err(e) => {
            attempt.abandon(core.config.node_timeout()).await;
            Err(e)
        }
    }
}

/// One `try_lock_all` or unfair `lock_all` call: its owner and waiter id,
/// the same for every key.
struct AllAttempt {
    core: Arc<Core>,
    keys: Vec<(Key, LockKeys)>,
    id: String,
    owner: String,
    /// Whether it waits (with a queue entry, woken through `notify`).
    waits: bool,
    notify: Arc<Notify>,
    rounds: u32,
}

/// What a take-all round came to.
enum Took {
    All(Vec<LockGuard>),
    /// Taken, but the answer came too late to count.
    Late,
    /// Not taken; the ms the lock waited for has left.
    Busy(Option<Duration>),
    /// Nothing written: this key is in use as a line.
    InUse(usize),
}

impl AllAttempt {
    fn new(core: &Arc<Core>, keys: &[Key], waits: bool) -> Armed<Self> {
        let id = waiter_id(core.fairness);
        let notify = Arc::new(Notify::new());
        if waits {
            core.single_node().hub.register(&id, &notify);
        }
        let layout = core.nodes.layout;
        Armed::new(AllAttempt {
            owner: owner_value(&id, &core.id),
            keys: keys
                .iter()
                .map(|k| (k.clone(), LockKeys::new(layout, core.config.prefix(), k)))
                .collect(),
            core: Arc::clone(core),
            id,
            waits,
            notify,
            rounds: 0,
        })
    }
}

impl Armed<AllAttempt> {
    /// One take-all round; a queue record it writes lives three `poll`s.
    async fn take(&mut self, poll: Duration) -> Result<Took> {
        self.rounds += 1;
        let core = Arc::clone(&self.core);
        let id = if self.waits { self.id.as_str() } else { "" };
        let parts: Vec<Part<'_>> = self
            .keys
            .iter()
            .map(|(_, keys)| Part {
                keys,
                owner: &self.owner,
                id,
            })
            .collect();
        let (answer, started) = run(&core, &parts, false, poll).await?;
        drop(parts);
        let tokens = match answer {
            AllAnswer::Taken(tokens) if tokens.len() == self.keys.len() => tokens,
            AllAnswer::Busy(ms) => {
                let expires_in = u64::try_from(ms).ok().map(Duration::from_millis);
                return Ok(Took::Busy(expires_in));
            }
            AllAnswer::InUseAsLine(i) => return Ok(Took::InUse(i)),
            _ => return Err(core.unexpected("take all")),
        };
        if core.config.validity_left(started.elapsed()).is_none() {
            return Ok(Took::Late);
        }
        self.set_armed(false);
        let guards = self.keys.iter().zip(tokens).map(|((key, keys), token)| {
            held_lock::guard(
                Arc::clone(&core),
                key.clone(),
                keys.clone(),
                self.owner.clone(),
                token,
                started,
                &[(0, token)],
            )
        });
        Ok(Took::All(guards.collect()))
    }
}

impl TakeBack for AllAttempt {
    /// Leaves every key's queue, releasing what was granted meanwhile.
    fn take_back(&mut self) -> impl Future<Output = ()> + Send + 'static {
        let keys: Vec<LockKeys> = self.keys.iter().map(|(_, k)| k.clone()).collect();
        let (id, owner) = (self.id.clone(), self.owner.clone());
        pace::leave(Arc::clone(&self.core), vec![0], move |core, nodes| {
            let (keys, id, owner) = (keys.clone(), id.clone(), owner.clone());
            async move {
                let left = join_all(
                    keys.iter()
                        .map(|k| send_leave(&core, k, &id, &owner, &nodes)),
                );
                match left.await.iter().any(|missed| !missed.is_empty()) {
                    true => nodes,
                    false => Vec::new(),
                }
            }
        })
    }
}

impl Drop for AllAttempt {
    fn drop(&mut self) {
        if self.waits {
            self.core.single_node().hub.deregister(&self.id);
        }
    }
}

/// Runs ENQUEUE ALL (`enqueue`) or TAKE ALL over `parts` on the one
/// node: its answer, and when it was sent.
pub(crate) async fn run(
    core: &Core,
    parts: &[Part<'_>],
    enqueue: bool,
    poll: Duration,
) -> Result<(AllAnswer, Instant)> {
    let (script, op) = match enqueue {
        true => (&*ENQUEUE_ALL_SCRIPT, "enqueue all"),
        false => (&*TAKE_ALL_SCRIPT, "take all"),
    };
    let node = core.single_node();
    let ttl_ms = core.config.ttl_ms().to_string();
    let record_ms = record_ttl(poll).as_millis().to_string();
    let loss_wait_ms = core.config.data_loss_wait_ms();
    let shared = Shared {
        ttl_ms: &ttl_ms,
        fairness: core.fairness,
        hub: &node.hub.id,
        record_ms: &record_ms,
        loss_wait_ms: &loss_wait_ms,
        joined: Joined::No,
    };
    let (keys, args) = keys_and_args(parts, &shared);
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let started = Instant::now();
    let call = Call {
        script,
        keys: &keys,
        args,
        reach: Reach::Replicas,
        admission: Admission::InTurn,
    };
    match node.run::<Vec<i64>>(call).await {
        Ok(answer) => Ok((read(&answer, parts.len(), enqueue), started)),
        Err(e) => Err(core.nodes.unavailable(op, vec![e.slot_per_lock(PER_LOCK)])),
    }
}
