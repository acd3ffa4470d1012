//! [`EtcdElector`]: leader election on etcd, a fair lock per election plus
//! the leader's record (see the spec's "Leader election" section in
//! `protocol/mod.rs`).

use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::Client;

use super::record::EtcdRecord;
use super::watch;
use crate::election::leadership::Office;
use crate::etcd::client::request::retry_backoff;
use crate::etcd::config::{EtcdConfig, Layout};
use crate::etcd::etcd_layout::elect;
use crate::etcd::lock::etcd_locker::EtcdLocker;
use crate::etcd::lock::held_lock::HeldLock;
use crate::{Context, Elector, Error, Key, Leader, LeaderWatch, Leadership, Locker, Result};

/// Leader election on etcd: candidates of one elector share its session
/// lease (a crashed process's candidates and leaderships end a TTL later).
///
/// An election `name` is the fair lock `name` of the same prefix: its
/// leader holds the lock, its candidates wait in the lock's queue
/// (`fairlock status` shows them), and the term is the lock's fencing
/// token. Give elections names that no plain lock uses.
///
/// Cheap to clone; clones share the session. Dropping the last clone (and
/// the last leadership) revokes the session lease;
/// [`EtcdElector::close`] does the same and reports errors.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// use fairlock::{Context, Elector, Key};
/// use fairlock::etcd::{EtcdConfig, EtcdElector};
///
/// let elector = EtcdElector::connect(EtcdConfig::new(["127.0.0.1:2379"])).await?;
/// let leadership = elector
///     .campaign(&Context::background(), &Key::from("scheduler"), b"10.0.0.7:8080")
///     .await?;
/// // ... lead, fencing writes with leadership.fencing_token() ...
/// leadership.resign().await?;
/// elector.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdElector {
    locker: EtcdLocker,
}

impl EtcdElector {
    /// The elector whose campaigns go through `locker`, a fair one.
    pub(crate) fn of(locker: EtcdLocker) -> Self {
        EtcdElector { locker }
    }

    /// Connects to etcd and makes an elector with its own session lease.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo() -> fairlock::Result<()> {
    /// use fairlock::etcd::{EtcdConfig, EtcdElector};
    ///
    /// let elector = EtcdElector::connect(EtcdConfig::from_env()?).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`EtcdLocker::connect`].
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is created in etcd until the first campaign.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        Ok(EtcdLocker::connect(config, true).await?.elector())
    }

    /// An elector on an existing connection (see
    /// [`EtcdLocker::from_client`]).
    #[must_use]
    pub fn from_client(client: Client, config: EtcdConfig) -> Self {
        EtcdLocker::from_client(client, config, true).elector()
    }

    /// The id of this elector's candidates in the election's queue
    /// ([`crate::LockWaiter::locker`] in `status`).
    #[must_use]
    pub fn id(&self) -> &str {
        self.locker.id()
    }

    /// The fair locker the campaigns go through (same session).
    #[must_use]
    pub fn locker(&self) -> &EtcdLocker {
        &self.locker
    }

    /// Revokes the session lease now: every candidate of this elector
    /// leaves the line, and every leadership it holds ends at once.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(elector: fairlock::etcd::EtcdElector) -> fairlock::Result<()> {
    /// elector.close().await?; // the next candidates in line are elected
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`EtcdLocker::close`].
    ///
    /// # Cancel safety
    /// As [`EtcdLocker::close`].
    pub async fn close(self) -> Result<()> {
        self.locker.close().await
    }
}

impl EtcdLocker {
    /// An elector on this locker's connection and configuration, with a
    /// session lease of its own (see [`EtcdLocker::another`]).
    #[must_use]
    pub fn elector(&self) -> EtcdElector {
        EtcdElector::of(self.another(true))
    }
}

#[async_trait]
impl Elector for EtcdElector {
    async fn campaign(&self, ctx: &Context, name: &Key, value: &[u8]) -> Result<Leadership> {
        // If etcd does not answer a resignation in time, it goes on.
        let office = Office {
            patience: 2 * self.locker.config().request_timeout(),
            backoff: retry_backoff(),
            resign_within: self.locker.config().request_timeout(),
        };
        if self.locker.config().layout() == Layout::Etcd {
            return elect::campaign(self.locker.state(), (ctx, name, value), office).await;
        }
        let lock = self.locker.lock(ctx, name);
        Leadership::campaign((ctx, name, value), lock, office, |guard, owner| {
            let Some(held) = guard.backend().and_then(|b| b.downcast_ref::<HeldLock>()) else {
                return Err(Error::Unsupported(
                    "an etcd election needs a guard of the etcd backend".into(),
                ));
            };
            Ok(Box::new(EtcdRecord::new(
                held,
                name.clone(),
                owner,
                guard.lost_token(),
            )))
        })
        .await
    }

    async fn leader(&self, name: &Key) -> Result<Option<Leader>> {
        name.validate()?;
        if self.locker.config().layout() == Layout::Etcd {
            return elect::leader(self.locker.inner(), name).await;
        }
        let state = self.locker.inner();
        Ok(watch::read(state, name, &state.keys(name)).await?.0)
    }

    async fn observe(&self, name: &Key) -> Result<LeaderWatch> {
        name.validate()?;
        if self.locker.config().layout() == Layout::Etcd {
            return elect::observe(Arc::clone(self.locker.state()), name).await;
        }
        watch::observe(self.locker.clone(), name).await
    }
}
