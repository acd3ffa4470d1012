//! etcd's own layout (`Layout::Etcd`) against real etcd servers: the
//! conformance checks, and fairlock mixed on one name with etcd's own
//! peers, `etcdctl lock` (Debian's etcd-client) and Go's
//! `concurrency.Mutex` (examples/recipe-go): never two holders, one line
//! in arrival order, a waiter whose key is gone told rather than granted,
//! and what the layout cannot hold refused before any request.

mod support;

use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{GetOptions, SortOrder, SortTarget, Txn, TxnOp};
use fairlock::conformance::{Backend, ElectionBackend, patient};
use fairlock::etcd::{EtcdConfig, EtcdLocker, FencedTxn, Layout};
use fairlock::{Elector, Error, Key, LeaseId, LockGuard, Locker};
use support::etcd_backend::EtcdBackend;
use support::etcd_elections::EtcdElections;
use support::peers::Peer;

/// The conformance suite's backend on etcd's layout: fair lockers only,
/// no lines, no `lock_all`; a waiter is one more key under `P k/`.
struct EtcdLayout(EtcdBackend);

impl EtcdLayout {
    async fn on_shared(test: &str) -> Self {
        let b = EtcdBackend::on_shared(test).await;
        let config = b.config.clone().with_layout(Layout::Etcd);
        EtcdLayout(EtcdBackend::new(
            b.client.clone(),
            b.checker.clone(),
            config,
        ))
    }

    fn prefix(&self) -> &str {
        self.0.config.prefix()
    }

    /// The etcd name of `key`: what etcdctl and Go lock.
    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix())
    }

    fn endpoint(&self) -> String {
        support::shared().endpoint.clone()
    }

    /// A fair locker in etcd's layout.
    fn locker(&self) -> Arc<dyn Locker> {
        self.0.locker(true)
    }

    /// Waits until `n` contenders (holder included) have keys on `key`.
    async fn contenders(&self, key: &str, n: i64) {
        let dir = format!("{}/", self.name(key));
        support::wait_for_count(&mut self.0.checker.clone(), &dir, n, false).await;
    }

    /// The contenders' keys on `key`, oldest first.
    async fn keys(&self, key: &str) -> Vec<(String, i64)> {
        let dir = format!("{}/", self.name(key));
        let opts = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let resp = self
            .0
            .checker
            .clone()
            .get(dir, Some(opts))
            .await
            .expect("read the contenders");
        resp.kvs()
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    kv.create_revision(),
                )
            })
            .collect()
    }
}

#[async_trait]
impl Backend for EtcdLayout {
    fn locker(&self, fair: bool) -> Arc<dyn Locker> {
        self.0.locker(fair)
    }
    fn supports_unfair(&self) -> bool {
        false
    }
    /// A burst of 1,000 calls of one locker on one name is 1,000 leases
    /// here, each with its keepalive stream and confirming reads every
    /// TTL/3: beside four CPU burners the holder's own lease lapsed under
    /// them (2 runs of 2), and in CI a new lease of the burst went
    /// unconfirmed for 9 s. The other backends run the whole burst.
    fn burst_limit(&self) -> usize {
        250
    }
    async fn wait_queued(&self, key: &Key, n: usize) {
        self.contenders(key.as_str(), n as i64 + 1).await;
    }
    async fn wait_clean(&self) {
        self.0.wait_clean().await;
    }
    async fn is_clean(&self) -> bool {
        self.0.is_clean().await
    }
    async fn finish(&self) {
        self.0.finish().await;
    }
}

async fn etcd_layout(test: &str) -> EtcdLayout {
    EtcdLayout::on_shared(test).await
}

fairlock::conformance_tests!(etcd_layout);

/// The election checks' backend on etcd's layout: a candidate is one more
/// key under `P name/`.
struct Elections(EtcdElections);

#[async_trait]
impl ElectionBackend for Elections {
    fn elector(&self) -> Arc<dyn Elector> {
        self.0.elector()
    }
    async fn wait_candidates(&self, name: &Key, n: usize) {
        let dir = format!("{}{name}/", self.0.config.prefix());
        support::wait_for_count(&mut self.0.client.clone(), &dir, n as i64 + 1, false).await;
    }
    async fn wait_clean(&self) {
        self.0.wait_clean().await;
    }
    async fn is_clean(&self) -> bool {
        self.0.is_clean().await
    }
    async fn finish(&self) {
        self.0.finish().await;
    }
    fn records_owner(&self) -> bool {
        false
    }
}

