//! `EtcdLocker`: connecting, `try_lock`, `lock`, and the attempt bookkeeping
//! that makes cancellation leave nothing behind.

use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, GetResponse, PutOptions, SortOrder,
    SortTarget, Txn, TxnOp, TxnOpResponse, TxnResponse,
};

use super::config::EtcdConfig;
use super::keys::{Layout, is_waiter, owner_value};
use super::release::{self, Held, Next};
use super::session::{FIRST_BACKOFF, Lease, MAX_BACKOFF, Session};
use super::shared_watch::SharedWatches;
use super::slots::{Slot, Slots};
use super::watch::WatchHub;
use super::{
    etcd_err, is_lease_not_found, is_server_answer, is_server_answer_etcd, is_transient,
    is_transient_etcd, queue, timeout_err,
};
use crate::observe::{self, Site};
use crate::{Context, Error, Key, LockGuard, Locker, Result};
use tokio::task::JoinHandle;

/// How many queue entries a fair `try_lock` looks at when the lock is free
/// but the queue is not empty (to tell entries fairlock did not write from
/// waiters); with more, it answers "held".
const FOREIGN_SCAN: i64 = 16;

/// A fair or unfair locker on etcd, with its own session lease.
///
/// Cheap to clone; clones share the session. Dropping the last clone (and
/// the last guard) revokes the session lease, which frees everything it
/// still held; [`EtcdLocker::close`] does the same and reports errors.
///
/// # Examples
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// use fairlock::{Context, Key, Locker};
/// use fairlock::etcd::{EtcdConfig, EtcdLocker};
///
/// let locker = EtcdLocker::connect(EtcdConfig::new(["127.0.0.1:2379"]), true).await?;
/// if let Some(guard) = locker.try_lock(&Key::from("reports")).await? {
///     // ... work, passing guard.fencing_token() to the resource ...
///     guard.unlock().await?;
/// }
/// locker.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdLocker {
    inner: Arc<Inner>,
}

/// Everything a locker's operations share.
pub(crate) struct Inner {
    pub client: Client,
    pub config: EtcdConfig,
    pub fair: bool,
    /// Names this locker's level in the queue (`_OWNERS_/<id>/...`).
    pub id: String,
    pub session: Session,
    /// The queue entry names in use (see `slots.rs`).
    pub slots: Arc<Slots>,
    pub hub: Arc<WatchHub>,
    pub shared: SharedWatches,
}

