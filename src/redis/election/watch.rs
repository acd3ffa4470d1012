//! Who leads an election on Redis: one read (`READ`), and the observer's
//! task, which follows the election's channel and re-reads when the
//! leader's lock is due to expire (an expiry sends no message), at the
//! next poll (`min(TTL/3, 1 s)`) and after its subscription was lost.
//! Every state it reads or is told carries its version (`protocol.rs`):
//! it passes on only what is newer than what it has.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSubStream;

use super::protocol::{ElectionKeys, READ, Read, State, announced};
use crate::redis::connect::failed_op::FailedOp;
use crate::redis::connect::node::{Admission, Reach};
use crate::redis::state::Core;
use crate::util::backoff::Backoff;
use crate::{ChangeSender, Key, LeaderWatch, Result};

/// Reads the election's state at one point.
pub(crate) async fn read(core: &Core, name: &Key, keys: &ElectionKeys) -> Result<State> {
    let read = read_raw(core, keys).await?;
    Ok(read.state(name))
}

async fn read_raw(core: &Core, keys: &ElectionKeys) -> Result<Read> {
    // Bytes, not text: a lock key or counter someone else wrote need not
    // be UTF-8 (then it is nobody's lock, or no counter).
    type Reply = (Option<Vec<u8>>, i64, Option<Vec<u8>>, Option<Vec<u8>>);
    let (lock, pttl, record, fence): Reply = core
        .single_node()
        .run_bytes(
            &READ,
            &keys.script_keys(),
            &[],
            (Reach::Master, Admission::InTurn),
        )
        .await
        .map_err(|e| {
            crate::Error::from(FailedOp {
                op: "read the leader",
                total: 1,
                quorum: 1,
                errors: vec![e],
            })
        })?;
    let text = |v: Option<Vec<u8>>| v.and_then(|v| String::from_utf8(v).ok());
    Ok(Read {
        lock: text(lock),
        pttl,
        record,
        fence: text(fence),
    })
}

/// Subscribes to the election's channel on attempt `n`; `None` when it
/// cannot now (the observer then polls until it can).
async fn subscribe(core: &Core, channel: &str, n: usize) -> Option<PubSubStream> {
    let limit = core.config.node_timeout();
    let open = async {
        let client = core.single_node().subscribe.client(n).await.ok()?;
        let mut pubsub = client.get_async_pubsub().await.ok()?;
        pubsub.subscribe(channel).await.ok()?;
        Some(pubsub.into_on_message())
    };
    tokio::time::timeout(limit, open).await.ok().flatten()
}

/// Follows election `name`: subscribes, reads the state (an error of this
/// first read is the caller's), then sends it and every newer state.
pub(crate) async fn observe(core: Arc<Core>, name: Key, keys: ElectionKeys) -> Result<LeaderWatch> {
    let messages = subscribe(&core, &keys.channel, 0).await;
    let first = read_raw(&core, &keys).await?;
    let (tx, rx) = LeaderWatch::channel();
    let follower = Follower {
        state: first.state(&name),
        expires_in: first.expires_in(),
        core,
        name,
        keys,
        tx,
    };
    if follower.tx.send(Ok(follower.state.leader.clone())).is_err() {
        return Ok(LeaderWatch::new(rx, None));
    }
    let task = tokio::spawn(follower.follow(messages));
    Ok(LeaderWatch::new(rx, Some(task.abort_handle())))
}

/// An observer's task.
struct Follower {
    core: Arc<Core>,
    name: Key,
    keys: ElectionKeys,
    /// The newest state passed on.
    state: State,
    /// When the leader's lock expires unless renewed, as last read.
    expires_in: Option<Duration>,
    tx: ChangeSender,
}

impl Follower {
    /// Passes `state` on if it is newer; `false` once the watch is gone.
    fn offer(&mut self, state: State) -> bool {
        if state.version <= self.state.version {
            return true;
        }
        self.state = state;
        self.tx.send(Ok(self.state.leader.clone())).is_ok()
    }

    /// Reads the state and passes it on; `false` once the watch is gone.
    /// A read that fails is left to the next one (a passing outage).
    async fn reread(&mut self) -> bool {
        match read_raw(&self.core, &self.keys).await {
            Ok(read) => {
                self.expires_in = read.expires_in();
                self.offer(read.state(&self.name))
            }
            Err(_) => true,
        }
    }

    /// How long to wait for a message before reading again.
    fn patience(&self) -> Duration {
        let poll = self.core.poll();
        match (&self.state.leader, self.expires_in) {
            (Some(_), Some(left)) => poll.min(left + Duration::from_millis(1)),
            _ => poll,
        }
    }

    async fn follow(mut self, mut messages: Option<PubSubStream>) {
        let mut backoff = Backoff::new(Duration::from_millis(50), self.core.poll());
        for attempt in 1.. {
            let Some(stream) = messages.as_mut() else {
                // Not subscribed: poll until a subscription is up, then
                // read again (changes sent meanwhile were not heard).
                backoff.sleep().await;
                messages = subscribe(&self.core, &self.keys.channel, attempt).await;
                if messages.is_some() {
                    backoff.reset();
                }
                if !self.reread().await {
                    return;
                }
                continue;
            };
            match tokio::time::timeout(self.patience(), stream.next()).await {
                Ok(Some(message)) => {
                    let payload: Vec<u8> = message.get_payload().unwrap_or_default();
                    if let Some(state) = announced(&self.name, &payload)
                        && !self.offer(state)
                    {
                        return;
                    }
                }
                Ok(None) => messages = None,
                Err(_) => {
                    if !self.reread().await {
                        return;
                    }
                }
            }
        }
    }
}
