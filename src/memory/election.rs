//! Leader election in memory: [`MemoryElector`], a fair lock of the store
//! per election, and a board of the leaders' values and their observers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::election::leadership::Office;
use crate::util::backoff::Backoff;
use crate::{
    ChangeSender, Context, Elector, Key, Leader, LeaderRecord, LeaderWatch, Leadership, Locker,
    Owner, Result,
};

type Observer = ChangeSender;

/// The elections of one store: who leads each, and who watches it.
#[derive(Default)]
pub(super) struct Board {
    names: Mutex<HashMap<String, Election>>,
}

#[derive(Default)]
struct Election {
    leader: Option<Leader>,
    observers: Vec<Observer>,
}

impl Board {
    fn names(&self) -> MutexGuard<'_, HashMap<String, Election>> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets `name`'s leader to what `next` makes of the current one
    /// (`None`: leave it), telling the observers of a change.
    fn update(&self, name: &str, next: impl FnOnce(Option<&Leader>) -> Option<Option<Leader>>) {
        let mut names = self.names();
        let election = names.entry(name.to_owned()).or_default();
        if let Some(next) = next(election.leader.as_ref())
            && next != election.leader
        {
            election
                .observers
                .retain(|o| o.send(Ok(next.clone())).is_ok());
            election.leader = next;
        }
        if election.leader.is_none() && election.observers.is_empty() {
            names.remove(name);
        }
    }

    /// `true` when no election has a leader.
    pub(super) fn has_no_leaders(&self) -> bool {
        self.names().values().all(|e| e.leader.is_none())
    }
}

/// Leader election on a [`MemoryStore`](super::MemoryStore), for tests:
/// the same semantics as etcd's ([`crate::etcd::EtcdElector`]) within one
/// process, without expiry. An election is the fair lock of its name in
/// the store. Made by [`MemoryStore::elector`](super::MemoryStore::elector).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
/// use fairlock::{Context, Elector, Key, memory::MemoryStore};
///
/// let elector = MemoryStore::new().elector();
/// let name = Key::from("scheduler");
/// let leadership = elector.campaign(&Context::background(), &name, b"node-1").await?;
/// let leader = elector.leader(&name).await?.expect("a leader");
/// assert_eq!((leader.value.as_slice(), leader.fencing_token), (&b"node-1"[..], leadership.fencing_token()));
/// leadership.resign().await?;
/// assert!(elector.leader(&name).await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemoryElector {
    /// A fair locker of the store.
    locker: Arc<dyn Locker>,
    board: Arc<Board>,
}

impl MemoryElector {
    /// The elector whose campaigns go through `locker` (a fair one) and
    /// whose leaders' values go on `board`.
    pub(super) fn new(locker: Arc<dyn Locker>, board: Arc<Board>) -> Self {
        MemoryElector { locker, board }
    }
}

/// The value of one leadership on the board. It exists only while its
/// [`Leadership`] holds the lock (a lock in memory is never lost), so its
/// proclaims need no fence.
struct MemoryRecord {
    board: Arc<Board>,
    name: Key,
    term: u64,
    owner: Owner,
    since: SystemTime,
}

#[async_trait]
impl LeaderRecord for MemoryRecord {
    async fn proclaim(&self, value: &[u8]) -> Result<()> {
        let leader = Leader {
            name: self.name.to_string(),
            value: value.to_vec(),
            fencing_token: self.term,
            owner: self.owner.clone(),
            since: Some(self.since),
        };
        self.board
            .update(self.name.as_str(), |_| Some(Some(leader)));
        Ok(())
    }

    async fn retract(self: Box<Self>) -> Result<()> {
        let term = self.term;
        self.board.update(self.name.as_str(), |now| {
            now.filter(|l| l.fencing_token == term).map(|_| None)
        });
        Ok(())
    }
}

#[async_trait]
impl Elector for MemoryElector {
    async fn campaign(&self, ctx: &Context, name: &Key, value: &[u8]) -> Result<Leadership> {
        // A value in memory is written at once: nothing to retry.
        let office = Office {
            patience: Duration::ZERO,
            backoff: Backoff::new(Duration::ZERO, Duration::ZERO),
            resign_within: Duration::from_secs(1),
        };
        let lock = self.locker.lock(ctx, name);
        Leadership::campaign((ctx, name, value), lock, office, |guard, (owner, since)| {
            Ok(Box::new(MemoryRecord {
                board: Arc::clone(&self.board),
                name: name.clone(),
                term: guard.fencing_token(),
                owner: Owner::parse(&owner),
                since,
            }))
        })
        .await
    }

    async fn leader(&self, name: &Key) -> Result<Option<Leader>> {
        name.validate()?;
        let names = self.board.names();
        Ok(names.get(name.as_str()).and_then(|e| e.leader.clone()))
    }

    async fn observe(&self, name: &Key) -> Result<LeaderWatch> {
        name.validate()?;
        let (tx, rx) = LeaderWatch::channel();
        let mut names = self.board.names();
        let election = names.entry(name.to_string()).or_default();
        let _ = tx.send(Ok(election.leader.clone()));
        election.observers.push(tx);
        Ok(LeaderWatch::new(rx, None))
    }
}