/// Connects and checks that etcd answers, within the connect timeout.
pub(crate) async fn connect(config: &EtcdConfig) -> Result<Client> {
    config.validate()?;
    let timeout = config.connect_timeout();
    use super::secure::{connect_error, tls_failure};
    let fail = |source: crate::BoxError| connect_error(config, source);
    let mut options = ConnectOptions::new()
        .with_connect_timeout(timeout)
        .with_keep_alive(std::time::Duration::from_secs(2), config.request_timeout())
        .with_keep_alive_while_idle(true)
        // A member cut off from its cluster ends our watches (we re-read)
        // instead of leaving them silent.
        .with_require_leader(true);
    if let Some((name, password)) = config.user() {
        // etcd lets an unused token expire (`--auth-token-ttl`): requests
        // refused for that re-authenticate once and are sent again.
        options = options
            .with_user(name.clone(), password.clone())
            .with_auto_token_refresh(true);
    }
    if let Some(tls) = super::secure::tls_options(config)? {
        options = options.with_tls(tls);
    }
    // Some endpoints may be down: the client's balancer can route the
    // first request to one of them, so retry until the connect timeout.
    let last = std::sync::Mutex::new(None);
    let attempt = async {
        let mut client = Client::connect(config.endpoints(), Some(options)).await?;
        let mut backoff = FIRST_BACKOFF;
        loop {
            match client.status().await {
                Ok(_) => return Ok::<_, etcd_client::Error>(client),
                // A failed handshake fails the same way on every retry.
                Err(e) if is_transient_etcd(&e) && tls_failure(config, &e).is_none() => {
                    {
                        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
                        // An answer from a server ("no leader") tells more
                        // than a member that refuses connections.
                        if last.as_ref().is_none_or(|old| {
                            is_server_answer_etcd(&e) || !is_server_answer_etcd(old)
                        }) {
                            *last = Some(e);
                        }
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => return Err(e),
            }
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(fail(Box::new(e))),
        Err(_) => match last.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(fail(Box::new(e))),
            None => Err(fail("no answer".into())),
        },
    }
}

impl EtcdLocker {
    /// Connects to etcd and makes a locker, fair (arrival order) or unfair.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad configuration; [`Error::Connect`]
    /// naming the endpoints when etcd does not answer within the connect
    /// timeout.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is created in etcd until the first lock.
    pub async fn connect(config: EtcdConfig, fair: bool) -> Result<Self> {
        let client = connect(&config).await?;
        Ok(Self::from_client(client, config, fair))
    }

    /// A locker on an existing connection. Its session lease is granted on
    /// first use. The configuration is not re-validated against etcd here.
    #[must_use]
    pub fn from_client(client: Client, config: EtcdConfig, fair: bool) -> Self {
        let hub = Arc::new(WatchHub::new(client.clone(), config.request_timeout()));
        EtcdLocker {
            inner: Arc::new(Inner {
                session: Session::new(client.clone(), config.ttl_secs(), config.request_timeout()),
                shared: SharedWatches::new(Arc::clone(&hub), config.request_timeout()),
                hub,
                slots: Arc::default(),
                id: uuid::Uuid::new_v4().simple().to_string(),
                client,
                config,
                fair,
            }),
        }
    }

    /// This locker's id: the `<locker id>` level of its queue keys, and
    /// [`crate::LockWaiter::locker`] in [`EtcdLocker::status`].
    #[must_use]
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }

    /// The configuration in use.
    #[must_use]
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// The etcd client this locker uses (e.g. to share it with others).
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The id of the current session lease, granting it if needed.
    ///
    /// # Errors
    /// Backend errors from the lease grant.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lease_id(&self) -> Result<i64> {
        Ok(self.inner.session.lease().await?.id)
    }

    /// The id of the current session lease, if one is granted (no request).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn session_lease(&self) -> Option<i64> {
        self.inner.session.current_id().await
    }

    /// Revokes the session lease now: every lock this locker holds or waits
    /// for is freed at once. Guards still alive report
    /// [`Error::LockLost`] on unlock.
    ///
    /// # Errors
    /// Backend errors from the revoke (the lease then expires after its TTL).
    ///
    /// # Cancel safety
    /// If dropped, the lease may or may not be revoked; it expires anyway.
    pub async fn close(self) -> Result<()> {
        self.inner.session.revoke().await
    }
}

impl Inner {
    pub fn layout(&self, key: &Key) -> Layout {
        Layout::new(self.config.prefix(), key)
    }

    // The request futures are boxed: kept inline they would make every
    // enclosing future, and so every waiting lock, several KiB larger.
    pub async fn txn(&self, op: &'static str, txn: Txn) -> Result<TxnResponse> {
        self.txn_within(op, txn, self.config.request_timeout())
            .await
    }

    /// A txn that gives up after `timeout` (for requests that are safe to
    /// repeat and that others wait for, such as a release).
    pub async fn txn_within(
        &self,
        op: &'static str,
        txn: Txn,
        timeout: std::time::Duration,
    ) -> Result<TxnResponse> {
        let mut kv = self.client.kv_client();
        tokio::time::timeout(timeout, Box::pin(kv.txn(txn)))
            .await
            .map_err(|_| timeout_err(op, timeout))?
            .map_err(etcd_err(op))
    }

    pub async fn get(
        &self,
        op: &'static str,
        key: Vec<u8>,
        opts: GetOptions,
    ) -> Result<GetResponse> {
        let mut kv = self.client.kv_client();
        let timeout = self.config.request_timeout();
        tokio::time::timeout(timeout, Box::pin(kv.get(key, Some(opts))))
            .await
            .map_err(|_| timeout_err(op, timeout))?
            .map_err(etcd_err(op))
    }

    /// Maps "lease not found" to [`Error::SessionLost`] (and forgets the
    /// lease so the next attempt grants a new one).
    pub async fn lease_error(&self, key: &Key, lease: &Lease, err: Error) -> Error {
        if !is_lease_not_found(&err) {
            return err;
        }
        self.session.forget(lease.id, true).await;
        Error::SessionLost {
            key: key.to_string(),
            reason: "the session lease expired before the request ran".into(),
        }
    }
}

/// Header revision of a response.
pub(crate) fn revision(resp: &TxnResponse) -> i64 {
    resp.header().map_or(0, |h| h.revision())
}

/// The `i`-th op response of a txn, if it was a range.
pub(crate) fn range_at(resp: &TxnResponse, i: usize) -> Option<GetResponse> {
    match resp.op_responses().into_iter().nth(i)? {
        TxnOpResponse::Get(get) => Some(get),
        _ => None,
    }
}