async fn elections(test: &str) -> Elections {
    let b = EtcdElections::on_shared(test).await;
    let config = b.config.clone().with_layout(Layout::Etcd);
    Elections(EtcdElections::new(b.client.clone(), config))
}

fairlock::election_conformance_tests!(elections);

/// What a contender of the mixed line reports: who was granted.
async fn fairlock_waiter(
    locker: Arc<dyn Locker>,
    key: &'static str,
    who: &'static str,
    granted: tokio::sync::mpsc::UnboundedSender<(&'static str, LockGuard)>,
) {
    let guard = locker
        .lock(&patient(), &Key::from(key))
        .await
        .expect("lock");
    granted.send((who, guard)).expect("report the grant");
}

/// fairlock and `etcdctl lock` exclude each other and queue behind each
/// other on one name, both ways; fairlock's tokens are the create
/// revisions of its keys, so they grow across the mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fairlock_and_etcdctl_exclude_each_other() {
    let b = etcd_layout("mix-etcdctl").await;
    let locker = b.locker();
    let key = Key::from("jobs");
    let ours = locker.lock(&patient(), &key).await.expect("lock");
    let mut etcdctl = Peer::etcdctl_lock(&b.endpoint(), &b.name("jobs"));
    b.contenders("jobs", 2).await;
    let keys = b.keys("jobs").await;
    assert_eq!(keys[0].1, ours.fencing_token() as i64, "{keys:?}");
    assert!(etcdctl.printed().is_none(), "etcdctl holds beside fairlock");
    let first = ours.fencing_token();
    ours.unlock().await.expect("unlock");
    // etcdctl prints its key once it holds.
    assert_eq!(etcdctl.line().await, keys[1].0);
    assert!(
        locker.try_lock(&key).await.expect("try_lock").is_none(),
        "try_lock took a name etcdctl holds"
    );
    let waiter = {
        let (locker, key) = (Arc::clone(&locker), key.clone());
        tokio::spawn(async move { locker.lock(&patient(), &key).await })
    };
    b.contenders("jobs", 2).await;
    assert!(
        !waiter.is_finished(),
        "fairlock granted while etcdctl holds"
    );
    assert!(
        etcdctl.terminate().success(),
        "etcdctl lock exits 0 on SIGTERM"
    );
    let guard = waiter.await.expect("task").expect("lock");
    assert!(guard.fencing_token() > first);
    guard.unlock().await.expect("unlock");
    b.wait_clean().await;
    b.finish().await;
}

/// One line in arrival order across fairlock, `etcdctl lock` and Go's
/// `concurrency.Mutex`: each is granted exactly when those that arrived
/// before it are done, whoever they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_line_in_arrival_order_across_the_mix() {
    let b = etcd_layout("mix-order").await;
    let (endpoint, name) = (b.endpoint(), b.name("line"));
    let first = b.locker();
    let held = first
        .lock(&patient(), &Key::from("line"))
        .await
        .expect("lock");
    let (granted, mut grants) = tokio::sync::mpsc::unbounded_channel();
    let mut etcdctl = Peer::etcdctl_lock(&endpoint, &name);
    b.contenders("line", 2).await;
    tokio::spawn(fairlock_waiter(
        b.locker(),
        "line",
        "fairlock 1",
        granted.clone(),
    ));
    b.contenders("line", 3).await;
    let mut go = Peer::go_mutex(&endpoint, &name);
    assert!(go.line().await.starts_with("SESSION "));
    b.contenders("line", 4).await;
    tokio::spawn(fairlock_waiter(b.locker(), "line", "fairlock 2", granted));
    b.contenders("line", 5).await;
    let order = b.keys("line").await;

    held.unlock().await.expect("unlock");
    assert_eq!(etcdctl.line().await, order[1].0, "etcdctl is second");
    assert!(
        grants.try_recv().is_err(),
        "a fairlock waiter passed etcdctl"
    );
    assert!(go.printed().is_none(), "Go passed etcdctl");
    assert!(etcdctl.terminate().success());

    let (who, guard) = grants.recv().await.expect("a grant");
    assert_eq!(who, "fairlock 1");
    assert_eq!(guard.fencing_token() as i64, order[2].1);
    assert!(go.printed().is_none(), "Go holds beside fairlock");
    guard.unlock().await.expect("unlock");

    let holding = go.line().await;
    assert_eq!(
        holding,
        format!("HOLDING {} {}", order[3].0, order[3].1),
        "Go is fourth"
    );
    assert!(grants.try_recv().is_err(), "fairlock 2 holds beside Go");
    go.send("release");
    assert_eq!(go.line().await, "RELEASED");

    let (who, guard) = grants.recv().await.expect("a grant");
    assert_eq!(who, "fairlock 2");
    assert_eq!(guard.fencing_token() as i64, order[4].1);
    guard.unlock().await.expect("unlock");
    assert!(go.wait().success(), "Go exits when its stdin ends");
    b.wait_clean().await;
    b.finish().await;
}

