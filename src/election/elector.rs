//! Leader election: the [`Elector`] trait every backend with elections
//! implements, and [`LeaderWatch`] (and its [`LeaderStream`] form), the
//! changes of an election's leader.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::{Context, Error, Key, Leader, Leadership, Result};

/// How many changes a [`LeaderWatch`] keeps for a consumer that has not
/// read them: past that, the oldest are dropped, so a consumer that falls
/// behind gets the latest state rather than an unbounded backlog.
pub const BACKLOG: usize = 64;

/// The changes of an election ([`crate::Locker::observe`]): its state
/// when the stream is first polled, then every change, as [`LeaderWatch`]
/// yields them. Ends after an error that ended the watch for good.
pub type LeaderStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<Option<Leader>>> + Send + 'static>>;

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
/// println!("leading in term {}", leadership.fencing_token());
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
    /// [`Error::LockLost`] when the leadership was lost before its value
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
    ///     println!("term {}: {:?}", leader.fencing_token, leader.value_str());
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
    ///         Some(leader) => println!("leader: {:?} (term {})", leader.value_str(), leader.fencing_token),
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
/// time nobody leads, in the order they happened (at most [`BACKLOG`]
/// unread: then the oldest go).
///
/// Dropping the watch stops it.
#[must_use = "a watch does nothing unless its changes are read"]
pub struct LeaderWatch {
    changes: Arc<Changes>,
    /// The last state yielded: a state equal to it (left after the oldest
    /// changes were dropped) is skipped.
    last: Option<Option<Leader>>,
    task: Option<AbortHandle>,
}

/// The sending half of a [`LeaderWatch`], for backend authors
/// ([`LeaderWatch::channel`]): sending never waits; past [`BACKLOG`]
/// unread changes the oldest is dropped.
pub struct ChangeSender {
    changes: Arc<Changes>,
}

/// The receiving half of [`LeaderWatch::channel`], for
/// [`LeaderWatch::new`].
pub struct ChangeReceiver {
    changes: Arc<Changes>,
}

/// The changes not read yet, shared by both halves.
#[derive(Default)]
struct Changes {
    queue: Mutex<Queue>,
    /// Told on every send and when the last sender goes.
    sent: Notify,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Result<Option<Leader>>>,
    senders: usize,
    receiver_gone: bool,
}

impl Changes {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The watch whose receiver is gone.
#[derive(Debug)]
pub struct Closed;

impl ChangeSender {
    /// Queues `change` for the watch.
    ///
    /// # Errors
    /// [`Closed`] once the watch was dropped: stop sending.
    pub fn send(&self, change: Result<Option<Leader>>) -> std::result::Result<(), Closed> {
        let mut queue = self.changes.queue();
        if queue.receiver_gone {
            return Err(Closed);
        }
        if queue.items.len() >= BACKLOG {
            queue.items.pop_front();
        }
        queue.items.push_back(change);
        drop(queue);
        self.changes.sent.notify_one();
        Ok(())
    }
}

impl Clone for ChangeSender {
    fn clone(&self) -> Self {
        self.changes.queue().senders += 1;
        ChangeSender {
            changes: Arc::clone(&self.changes),
        }
    }
}

impl Drop for ChangeSender {
    fn drop(&mut self) {
        self.changes.queue().senders -= 1;
        self.changes.sent.notify_one();
    }
}

impl LeaderWatch {
    /// A channel for a backend's changes: send the current state first.
    /// For backend authors.
    #[must_use]
    pub fn channel() -> (ChangeSender, ChangeReceiver) {
        let changes = Arc::new(Changes::default());
        changes.queue().senders = 1;
        (
            ChangeSender {
                changes: Arc::clone(&changes),
            },
            ChangeReceiver { changes },
        )
    }

    /// A watch that yields what the backend sends on `changes` (the
    /// current state first); `task`, if any, is the backend's task that
    /// sends them, aborted when the watch is dropped. For backend authors.
    pub fn new(changes: ChangeReceiver, task: Option<AbortHandle>) -> Self {
        LeaderWatch {
            changes: changes.changes,
            last: None,
            task,
        }
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
        loop {
            let notified = self.changes.sent.notified();
            let item = {
                let mut queue = self.changes.queue();
                match queue.items.pop_front() {
                    Some(item) => Some(item),
                    None if queue.senders == 0 => {
                        return Err(Error::Backend {
                            backend: "fairlock",
                            op: "observe",
                            source: "the leader watch ended".into(),
                        });
                    }
                    None => None,
                }
            };
            match item {
                Some(Ok(state)) if self.last.as_ref() == Some(&state) => {}
                Some(Ok(state)) => {
                    self.last = Some(state.clone());
                    return Ok(state);
                }
                Some(Err(e)) => return Err(e),
                None => notified.await,
            }
        }
    }

    /// The watch as a stream ([`LeaderStream`]), which ends after an
    /// error.
    pub fn into_stream(self) -> LeaderStream {
        leader_stream(async move { Ok(self) })
    }
}

/// A stream that opens the watch `open` returns when first polled, then
/// yields its changes ([`LeaderWatch::into_stream`]); an error opening it
/// is its one item. For backends' [`crate::Locker::observe`].
pub fn leader_stream<F>(open: F) -> LeaderStream
where
    F: std::future::Future<Output = Result<LeaderWatch>> + Send + 'static,
{
    Box::pin(futures_util::stream::unfold(
        Opening::Start(Box::pin(open)),
        |opening| async move {
            let mut watch = match opening {
                Opening::Start(open) => match open.await {
                    Ok(watch) => watch,
                    Err(e) => return Some((Err(e), Opening::Done)),
                },
                Opening::Open(watch) => watch,
                Opening::Done => return None,
            };
            match watch.next().await {
                Ok(state) => Some((Ok(state), Opening::Open(watch))),
                Err(e) => Some((Err(e), Opening::Done)),
            }
        },
    ))
}

/// Where a [`leader_stream`] is.
enum Opening {
    Start(Pin<Box<dyn std::future::Future<Output = Result<LeaderWatch>> + Send>>),
    Open(LeaderWatch),
    Done,
}

/// A stream whose one item is `err`.
pub(crate) fn failed_stream(err: Error) -> LeaderStream {
    Box::pin(tokio_stream::once(Err(err)))
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.changes.queue().receiver_gone = true;
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