/// One call to `lock`/`try_lock`: its owner value and queue key, so that
/// giving up (error, cancel or drop) removes what it wrote.
pub(crate) struct Attempt {
    pub inner: Arc<Inner>,
    pub key: Key,
    pub layout: Layout,
    pub value: Vec<u8>,
    pub queue_key: Option<Vec<u8>>,
    /// The slot naming `queue_key`.
    slot: Option<Slot>,
    /// The lease its writes used; none means nothing was written.
    lease: Option<Arc<Lease>>,
    /// A write whose outcome is not known yet.
    inflight: Option<JoinHandle<Result<TxnResponse>>>,
    /// A write failed in a way that does not tell whether etcd applied it
    /// (no answer, connection lost): it may still land later.
    unanswered: bool,
    armed: bool,
}

impl Attempt {
    fn new(inner: &Arc<Inner>, key: &Key, queued: bool) -> Self {
        let layout = inner.layout(key);
        let mode = if inner.fair { 'f' } else { 'u' };
        let attempt = format!("{mode}{}", uuid::Uuid::new_v4().simple());
        let slot = queued.then(|| inner.slots.take(&layout.lock));
        Attempt {
            queue_key: slot
                .as_ref()
                .map(|s| layout.waiter(&inner.id, inner.fair, s.number())),
            slot,
            value: owner_value(&attempt),
            inner: Arc::clone(inner),
            key: key.clone(),
            layout,
            lease: None,
            inflight: None,
            unanswered: false,
            armed: true,
        }
    }

    /// Sends a txn that may write this attempt's keys with `lease`. It runs
    /// as its own task: if the attempt is abandoned meanwhile, the cleanup
    /// first waits for it, so the write cannot land after the cleanup.
    pub async fn write(
        &mut self,
        op: &'static str,
        lease: &Arc<Lease>,
        txn: Txn,
    ) -> Result<TxnResponse> {
        self.lease = Some(Arc::clone(lease));
        let inner = Arc::clone(&self.inner);
        let task = self
            .inflight
            .insert(tokio::spawn(async move { inner.txn(op, txn).await }));
        let result = task.await.unwrap_or_else(|e| {
            Err(Error::Backend {
                backend: "etcd",
                op,
                source: Box::new(e),
            })
        });
        self.inflight = None;
        match result {
            Err(e) => {
                self.unanswered |= is_transient(&e);
                Err(self.inner.lease_error(&self.key, lease, e).await)
            }
            ok => ok,
        }
    }

    /// Writes `build(lease id)` with the session lease. A lease etcd no
    /// longer knows is replaced once, transparently.
    pub async fn write_with_lease(
        &mut self,
        op: &'static str,
        build: impl Fn(i64) -> Txn,
    ) -> Result<(TxnResponse, Arc<Lease>)> {
        let mut retried = false;
        loop {
            let lease = Box::pin(self.inner.session.lease()).await?;
            match Box::pin(self.write(op, &lease, build(lease.id))).await {
                Err(Error::SessionLost { .. }) if !retried => retried = true,
                result => return Ok((result?, lease)),
            }
        }
    }

    /// The guard for a grant at `token`; the attempt is done. When
    /// `contended`, the waiters behind are looked up at once.
    pub fn granted(
        self,
        token: i64,
        queue_rev: Option<i64>,
        lease: Arc<Lease>,
        contended: bool,
    ) -> LockGuard {
        let next = if contended {
            Next::LookUp
        } else {
            Next::Nobody
        };
        self.granted_with(token, queue_rev, lease, next)
    }

    /// [`Attempt::granted`], with what is known of the waiters behind.
    pub fn granted_with(
        mut self,
        token: i64,
        queue_rev: Option<i64>,
        lease: Arc<Lease>,
        next: Next,
    ) -> LockGuard {
        self.armed = false;
        let lost = lease.lost.child_token();
        let expiry = lease.expiry.clone();
        // A holder without a queue revision has no queue key: it never
        // wrote one, or deleted it in the txn that took the lock.
        let slot = match (self.slot.take(), queue_rev) {
            (Some(slot), None) if !self.unanswered => {
                slot.free();
                None
            }
            (slot, _) => slot,
        };
        let held = Held::new(&self, token, queue_rev, lease, next, slot);
        LockGuard::new(
            self.key.clone(),
            u64::try_from(token).unwrap_or_default(),
            Box::new(held),
        )
        .with_loss_signal(lost, Some(expiry))
    }