/// Never two holders, as seen outside every locker: fairlock tasks and
/// `etcdctl lock` commands each run a critical section on a shared file
/// (a directory made on entry, a non-atomic counter), many times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_two_holders_across_fairlock_and_etcdctl() {
    const WORKERS: usize = 3;
    const SECTIONS: usize = 3;
    let b = etcd_layout("mix-occupancy").await;
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path().to_path_buf();
    std::fs::write(d.join("count"), "0").expect("init");
    let section = support::SECTION;
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (locker, d) = (b.locker(), d.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..SECTIONS {
                let guard = locker
                    .lock(&patient(), &Key::from("section"))
                    .await
                    .expect("lock");
                let ok = tokio::process::Command::new("sh")
                    .args(["-c", section])
                    .env("D", &d)
                    .status()
                    .await
                    .expect("sh");
                assert!(ok.success());
                guard.unlock().await.expect("unlock");
            }
        }));
    }
    for _ in 0..WORKERS {
        let (endpoint, name, d) = (b.endpoint(), b.name("section"), d.clone());
        tasks.push(tokio::task::spawn_blocking(move || {
            for _ in 0..SECTIONS {
                let mut peer = Peer::etcdctl_lock_run(
                    &endpoint,
                    &name,
                    section,
                    ("D", d.to_str().expect("utf-8 path")),
                );
                assert!(peer.wait().success(), "etcdctl lock -- sh failed");
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
    let count = std::fs::read_to_string(d.join("count")).expect("count");
    assert_eq!(
        count.trim(),
        (2 * WORKERS * SECTIONS).to_string(),
        "lost updates"
    );
    assert!(!d.join("overlaps").exists(), "critical sections overlapped");
    b.wait_clean().await;
    b.finish().await;
}

/// A waiter whose key is deleted (its session lease ended, or someone
/// deleted it) is told at once, while the keys ahead are still there,
/// not granted once they go, as etcd's Go recipe before 3.5 does (etcd
/// issues 11408, 19597).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_key_is_gone_is_told() {
    let b = etcd_layout("gone").await;
    let mut etcdctl = Peer::etcdctl_lock(&b.endpoint(), &b.name("k"));
    let holder = etcdctl.line().await;
    let waiter = {
        let locker = b.locker();
        tokio::spawn(async move { locker.lock(&patient(), &Key::from("k")).await })
    };
    b.contenders("k", 2).await;
    let keys = b.keys("k").await;
    assert_eq!(keys[0].0, holder);
    b.0.checker
        .clone()
        .delete(keys[1].0.clone(), None)
        .await
        .expect("delete the waiter's key");
    // Told while the holder still holds: the waiter watches its own key,
    // not only the one ahead of it.
    let err = waiter.await.expect("task").expect_err("its key is gone");
    assert!(matches!(err, Error::SessionLost { .. }), "{err}");
    assert!(etcdctl.terminate().success());
    b.wait_clean().await;
    b.finish().await;
}

/// A fenced txn applies while the guard's key is the one it created, and
/// not after that key is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_txn_follows_the_contender_key() {
    let b = etcd_layout("fenced").await;
    let locker = b.locker();
    let guard = locker
        .lock(&patient(), &Key::from("k"))
        .await
        .expect("lock");
    let side = format!("{}side", b.prefix());
    let write = |v: &str| Txn::new().and_then([TxnOp::put(side.clone(), v, None)]);
    guard
        .fenced_txn(write("1"))
        .await
        .expect("fenced while held");
    let keys = b.keys("k").await;
    b.0.checker
        .clone()
        .delete(keys[0].0.clone(), None)
        .await
        .expect("delete");
    let err = guard.fenced_txn(write("2")).await.expect_err("key gone");
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
    let stored =
        b.0.checker
            .clone()
            .get(side.clone(), None)
            .await
            .expect("get");
    assert_eq!(stored.kvs()[0].value(), b"1");
    b.0.checker
        .clone()
        .delete(side, None)
        .await
        .expect("delete");
    let _ = guard.unlock().await;
    b.wait_clean().await;
    b.finish().await;
}

/// What etcd's layout cannot hold is refused before any request, with
/// an error that says what to use instead; a name held in fairlock's own
/// layout is refused, not shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_layout_cannot_hold_is_refused() {
    let b = etcd_layout("refused").await;
    let key = Key::from("k");
    let unfair = b.0.locker(false);
    let err = unfair.lock(&patient(), &key).await.expect_err("unfair");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    let fair = b.locker();
    let err = fair.read_lock(&patient(), &key).await.expect_err("read");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    let err = fair
        .lock_all(&patient(), &[key.clone(), Key::from("j")])
        .await
        .expect_err("lock_all");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(b.is_clean().await, "a refusal wrote something");

    // The same name, held in fairlock's own layout.
    let own_config = EtcdConfig::new([b.endpoint()]).with_prefix(b.prefix());
    let own = EtcdLocker::from_client(b.0.client.clone(), own_config, true);
    let held = own.lock(&patient(), &key).await.expect("lock");
    for attempt in [
        fair.try_lock(&key).await.map(|_| ()),
        fair.lock(&patient(), &key).await.map(|_| ()),
    ] {
        let err = attempt.expect_err("held in the other layout");
        assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
    }
    held.unlock().await.expect("unlock");
    own.close().await.expect("close");
    b.wait_clean().await;
    b.finish().await;
}

/// `status` in etcd's layout lists whoever holds and waits on a name:
/// here `etcdctl lock` holding and two waiting, and a fairlock waiter
/// behind them, in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_every_contender() {
    let b = etcd_layout("status").await;
    let (endpoint, name) = (b.endpoint(), b.name("k"));
    let mut holder = Peer::etcdctl_lock(&endpoint, &name);
    let held = holder.line().await;
    let mut waiters = Vec::new();
    for n in 2..=3 {
        waiters.push(Peer::etcdctl_lock(&endpoint, &name));
        b.contenders("k", n).await;
    }
    let locker = EtcdLocker::from_client(b.0.client.clone(), b.0.config.clone(), true);
    let ours = {
        let locker = locker.clone();
        tokio::spawn(async move { locker.lock(&patient(), &Key::from("k")).await })
    };
    b.contenders("k", 4).await;
    let keys = b.keys("k").await;
    let status = locker.status(Some(&Key::from("k"))).await.expect("status");
    assert_eq!(status.len(), 1, "{status:?}");
    let k = &status[0];
    // A key is named after its lease in `%x`; status prints every lease
    // in `LeaseId`'s 16 digits (a lease of 15 hex digits tells them apart).
    let lease_of = |key: &str| {
        let hex = key.rsplit('/').next().expect("hex");
        LeaseId(i64::from_str_radix(hex, 16).expect("a lease in hex")).to_string()
    };
    let holding = k.holder.as_ref().expect("a holder");
    assert_eq!(held, keys[0].0);
    assert_eq!(holding.fencing_token as i64, keys[0].1);
    assert_eq!(
        holding.owner.describe(),
        format!("lease={}", lease_of(&held))
    );
    assert!(
        holding.ttl_left.is_some(),
        "the holder's lease time is read"
    );
    let waiting: Vec<&str> = k.waiters.iter().map(|w| w.locker.as_str()).collect();
    let want: Vec<String> = keys[1..].iter().map(|(key, _)| lease_of(key)).collect();
    assert_eq!(waiting, want, "waiters in arrival order");
    assert!(k.foreign.is_empty(), "{:?}", k.foreign);
    assert_eq!(locker.status(None).await.expect("status").len(), 1);
    for mut waiter in waiters {
        waiter.terminate();
    }
    assert!(holder.terminate().success());
    ours.await
        .expect("task")
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    locker.close().await.expect("close");
    b.wait_clean().await;
    b.finish().await;
}

