//! Leader election on etcd, against a real etcd the tests start (see
//! tests/support): the conformance suite's election checks, and what only
//! etcd shows (the keys an election writes, the mutex beside them,
//! campaigns cancelled mid-write, the registry). Lost leaderships:
//! etcd_election_loss.rs.

mod support;

use std::sync::Arc;

use etcd_client::{GetOptions, PutOptions};
use fairlock::conformance::{ElectionBackend, patient};
use fairlock::etcd::EtcdLocker;
use fairlock::{Elector, Error, Key, Locker};
use support::etcd_elections::EtcdElections;

async fn etcd(test: &str) -> EtcdElections {
    EtcdElections::on_shared(test).await
}

fairlock::election_conformance_tests!(etcd);

/// The keys of an election in etcd: the lock key (the leader's), a queue
/// entry per candidate, and the value key; `status` lists the election as
/// a lock held by its leader with the candidates in line, and nothing as
/// someone else's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_an_election_as_its_lock() {
    let b = etcd("el-status").await;
    let name = Key::from("web");
    let leader = b.etcd_elector();
    let leadership = leader
        .campaign(&patient(), &name, b"10.0.0.7:80")
        .await
        .expect("campaign");
    let candidate = b.etcd_elector();
    let waiting = {
        let (candidate, name) = (candidate.clone(), name.clone());
        tokio::spawn(async move { candidate.campaign(&patient(), &name, b"c").await })
    };
    b.wait_candidates(&name, 1).await;
    let value_key = format!("{}web/_OWNERS_/leader", b.config.prefix());
    let stored = b.client.clone().get(value_key, None).await.expect("get");
    let kv = stored.kvs().first().expect("the value key");
    assert_ne!(kv.lease(), 0, "the value key must be on the leader's lease");
    assert!(
        kv.value().ends_with(b"\n10.0.0.7:80"),
        "{:?}",
        kv.value_str()
    );
    let status = leader.locker().status(Some(&name)).await.expect("status");
    assert_eq!(status.len(), 1, "{status:?}");
    let lock = &status[0];
    let holder = lock.holder.as_ref().expect("the leader holds the lock");
    assert_eq!(holder.fencing_token, leadership.fencing_token());
    assert_eq!(lock.waiters.len(), 1, "{lock:?}");
    assert_eq!(lock.waiters[0].locker, candidate.id());
    assert!(lock.waiters[0].fair, "candidates wait as fair waiters");
    assert!(
        lock.foreign.is_empty(),
        "listed as foreign: {:?}",
        lock.foreign
    );
    let shown = lock.leader.as_ref().expect("status names the leader");
    assert_eq!(
        (shown.value.as_slice(), shown.fencing_token),
        (&b"10.0.0.7:80"[..], leadership.fencing_token())
    );
    leadership.resign().await.expect("resign");
    waiting
        .await
        .expect("task")
        .expect("elected")
        .resign()
        .await
        .expect("resign");
    assert!(b.is_clean().await, "keys left after both resigned");
    b.finish().await;
}

/// A value key left without its lock key (the leader's lease still alive,
/// say) neither blocks the mutex on the same name nor gets the lock: a
/// fair `try_lock` and `lock` take it at once, unlock frees it, and the
/// value key is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mutex_neither_waits_for_nor_grants_the_value_key() {
    let b = etcd("el-mutex").await;
    let mut client = b.client.clone();
    let lease = client.lease_grant(60, None).await.expect("lease").id();
    let value_key = format!("{}e/_OWNERS_/leader", b.config.prefix());
    let record = "00000000000000000007 eabc pid=1 host=h at=1 since=1\nstale";
    client
        .put(
            value_key.clone(),
            record,
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put");
    let key = Key::from("e");
    for fair in [true, false] {
        let locker = EtcdLocker::from_client(b.client.clone(), b.config.clone(), fair);
        let guard = locker
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free");
        guard.unlock().await.expect("unlock");
        let guard = locker.lock(&patient(), &key).await.expect("lock");
        let status = locker.status(Some(&key)).await.expect("status");
        assert!(status[0].waiters.is_empty() && status[0].foreign.is_empty());
        let read = b.etcd_elector().leader(&key).await.expect("leader");
        assert_eq!(
            read, None,
            "a lock holder without a value of its term leads"
        );
        guard.unlock().await.expect("unlock");
        locker.close().await.expect("close");
    }
    let elector = b.etcd_elector();
    assert_eq!(elector.leader(&key).await.expect("leader"), None, "stale");
    let left = client.get(value_key, None).await.expect("get");
    assert_eq!(left.kvs()[0].value_str().ok(), Some(record));
    client.lease_revoke(lease).await.expect("revoke");
    b.wait_clean().await;
    b.finish().await;
}