    /// Forgets the attempt without cleanup (it wrote nothing).
    pub fn disarm(mut self) {
        self.armed = false;
    }

    /// Removes what this attempt wrote, and waits for that. The cleanup
    /// runs as its own task: dropping this future does not stop it.
    pub async fn abandon(mut self) -> Result<()> {
        match self.start_abandon() {
            Some(task) => task.await.unwrap_or(Ok(())),
            None => Ok(()),
        }
    }

    fn start_abandon(&mut self) -> Option<JoinHandle<Result<()>>> {
        if !std::mem::take(&mut self.armed) {
            return None;
        }
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let written = Written {
            key: self.key.clone(),
            layout: self.layout.clone(),
            value: std::mem::take(&mut self.value),
            queue_key: self.queue_key.take(),
            slot: self.slot.take(),
            lease: self.lease.take(),
        };
        Some(rt.spawn(abandon(
            Arc::clone(&self.inner),
            written,
            self.inflight.take(),
            self.unanswered,
        )))
    }
}

/// What an abandoned attempt may have written.
struct Written {
    key: Key,
    layout: Layout,
    value: Vec<u8>,
    queue_key: Option<Vec<u8>>,
    slot: Option<Slot>,
    /// The lease its writes used; none means nothing was written.
    lease: Option<Arc<Lease>>,
}

impl Drop for Attempt {
    fn drop(&mut self) {
        self.start_abandon();
    }
}

/// Deletes an abandoned attempt's queue key; if the lock key was granted to
/// it meanwhile, releases it properly (handing it on). Retries with backoff
/// until done or the lease is lost (its keys then expire with it).
async fn abandon(
    inner: Arc<Inner>,
    written: Written,
    inflight: Option<JoinHandle<Result<TxnResponse>>>,
    unanswered: bool,
) -> Result<()> {
    // Wait for a write still in flight: its outcome is what we clean up.
    let unanswered = unanswered
        || match inflight {
            Some(write) => !matches!(write.await, Ok(Ok(_))),
            None => false,
        };
    let Written {
        key,
        layout,
        value,
        queue_key,
        mut slot,
        lease,
    } = written;
    let Some(lease) = lease else {
        if let Some(slot) = slot {
            slot.free();
        }
        return Ok(()); // nothing was written
    };
    if unanswered {
        // The write got no answer: etcd may still apply it after our
        // cleanup (requests on one connection are not applied in send
        // order). Stop renewing this lease so that whatever it may still
        // create expires within the TTL; the locker takes a fresh lease.
        inner.session.forget(lease.id, false).await;
    }
    let mut backoff = FIRST_BACKOFF;
    // Set once a cleanup request failed: it may still be applied later, so
    // the slot is retired rather than reused.
    let mut uncertain = unanswered;
    loop {
        let result =
            abandon_once(&inner, &key, &layout, &value, &queue_key, &mut slot, &lease).await;
        match result {
            Ok(()) => {
                if let Some(slot) = slot.filter(|_| !uncertain) {
                    slot.free();
                }
                return Ok(());
            }
            Err(e) if lease.lost.is_cancelled() => return Err(e),
            Err(_) => {
                uncertain = true;
                lease.pause(&mut backoff).await;
            }
        }
    }
}

async fn abandon_once(
    inner: &Arc<Inner>,
    key: &Key,
    layout: &Layout,
    value: &[u8],
    queue_key: &Option<Vec<u8>>,
    slot: &mut Option<Slot>,
    lease: &Arc<Lease>,
) -> Result<()> {
    let mut then = vec![TxnOp::get(layout.lock.clone(), None)];
    let mut otherwise = Vec::new();
    if let Some(q) = queue_key {
        then.push(TxnOp::get(q.clone(), None));
        otherwise.push(TxnOp::delete(q.clone(), None));
    }
    let txn = Txn::new()
        .when([Compare::value(
            layout.lock.clone(),
            CompareOp::Equal,
            value.to_vec(),
        )])
        .and_then(then)
        .or_else(otherwise);
    let resp = inner.txn("abandon", txn).await?;
    if !resp.succeeded() {
        if queue_key.is_some() {
            release::serve_if_free(inner, layout).await;
        }
        return Ok(());
    }
    let Some(lock_kv) = range_at(&resp, 0).and_then(|g| g.kvs().first().cloned()) else {
        return Ok(());
    };
    let queue_rev = range_at(&resp, 1).and_then(|g| g.kvs().first().map(|kv| kv.create_revision()));
    let held = Held::from_parts(
        Arc::clone(inner),
        key.clone(),
        layout.clone(),
        lock_kv.mod_revision(),
        queue_key.clone().zip(queue_rev),
        Arc::clone(lease),
        Next::LookUp,
        slot.take(),
    );
    release::release(held).await.or_else(|e| match e {
        Error::LockLost { .. } => Ok(()),
        e => Err(e),
    })
}