/// The next change a watch reports (within a long guard deadline).
async fn next_change(watch: &mut fairlock::LeaderWatch) -> Option<fairlock::Leader> {
    tokio::time::timeout(std::time::Duration::from_secs(120), watch.next())
        .await
        .expect("a change within the guard deadline")
        .expect("no error")
}

/// A fairlock observer follows a Go leader (Go's `concurrency.Election`):
/// its value, its proclaim, and the empty seat once it resigns, which
/// Go's own `Observe` never reports (etcd issue 18163).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fairlock_follows_a_go_leader() {
    let b = elections("el-go-leader").await;
    let name = Key::from("seat");
    let full = format!("{}seat", b.0.config.prefix());
    let mut go = Peer::go_elect(&support::shared().endpoint, &full, "v1");
    assert!(go.line().await.starts_with("SESSION "));
    let elected = go.line().await;
    let parts: Vec<&str> = elected.split(' ').collect();
    assert_eq!(parts[0], "LEADER", "{elected}");
    let term: u64 = parts[2].parse().expect("rev");
    let mut watch = b.elector().observe(&name).await.expect("observe");
    let leader = next_change(&mut watch).await;
    let leader = leader.expect("a leader");
    assert_eq!(
        (leader.value.as_slice(), leader.fencing_token),
        (&b"v1"[..], term)
    );
    go.send("proclaim v2");
    assert_eq!(go.line().await, "PROCLAIMED v2");
    let leader = next_change(&mut watch).await;
    assert_eq!(leader.expect("a leader").value, b"v2");
    go.send("resign");
    assert_eq!(go.line().await, "RESIGNED");
    let seat = next_change(&mut watch).await;
    assert!(seat.is_none(), "the empty seat: {seat:?}");
    assert!(go.wait().success());
    drop(watch);
    b.wait_clean().await;
    b.finish().await;
}

