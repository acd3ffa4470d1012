//! A session lease that lapses here (no renewal counted for a TTL) while
//! etcd keeps it, as in the leaderless window of an election: the locker's
//! waiters keep their places in line on the same lease, renewed again, and
//! the lock it held, reported lost, is freed rather than kept alive by the
//! renewed lease. A 3-member cluster that loses its quorum for a while
//! stands for the leaderless window. Tests start their own servers (see
//! tests/support).

mod support;

use std::sync::Arc;
use std::time::Duration;

use fairlock::conformance::patient;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Error, Key, Locker};
use support::cluster::Cluster;

/// How one round went.
enum Round {
    /// The waiter kept its place on its lease, renewed again.
    Kept,
    /// etcd no longer had the waiter's lease, once a new leader was elected
    /// or by the time the waiter got the lock (etcd 3.4 sometimes ends
    /// leases around such a loss of quorum): the round shows nothing. A
    /// lease that is never renewed again ends like this in every round.
    LeaseEndedInEtcd,
}

/// How many rounds may show nothing before the test fails. About half
/// the rounds end with etcd ending the lease on this machine (7 of 12 and
/// 5 of 10 in two series of runs, with fairlock's member choice and with
/// etcd-client's), so 3 rounds failed about one run in eight; 8 rounds
/// leave under 1 % to chance. A lease never renewed again fails them all.
const ROUNDS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_keeps_its_place_when_its_lease_lapsed_only_here() {
    let cluster = Cluster::start(3).expect("start a 3-member cluster");
    for _ in 0..ROUNDS {
        match round(&cluster).await {
            Round::Kept => return,
            Round::LeaseEndedInEtcd => continue,
        }
    }
    panic!(
        "in {ROUNDS} rounds the waiter never kept its lease through the loss of quorum \
         (etcd ended it each time, or it was never renewed again)"
    );
}

async fn round(cluster: &Cluster) -> Round {
    let leader = cluster
        .wait_leader(Duration::from_secs(30))
        .await
        .expect("leader");
    let prefix = support::unique_prefix("lapse");
    let config = EtcdConfig::new(cluster.endpoints())
        .with_prefix(prefix.clone())
        // Long enough for the revived lease's renewals to land while a
        // member just woken may still hold some requests back.
        .with_ttl(Duration::from_secs(5))
        // A waiter gives up after two request timeouts of failed requests:
        // the window without a quorum (up to a TTL until the lapse, then
        // an election) must be shorter than that. With the default 5 s the
        // waiter sometimes gave up reopening its watch ("etcd request
        // failed during watch") before the new leader was elected.
        .with_request_timeout(Duration::from_secs(10));
    let connect = || EtcdLocker::connect(config.clone(), true);
    let holder = connect().await.expect("connect");
    let waiter = Arc::new(connect().await.expect("connect"));
    let other = connect().await.expect("connect");
    let (k, j) = (Key::from("k"), Key::from("j"));
    let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .expect("connect");

    let held = holder.lock(&patient(), &k).await.expect("lock k");
    // The waiter also holds j when its lease lapses.
    let lost = waiter.lock(&patient(), &j).await.expect("lock j");
    let waiting = tokio::spawn({
        let waiter = Arc::clone(&waiter);
        let k = k.clone();
        async move { waiter.lock(&patient(), &k).await }
    });
    support::wait_for_count(&mut client, &format!("{prefix}k/_OWNERS_/"), 1, false).await;
    let lease = waiter.session_lease().await.expect("the waiter's lease");

    // The leader and a follower stop: no renewal can count, so every lease
    // lapses here. The frozen leader proposes nothing (running without a
    // quorum, etcd 3.4 would propose revoking the leases it saw expire, and
    // commit that if it stayed leader); the follower left cannot win an
    // election alone. Once the other follower runs again the two elect a
    // leader, which extends every lease.
    let follower = (leader + 1) % 3;
    for i in [leader, follower] {
        cluster.signal(i, libc::SIGSTOP).expect("SIGSTOP");
    }
    lost.lost().await;
    cluster.signal(follower, libc::SIGCONT).expect("SIGCONT");
    // The old leader runs again once the others have a leader of a later
    // term: whatever it proposes then cannot commit. (Stopped, it would
    // keep a third of the requests waiting: its kernel still accepts
    // connections.)
    let new_leader = cluster
        .wait_leader(Duration::from_secs(30))
        .await
        .expect("a new leader");
    assert_ne!(new_leader, leader);
    cluster.signal(leader, libc::SIGCONT).expect("SIGCONT");
    if !lease_in_etcd(&mut client, lease).await {
        let _ = waiting.await;
        return Round::LeaseEndedInEtcd;
    }

    // The holder's lease is not renewed again, so k is free once it
    // expires in etcd; the waiter gets it on its first lease, renewed again.
    let guard = match waiting.await.expect("task") {
        Ok(guard) => guard,
        // Its renewals did not reach etcd in time after all, so etcd ended
        // the lease and the entry with it.
        Err(Error::SessionLost { .. }) if !lease_in_etcd(&mut client, lease).await => {
            return Round::LeaseEndedInEtcd;
        }
        Err(e) => panic!("the waiter kept its place and got k: {e}"),
    };
    // The same after a revival: a waiter whose lease lapsed here queues
    // again on a fresh lease when its entry vanishes.
    if waiter.session_lease().await != Some(lease) && !lease_in_etcd(&mut client, lease).await {
        return Round::LeaseEndedInEtcd;
    }
    assert!(guard.is_held());
    assert!(!held.is_held());
    assert_eq!(
        waiter.session_lease().await,
        Some(lease),
        "the waiter's lease was renewed again, not replaced"
    );
    let lock_key = client
        .get(format!("{prefix}k"), None)
        .await
        .expect("read k");
    assert_eq!(lock_key.kvs().first().map(|kv| kv.lease()), Some(lease));

    // The lock the waiter held on j was reported lost when its lease
    // lapsed, and its key was deleted before the lease was renewed again.
    assert!(!lost.is_held());
    let j_guard = other
        .try_lock(&j)
        .await
        .expect("try_lock j")
        .expect("j is free: the lost holding's key was deleted");

    j_guard.unlock().await.expect("unlock j");
    guard.unlock().await.expect("unlock k");
    drop((held, lost));
    holder.close().await.expect("close");
    Arc::try_unwrap(waiter)
        .ok()
        .expect("no other owner")
        .close()
        .await
        .expect("close");
    other.close().await.expect("close");
    support::wait_for_count(&mut client, &prefix, 0, true).await;
    let leases = client.leases().await.expect("leases");
    assert!(leases.leases().is_empty(), "leases left behind");
    Round::Kept
}

/// Whether etcd still has `lease`. Asked again while the cluster answers
/// "unavailable" (the test has just made it change leaders: "etcdserver:
/// leader changed"), for at most a minute, a guard against a hang.
async fn lease_in_etcd(client: &mut etcd_client::Client, lease: i64) -> bool {
    let ask = async {
        loop {
            match client.lease_time_to_live(lease, None).await {
                Ok(ttl) => return ttl.ttl() > 0,
                Err(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("ask etcd for the waiter's lease: {e}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), ask)
        .await
        .expect("etcd did not answer for the waiter's lease within a minute")
}