/// When to try again after a failed attempt of `lock` or `try_lock`.
///
/// A member that is down, a leader election or a lost connection fails a
/// request without saying whether it was applied. The failed attempt is
/// cleaned up (its lease retired if a write may still land) and a new one
/// starts, with backoff, while such failures last no longer than two
/// request timeouts. Failures further apart than that (an attempt that
/// waited in line in between) start a new count.
struct Retry {
    give_up: std::time::Duration,
    failing_since: Option<std::time::Instant>,
    last_failure: Option<std::time::Instant>,
    backoff: std::time::Duration,
    /// The failure to report when giving up: the last one, except that an
    /// answer from a server (such as "no leader") is kept over a later
    /// connection refused by a member that is down.
    report: Option<Error>,
    site: Site,
}

impl Retry {
    fn new(config: &EtcdConfig, site: Site) -> Self {
        Retry {
            site,
            give_up: config.request_timeout() * 2,
            failing_since: None,
            last_failure: None,
            backoff: FIRST_BACKOFF,
            report: None,
        }
    }

    /// The pause before the next attempt after `err` (which may pass on a
    /// retry if `again`), or the error to report.
    fn after(&mut self, err: Error, again: bool) -> Result<std::time::Duration> {
        if !again || err.is_gave_up() {
            return Err(err);
        }
        let now = std::time::Instant::now();
        if self.last_failure.is_none_or(|t| now - t > self.give_up) {
            (self.failing_since, self.report) = (Some(now), None);
            self.backoff = FIRST_BACKOFF;
        }
        self.last_failure = Some(now);
        let since = self.failing_since.unwrap_or(now);
        let keep = self
            .report
            .as_ref()
            .is_none_or(|old| is_server_answer(&err) || !is_server_answer(old));
        if keep {
            self.report = Some(err);
        }
        if since.elapsed() >= self.give_up
            && let Some(report) = self.report.take()
        {
            return Err(report);
        }
        let pause = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        if let Some(report) = &self.report {
            observe::retrying(self.site, report, pause);
        }
        Ok(pause)
    }
}

