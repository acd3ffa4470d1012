//! Leader election: the [`Elector`] trait every backend with elections
//! implements, and [`LeaderWatch`], the changes of an election's leader.

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::{Context, Error, Key, Leader, Leadership, Result};

/// A source of leader elections: candidates campaign for an election's
/// name and are elected one at a time, in arrival order; followers ask who
/// leads, or follow every change.
///
/// An election is a fair lock on its name (its leader holds the lock,
/// candidates wait in its queue), plus the value the leader shows its
/// followers. Electors are cheap to share (`Arc<dyn Elector>`); one
/// elector may campaign for several elections, and for one election from
/// several tasks (each is a candidate of its own). The trait is
/// dyn-compatible; [`crate::get_elector`] hands out `Arc<dyn Elector>`.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// use fairlock::{Context, Key};
///
/// fairlock::etcd::register(fairlock::etcd::EtcdConfig::from_env()?).await?;
/// let elector = fairlock::get_elector()?;
/// let leadership = elector
///     .campaign(&Context::background(), &Key::from("scheduler"), b"10.0.0.7:8080")
///     .await?;
/// println!("leading in term {}", leadership.term());
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Elector: Send + Sync + 'static {
    /// Campaigns for election `name` with `value` (what followers see of
    /// this candidate), waiting in arrival order until elected, or until
    /// the context is cancelled or its deadline passes.
    ///
    /// Returns once elected and the value is visible to observers.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(elector: &dyn fairlock::Elector) -> fairlock::Result<()> {
    /// use std::time::Duration;
    /// use fairlock::{Context, Key};
    ///
    /// let ctx = Context::background().with_timeout(Duration::from_secs(60));
    /// match elector.campaign(&ctx, &Key::from("scheduler"), b"node-2").await {
    ///     Ok(leadership) => leadership.resign().await?,
    ///     Err(fairlock::Error::Timeout { .. }) => println!("not elected within a minute"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`] or [`Error::Cancelled`] when the context ends
    /// first: the candidate has left the line (or resigned, if it was
    /// elected meanwhile) before the error is returned, as a
    /// [`crate::Locker::lock`] that gives up. [`Error::InvalidKey`] for a
    /// bad name (election names follow the rules of [`Key`]);
    /// [`Error::InvalidValue`] for a value over [`crate::MAX_VALUE_LEN`];
    /// [`Error::NotLeader`] when the leadership was lost before its value
    /// could be written; backend errors.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the line, or resigns if it
    /// was elected meanwhile, in the background.
    async fn campaign(&self, ctx: &Context, name: &Key, value: &[u8]) -> Result<Leadership>;

    /// The current leader of election `name`, or `None` when nobody leads
    /// it (no candidate was elected, or the one elected has not written
    /// its value yet).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(elector: &dyn fairlock::Elector) -> fairlock::Result<()> {
    /// if let Some(leader) = elector.leader(&fairlock::Key::from("scheduler")).await? {
    ///     println!("term {}: {:?}", leader.term, leader.value_str());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for a bad name; backend errors.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn leader(&self, name: &Key) -> Result<Option<Leader>>;

    /// Follows election `name`: the returned watch yields the current
    /// leader first, then every change, in order (see [`LeaderWatch`]).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(elector: &dyn fairlock::Elector) -> fairlock::Result<()> {
    /// let mut changes = elector.observe(&fairlock::Key::from("scheduler")).await?;
    /// loop {
    ///     match changes.next().await? {
    ///         Some(leader) => println!("leader: {:?} (term {})", leader.value_str(), leader.term),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidKey`] for a bad name; backend errors from the first
    /// read.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is left running if the future is dropped.
    async fn observe(&self, name: &Key) -> Result<LeaderWatch>;
}

/// The changes of an election's leader ([`Elector::observe`]): the leader
/// when the watch started, then each new leader, each new value, and each
/// time nobody leads, in the order they happened.
///
/// Dropping the watch stops it.
#[must_use = "a watch does nothing unless its changes are read"]
pub struct LeaderWatch {
    changes: mpsc::UnboundedReceiver<Result<Option<Leader>>>,
    task: Option<AbortHandle>,
}

impl LeaderWatch {
    /// A watch that yields what the backend sends on `changes` (the
    /// current state first); `task`, if any, is the backend's task that
    /// sends them, aborted when the watch is dropped. For backend authors.
    pub fn new(
        changes: mpsc::UnboundedReceiver<Result<Option<Leader>>>,
        task: Option<AbortHandle>,
    ) -> Self {
        LeaderWatch { changes, task }
    }

    /// The next state of the election: `Some(leader)` or `None` when
    /// nobody leads. The first call answers at once with the state when
    /// the watch started; later calls wait for a change. Two states in a
    /// row always differ.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> fairlock::Result<()> {
    /// use fairlock::{Context, Elector, Key, memory::MemoryStore};
    ///
    /// let elector = MemoryStore::new().elector();
    /// let name = Key::from("scheduler");
    /// let mut changes = elector.observe(&name).await?;
    /// assert_eq!(changes.next().await?, None); // nobody leads yet
    /// let leadership = elector.campaign(&Context::background(), &name, b"node-1").await?;
    /// assert_eq!(changes.next().await?.map(|l| l.value), Some(b"node-1".to_vec()));
    /// leadership.resign().await?;
    /// assert_eq!(changes.next().await?, None);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// A backend error that ended the watch for good (a permission
    /// withdrawn, say); passing outages do not end it: the changes arrive
    /// once the backend answers again.
    ///
    /// # Cancel safety
    /// Cancel safe: a change is not lost if the future is dropped.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        match self.changes.recv().await {
            Some(change) => change,
            None => Err(Error::Backend {
                backend: "fairlock",
                op: "observe",
                source: "the leader watch ended".into(),
            }),
        }
    }
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for LeaderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderWatch").finish_non_exhaustive()
    }
}