/// Go's `Observe` and `etcdctl elect -l` follow fairlock leaders: a
/// first leader, then the next one's proposal once the first resigns,
/// then its proclaim, and nothing twice (a campaign writes its proposal
/// once, so Go's observers, which report every put of the leader's key,
/// do not show the new leader twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_and_etcdctl_follow_fairlock_leaders() {
    let b = elections("el-fl-leader").await;
    let endpoint = support::shared().endpoint.clone();
    let name = Key::from("seat");
    let full = format!("{}seat", b.0.config.prefix());
    let first = b
        .elector()
        .campaign(&patient(), &name, b"zero")
        .await
        .expect("campaign");
    let mut go = Peer::go_observe(&endpoint, &full);
    let mut etcdctl = Peer::etcdctl_observe(&endpoint, &full);
    assert!(go.line().await.starts_with("SESSION "));
    // Both watch from here on.
    assert!(go.line().await.ends_with(" zero"));
    etcdctl.line().await;
    assert_eq!(etcdctl.line().await, "zero");
    let second = {
        let (elector, name) = (b.elector(), name.clone());
        tokio::spawn(async move { elector.campaign(&patient(), &name, b"a").await })
    };
    b.wait_candidates(&name, 1).await;
    first.resign().await.expect("resign");
    let second = second.await.expect("task").expect("campaign");
    let term = second.fencing_token();
    let seen = go.line().await;
    let key = seen.split(' ').nth(1).expect("key").to_owned();
    assert!(key.starts_with(&format!("{full}/")), "{seen}");
    assert_eq!(seen, format!("SEEN {key} {term} a"));
    assert_eq!(
        (etcdctl.line().await, etcdctl.line().await),
        (key.clone(), "a".into())
    );
    second.proclaim(b"b").await.expect("proclaim");
    assert_eq!(go.line().await, format!("SEEN {key} {term} b"));
    assert_eq!(
        (etcdctl.line().await, etcdctl.line().await),
        (key, "b".into())
    );
    second.resign().await.expect("resign");
    assert!(go.wait().success());
    etcdctl.terminate();
    b.wait_clean().await;
    b.finish().await;
}