impl EtcdLocker {
    /// One attempt of `try_lock`.
    async fn try_lock_once(&self, key: &Key) -> Result<Option<LockGuard>> {
        let mut attempt = Attempt::new(&self.inner, key, false);
        let layout = attempt.layout.clone();
        let mut when = vec![Compare::create_revision(
            layout.lock.clone(),
            CompareOp::Equal,
            0,
        )];
        if self.inner.fair {
            // Fair: nobody may be queued either.
            when.push(
                Compare::create_revision(layout.queue.clone(), CompareOp::Equal, 0).with_prefix(),
            );
        }
        let value = attempt.value.clone();
        // Fair: if the lock is free but the queue is not empty, read whether
        // anyone in it is a waiter (see `keys::is_waiter`).
        let reads = if self.inner.fair {
            vec![
                TxnOp::get(
                    layout.lock.clone(),
                    Some(GetOptions::new().with_count_only()),
                ),
                TxnOp::get(
                    layout.queue.clone(),
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_sort(SortTarget::Create, SortOrder::Ascend)
                            .with_limit(FOREIGN_SCAN)
                            .with_keys_only(),
                    ),
                ),
            ]
        } else {
            Vec::new()
        };
        let (resp, lease) = attempt
            .write_with_lease("try_lock", |lease| {
                Txn::new()
                    .when(when.clone())
                    .and_then([put_leased(&layout.lock, &value, lease)])
                    .or_else(reads.clone())
            })
            .await?;
        if resp.succeeded() {
            return Ok(Some(attempt.granted(revision(&resp), None, lease, false)));
        }
        // Free, and queued only by entries fairlock did not write: take it
        // if nothing newer has queued since.
        let free = range_at(&resp, 0).is_some_and(|g| g.count() == 0);
        let queue = range_at(&resp, 1);
        let only_foreign = queue.as_ref().is_some_and(|g| {
            (g.kvs().len() as i64) < FOREIGN_SCAN
                && !g
                    .kvs()
                    .iter()
                    .any(|kv| is_waiter(&layout.queue, kv.key(), kv.lease()))
        });
        let newest = queue.and_then(|g| g.kvs().last().map(|kv| kv.create_revision()));
        if let (true, true, Some(newest)) = (free, only_foreign, newest) {
            let txn = Txn::new()
                .when([
                    Compare::create_revision(layout.lock.clone(), CompareOp::Equal, 0),
                    Compare::create_revision(layout.queue.clone(), CompareOp::Less, newest + 1)
                        .with_prefix(),
                ])
                .and_then([put_leased(&layout.lock, &value, lease.id)]);
            let resp = attempt.write("try_lock", &lease, txn).await?;
            if resp.succeeded() {
                return Ok(Some(attempt.granted(revision(&resp), None, lease, false)));
            }
        }
        attempt.disarm();
        Ok(None)
    }

    /// One attempt of `lock`: queue, wait, and on failure remove what it
    /// wrote before returning the error, and whether the attempt's session
    /// lease was lost.
    async fn lock_once(&self, ctx: &Context, key: &Key) -> Result<LockGuard, (Error, bool)> {
        let mut attempt = Some(Attempt::new(&self.inner, key, true));
        let outcome = {
            tokio::select! {
                res = queue::acquire(&mut attempt) => res,
                err = ctx.done(key.as_str()) => Err(err),
            }
        };
        match outcome {
            Ok(guard) => Ok(guard),
            Err(e) => {
                let mut lease_lost = false;
                if let Some(attempt) = attempt.take() {
                    // Presumed lost here (not renewed for a TTL), as opposed
                    // to gone in etcd (revoked, or expired and reported).
                    lease_lost = attempt
                        .lease
                        .as_ref()
                        .is_some_and(|l| l.lost.is_cancelled() && !l.gone_in_etcd());
                    // Remove our keys before reporting, so that a caller who
                    // gave up leaves nothing behind. If etcd does not answer
                    // in time, report anyway: the cleanup task carries on.
                    let timeout = self.inner.config.request_timeout();
                    let _ = tokio::time::timeout(timeout, attempt.abandon()).await;
                }
                Err((e, lease_lost))
            }
        }
    }
}

/// `put key value` bound to `lease`.
pub(crate) fn put_leased(key: &[u8], value: &[u8], lease: i64) -> TxnOp {
    TxnOp::put(
        key.to_vec(),
        value.to_vec(),
        Some(PutOptions::new().with_lease(lease)),
    )
}

#[async_trait]
impl Locker for EtcdLocker {
    async fn try_lock(&self, key: &Key) -> Result<Option<LockGuard>> {
        observe::try_lock(self.site(), key, self.try_lock_unobserved(key)).await
    }

    async fn lock(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        observe::lock(self.site(), key, self.lock_unobserved(ctx, key)).await
    }

    fn is_fair(&self) -> bool {
        self.inner.fair
    }
}

impl EtcdLocker {
    fn site(&self) -> Site {
        Site::new("etcd", self.inner.fair)
    }

    async fn try_lock_unobserved(&self, key: &Key) -> Result<Option<LockGuard>> {
        key.validate()?;
        let mut retry = Retry::new(&self.inner.config, self.site());
        loop {
            match Box::pin(self.try_lock_once(key)).await {
                Err(e) => {
                    let transient = is_transient(&e);
                    tokio::time::sleep(retry.after(e, transient)?).await;
                }
                outcome => return outcome,
            }
        }
    }

    async fn lock_unobserved(&self, ctx: &Context, key: &Key) -> Result<LockGuard> {
        key.validate()?;
        ctx.check(key.as_str())?;
        let mut retry = Retry::new(&self.inner.config, self.site());
        loop {
            match Box::pin(self.lock_once(ctx, key)).await {
                Ok(guard) => return Ok(guard),
                Err((e, lease_lost)) => {
                    // A waiter whose session lease could not be renewed for a
                    // TTL (its member stopped answering, say) held nothing:
                    // it queues again on a fresh lease. One whose lease or
                    // queue entry etcd removed fails (SessionLost).
                    let again = is_transient(&e) || lease_lost;
                    tokio::select! {
                        () = tokio::time::sleep(retry.after(e, again)?) => {}
                        err = ctx.done(key.as_str()) => return Err(err),
                    }
                }
            }
        }
    }
}
