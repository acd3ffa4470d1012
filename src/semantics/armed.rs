//! What every backend's waiter does alike when its caller gives up: the
//! armed attempt that takes back what it wrote when dropped, giving up
//! with a bounded wait for that, and the race of a wait with the caller's
//! context.
//!
//! A backend says only what taking back is ([`TakeBack`]: remove a queue
//! entry, leave a line, release a lock granted meanwhile); when and how
//! it runs is here.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{Context, Error, Key};

/// A call's writes on its server, and how to take them back.
pub(crate) trait TakeBack {
    /// The work that takes back what the call wrote, releasing a lock or
    /// an entry granted meanwhile. Called at most once; the future runs as
    /// a task of its own (so dropping the caller does not stop it) and
    /// owns what it needs. A caller giving up waits for it (within a
    /// bound): retries that should not hold the caller up, the future
    /// spawns on its own. Work that needs no request may be done here at
    /// once, returning a ready future.
    fn take_back(&mut self) -> impl Future<Output = ()> + Send + 'static;
}

/// An attempt that takes back what it wrote when dropped, unless disarmed
/// (granted, or nothing written). Derefs to the attempt.
pub(crate) struct Armed<A: TakeBack> {
    attempt: A,
    armed: bool,
}

impl<A: TakeBack> Armed<A> {
    /// `attempt`, armed.
    pub(crate) fn new(attempt: A) -> Self {
        Armed {
            attempt,
            armed: true,
        }
    }

    /// Whether dropping takes back what was written: after a grant (or
    /// when nothing was written), no.
    pub(crate) fn set_armed(&mut self, armed: bool) {
        self.armed = armed;
    }

    /// Gives up: takes back what was written, waiting for that at most
    /// `within` (the backend's request timeout); past it the work goes on
    /// in the background.
    pub(crate) async fn abandon(mut self, within: Duration) {
        if let Some(task) = self.start() {
            let _ = tokio::time::timeout(within, task).await;
        }
    }

    /// Starts taking back, if armed and a runtime is there to run it.
    fn start(&mut self) -> Option<JoinHandle<()>> {
        if !std::mem::take(&mut self.armed) {
            return None;
        }
        let work = self.attempt.take_back();
        let rt = tokio::runtime::Handle::try_current().ok()?;
        Some(rt.spawn(work))
    }
}

impl<A: TakeBack> Deref for Armed<A> {
    type Target = A;

    fn deref(&self) -> &A {
        &self.attempt
    }
}

impl<A: TakeBack> DerefMut for Armed<A> {
    fn deref_mut(&mut self) -> &mut A {
        &mut self.attempt
    }
}

impl<A: TakeBack> Drop for Armed<A> {
    fn drop(&mut self) {
        self.start();
    }
}

/// `wait`'s answer, unless `ctx` ends first: then its error. A turn that
/// comes at the same moment as the context's end wins (fewer needless
/// handoffs).
pub(crate) async fn turn_or_done<T, E: From<Error>>(
    ctx: &Context,
    key: &Key,
    wait: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    tokio::select! {
        biased;
        turn = wait => turn,
        err = ctx.done(key.as_str()) => Err(err.into()),
    }
}

/// Sleeps `pause` (before a retry), unless `ctx` ends first: then its error.
pub(crate) async fn pause_or_done(ctx: &Context, key: &Key, pause: Duration) -> Result<(), Error> {
    tokio::select! {
        () = tokio::time::sleep(pause) => Ok(()),
        err = ctx.done(key.as_str()) => Err(err),
    }
}