/// Leadership passes in arrival order across fairlock and `etcdctl
/// elect`: a fairlock leader, then etcdctl, then a fairlock candidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_passes_in_arrival_order_across_the_mix() {
    let b = elections("el-mix-order").await;
    let endpoint = support::shared().endpoint.clone();
    let name = Key::from("seat");
    let full = format!("{}seat", b.0.config.prefix());
    let first = b
        .elector()
        .campaign(&patient(), &name, b"1")
        .await
        .expect("campaign");
    let mut etcdctl = Peer::etcdctl_elect(&endpoint, &full, "2");
    b.wait_candidates(&name, 1).await;
    let third = {
        let (elector, name) = (b.elector(), name.clone());
        tokio::spawn(async move { elector.campaign(&patient(), &name, b"3").await })
    };
    b.wait_candidates(&name, 2).await;
    let term = first.fencing_token();
    first.resign().await.expect("resign");
    let key = etcdctl.line().await;
    assert_eq!(etcdctl.line().await, "2");
    assert!(!third.is_finished(), "the third passed etcdctl");
    let leader = b.elector().leader(&name).await.expect("leader");
    let leader = leader.expect("etcdctl leads");
    assert_eq!(leader.value, b"2");
    assert!(leader.fencing_token > term);
    assert!(key.starts_with(&format!("{full}/")));
    assert!(etcdctl.terminate().success());
    let third = third.await.expect("task").expect("campaign");
    assert!(third.fencing_token() > leader.fencing_token);
    third.resign().await.expect("resign");
    b.wait_clean().await;
    b.finish().await;
}

/// A call given up while it waits takes its key back and leaves its
/// locker's session lease to the name: the next call's key is named after
/// that lease, not after a lease of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_given_up_leaves_the_session_lease_to_the_name() {
    let b = etcd_layout("slot").await;
    let key = Key::from("k");
    let held = b.locker().lock(&patient(), &key).await.expect("lock");
    let locker = EtcdLocker::from_client(b.0.client.clone(), b.0.config.clone(), true);
    let lease = locker.lease_id().await.expect("lease");
    for _ in 0..2 {
        let waiting = {
            let (locker, key) = (locker.clone(), key.clone());
            tokio::spawn(async move { locker.lock(&patient(), &key).await })
        };
        b.contenders("k", 2).await;
        waiting.abort();
        let _ = waiting.await;
        let dir = format!("{}/", b.name("k"));
        support::wait_for_count(&mut b.0.checker.clone(), &dir, 1, true).await;
    }
    held.unlock().await.expect("unlock");
    let guard = locker.lock(&patient(), &key).await.expect("lock");
    let keys = b.keys("k").await;
    assert_eq!(keys[0].0, format!("{}/{lease:x}", b.name("k")));
    guard.unlock().await.expect("unlock");
    locker.close().await.expect("close");
    b.wait_clean().await;
    b.finish().await;
}

/// etcd's lock service (`v3lockpb.Lock`, what etcd-client's and jetcd's
/// `lock()` call) and fairlock exclude each other and queue in one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fairlock_and_etcd_s_lock_service_exclude_each_other() {
    let b = etcd_layout("mix-v3lock").await;
    let locker = b.locker();
    let key = Key::from("svc");
    let ours = locker.lock(&patient(), &key).await.expect("lock");
    let mut client = b.0.checker.clone();
    let lease = client.lease_grant(30, None).await.expect("lease").id();
    let service = {
        let (mut client, name) = (client.clone(), b.name("svc"));
        tokio::spawn(async move {
            let options = etcd_client::LockOptions::new().with_lease(lease);
            client.lock(name, Some(options)).await
        })
    };
    b.contenders("svc", 2).await;
    let keys = b.keys("svc").await;
    assert!(
        !service.is_finished(),
        "the lock service granted beside fairlock"
    );
    ours.unlock().await.expect("unlock");
    let granted = service.await.expect("task").expect("lock service");
    assert_eq!(String::from_utf8_lossy(granted.key()), keys[1].0);
    assert!(
        locker.try_lock(&key).await.expect("try_lock").is_none(),
        "try_lock took a name the lock service holds"
    );
    client.unlock(granted.key()).await.expect("unlock");
    let again = locker
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    assert!(again.fencing_token() as i64 > keys[1].1);
    again.unlock().await.expect("unlock");
    client.lease_revoke(lease).await.expect("revoke");
    b.wait_clean().await;
    b.finish().await;
}