/// Campaigns dropped at any point (in line, while being elected, while
/// their value is written) leave nothing behind, and never two leaders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_dropped_at_any_point_leaves_nothing() {
    let b = etcd("el-drop-anywhere").await;
    let elector: Arc<dyn Elector> = Arc::new(b.etcd_elector());
    for name in ["free", "held"] {
        let name = Key::from(name);
        let held = match name.as_str() {
            "held" => Some(
                b.etcd_elector()
                    .campaign(&patient(), &name, b"h")
                    .await
                    .expect("campaign"),
            ),
            _ => None,
        };
        for i in 0..60u32 {
            let (e, n) = (Arc::clone(&elector), name.clone());
            let task = tokio::spawn(async move { e.campaign(&patient(), &n, b"x").await });
            for _ in 0..(i % 20) {
                tokio::task::yield_now().await;
            }
            task.abort();
            if let Ok(Ok(leadership)) = task.await {
                leadership.resign().await.expect("resign");
            }
        }
        if let Some(held) = held {
            held.resign().await.expect("resign");
        }
        b.wait_clean().await;
    }
    b.finish().await;
}

/// A leadership's fenced etcd txn (through its guard) applies while it
/// leads and is refused once it resigned... after which the next leader's
/// goes through: every write under the leadership sees the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_under_leadership_count_exactly() {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};
    use fairlock::etcd::FencedTxn;
    const ELECTORS: usize = 4;
    const ROUNDS: usize = 5;
    let b = etcd("el-fenced").await;
    let counter = format!("{}counter", b.config.prefix());
    let mut tasks = Vec::new();
    for _ in 0..ELECTORS {
        let (elector, counter) = (b.etcd_elector(), counter.clone());
        let mut client = b.client.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let name = Key::from("fenced");
                let leadership = elector
                    .campaign(&patient(), &name, b"w")
                    .await
                    .expect("campaign");
                let now = client.get(counter.clone(), None).await.expect("get");
                let (seen, rev) = now.kvs().first().map_or((0, 0), |kv| {
                    (
                        kv.value_str().unwrap_or("0").parse().unwrap_or(0),
                        kv.mod_revision(),
                    )
                });
                let write = Txn::new()
                    .when([Compare::mod_revision(
                        counter.clone(),
                        CompareOp::Equal,
                        rev,
                    )])
                    .and_then([TxnOp::put(counter.clone(), (seen + 1u64).to_string(), None)]);
                let resp = leadership.guard().fenced_txn(write).await.expect("fenced");
                assert!(resp.succeeded(), "someone else wrote the counter meanwhile");
                leadership.resign().await.expect("resign");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let mut client = b.client.clone();
    let total = client.get(counter.clone(), None).await.expect("get");
    assert_eq!(
        total.kvs()[0].value_str().ok(),
        Some(&*(ELECTORS * ROUNDS).to_string())
    );
    client.delete(counter, None).await.expect("delete");
    b.wait_clean().await;
    b.finish().await;
}

/// `etcd::register` also registers electors: `get_elector` hands out
/// independent ones; a registry whose backend has none says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_hands_out_etcd_electors() {
    let registry = fairlock::Registry::new();
    assert!(matches!(registry.get_elector(), Err(Error::NoProvider)));
    let store = fairlock::memory::MemoryStore::new();
    registry.register(move |fair| Arc::new(store.locker(fair)) as Arc<dyn Locker>);
    let err = registry.get_elector().err().expect("no electors");
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("etcd"), "{err}");

    let b = etcd("el-registry").await;
    fairlock::etcd::register(b.config.clone())
        .await
        .expect("register");
    let (one, two) = (
        fairlock::get_elector().expect("elector"),
        fairlock::get_elector().expect("elector"),
    );
    let name = Key::from("reg");
    let leadership = one
        .campaign(&patient(), &name, b"one")
        .await
        .expect("campaign");
    let leader = two.leader(&name).await.expect("leader").expect("some");
    assert_eq!(leader.value, b"one");
    leadership.resign().await.expect("resign");
    let left = b
        .client
        .clone()
        .get(b.config.prefix(), Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    assert!(left.kvs().is_empty(), "{:?}", left.kvs());
}

/// etcd issue 19597's case: a candidate whose session lease ends while it
/// waits returns `SessionLost` at once (it is told, not elected later),
/// and leaves nothing behind: the leader's resignation elects nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_whose_session_ends_is_told_at_once() {
    let b = etcd("el-19597").await;
    let name = Key::from("web");
    let leader = b.etcd_elector();
    let leadership = leader
        .campaign(&patient(), &name, b"one")
        .await
        .expect("campaign");
    let candidate = b.etcd_elector();
    let waiting = {
        let (candidate, name) = (candidate.clone(), name.clone());
        tokio::spawn(async move { candidate.campaign(&patient(), &name, b"two").await })
    };
    b.wait_candidates(&name, 1).await;
    let lease = candidate
        .locker()
        .session_lease()
        .await
        .expect("the candidate's lease");
    b.client.clone().lease_revoke(lease).await.expect("revoke");
    match waiting.await.expect("task") {
        Err(Error::SessionLost { .. }) => {}
        Ok(_) => panic!("a candidate whose session ended was elected"),
        Err(e) => panic!("{e}"),
    }
    assert!(leadership.is_held(), "the leader leads on");
    leadership.resign().await.expect("resign");
    assert_eq!(leader.leader(&name).await.expect("leader"), None);
    b.wait_clean().await;
}
