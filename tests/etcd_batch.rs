//! Lockers on one connection send the writes they make at the same time
//! together, as the branches of one etcd txn (`src/etcd/client/batch.rs`). Each
//! test has an etcd of its own: every txn that writes adds one to its
//! revision, so the revision counts the requests that wrote.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::Client;
use fairlock::conformance::patient;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Key, Locker};
use support::cluster::Cluster;
use tokio::time::Instant;

/// Lockers on the connection, each locking its own key.
const LOCKERS: usize = 32;
/// Lock and unlock cycles per locker.
const CYCLES: usize = 20;

async fn revision(client: &mut Client) -> i64 {
    client
        .get("/", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision()
}

/// `n` lockers on one connection, fair and unfair by turns.
async fn lockers(endpoint: &str, test: &str, batching: bool, n: usize) -> Vec<EtcdLocker> {
    let config = EtcdConfig::new([endpoint])
        .with_prefix(support::unique_prefix(test))
        .with_write_batching(batching);
    let first = EtcdLocker::connect(config, true).await.expect("connect");
    let mut all: Vec<EtcdLocker> = (1..n).map(|i| first.another(i % 2 == 0)).collect();
    all.push(first);
    all
}

/// Every locker locks and unlocks its own key (`<name><i>`) `cycles` times,
/// all at once.
async fn cycle_all(lockers: &[EtcdLocker], name: &str, cycles: usize) {
    let tasks: Vec<_> = lockers
        .iter()
        .enumerate()
        .map(|(i, locker)| {
            let (locker, key) = (locker.clone(), Key::from(format!("{name}{i}")));
            tokio::spawn(async move {
                for _ in 0..cycles {
                    let guard = locker
                        .lock(&Context::background(), &key)
                        .await
                        .unwrap_or_else(|e| panic!("lock (locker {i}): {e}"));
                    guard
                        .unlock()
                        .await
                        .unwrap_or_else(|e| panic!("unlock (locker {i}): {e}"));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("locker task");
    }
}

/// Grants every locker its session lease, before counting (lease grants
/// and revokes leave the revision as it is), and returns their ids.
async fn warm_up(lockers: &[EtcdLocker]) -> Vec<i64> {
    let mut leases = Vec::new();
    for locker in lockers {
        leases.push(locker.lease_id().await.expect("session lease"));
    }
    leases
}

/// The writes (requests that wrote) [`cycle_all`] made.
async fn writes_of(client: &mut Client, lockers: &[EtcdLocker], name: &str, cycles: usize) -> i64 {
    let before = revision(client).await;
    cycle_all(lockers, name, cycles).await;
    revision(client).await - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_made_at_the_same_time_share_requests() {
    let server = support::Etcd::start();
    let mut client = server.client().await;
    let all = lockers(&server.endpoint, "batch", true, LOCKERS).await;
    warm_up(&all).await;
    let writes = writes_of(&mut client, &all, "k", CYCLES).await;
    let cycles = (LOCKERS * CYCLES) as i64;
    // Alone, each cycle is two writes (take, release): see the next test.
    // How many go together depends on how the cycles meet, so on the
    // machine's load (1.2 to 1.9 writes a cycle seen on 2 cores): the
    // check is that some did, not how many (the bench measures that).
    assert!(
        writes < cycles * 2,
        "{cycles} lock cycles of {LOCKERS} lockers on one connection made {writes} \
         writes: fewer than 2 per cycle were expected, as writes made at the same \
         time go together"
    );
    for locker in all {
        locker.close().await.expect("close");
    }
    assert_eq!(support::count_keys(&mut client, "/fairlock-test/").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_batching_each_write_is_a_request() {
    let server = support::Etcd::start();
    let mut client = server.client().await;
    let all = lockers(&server.endpoint, "alone", false, LOCKERS).await;
    warm_up(&all).await;
    let writes = writes_of(&mut client, &all, "k", CYCLES).await;
    assert_eq!(
        writes,
        (LOCKERS * CYCLES * 2) as i64,
        "one take and one release per cycle"
    );
    for locker in all {
        locker.close().await.expect("close");
    }
}

/// etcd refuses a whole txn when one branch writes with a lease it no
/// longer has, and applies none of it: the writes that went with that one
/// must get their own answers, not its refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_does_not_fail_the_writes_it_went_with() {
    let server = support::Etcd::start();
    let mut client = server.client().await;
    let all = lockers(&server.endpoint, "refused", true, LOCKERS).await;
    let leases = warm_up(&all).await;
    // Every fourth locker's lease ends behind its back: its next take is
    // refused ("lease not found") and then retried with a new lease.
    let revoked: Vec<usize> = (0..LOCKERS).step_by(4).collect();
    for &i in &revoked {
        client.lease_revoke(leases[i]).await.expect("revoke");
    }
    let writes = writes_of(&mut client, &all, "k", 4).await;
    assert!(
        writes < (LOCKERS * 4 * 2) as i64,
        "no writes went together ({writes} writes), so this test proved nothing"
    );
    for (i, locker) in all.iter().enumerate() {
        if revoked.contains(&i) {
            continue;
        }
        // A refusal passed on to it would have made it drop its lease.
        assert_eq!(
            locker.lease_id().await.expect("lease"),
            leases[i],
            "locker {i} lost its session lease to another locker's refused write"
        );
    }
    tokio::time::timeout(Duration::from_secs(30), async {
        for locker in all {
            locker.close().await.expect("close");
        }
    })
    .await
    .expect("close in time");
}

/// 32 takes of locks with 60 KiB keys would make a txn far over etcd's
/// request size limit: writes for long keys go alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_for_long_keys_go_alone() {
    let server = support::Etcd::start();
    let mut client = server.client().await;
    let all = lockers(&server.endpoint, "long", true, LOCKERS).await;
    warm_up(&all).await;
    let writes = writes_of(&mut client, &all, &"x".repeat(60 * 1024), 3).await;
    assert_eq!(
        writes,
        (LOCKERS * 3 * 2) as i64,
        "every take and release of a long key is a request of its own"
    );
    for locker in all {
        locker.close().await.expect("close");
    }
}

/// One holding, as its task saw it.
struct Held {
    key: usize,
    token: u64,
    from: Instant,
    to: Instant,
    /// Still held at `to` (the local lease deadline not passed) and
    /// released without error: nobody else can have held the key between
    /// `from` and `to`.
    kept: bool,
}

/// 32 lockers on one connection, 4 per key, take turns while the leader of
/// a 3-member cluster is killed: writes made together get no answer or
/// fail together, and are retried. No two holdings of a key may overlap
/// unless the earlier one was lost, and each key's tokens must grow in the
/// order of the grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_made_together_keep_locks_exclusive_when_the_leader_dies() {
    const KEYS: usize = 8;
    const ROUNDS: usize = 12;
    let mut cluster = Cluster::start(3).expect("start a 3-member cluster");
    let config = EtcdConfig::new(cluster.endpoints())
        .with_prefix(support::unique_prefix("batch-leader"))
        .with_ttl(Duration::from_secs(2));
    let first = EtcdLocker::connect(config.clone(), true)
        .await
        .expect("connect");
    let mut all: Vec<EtcdLocker> = (1..LOCKERS).map(|i| first.another(i % 2 == 0)).collect();
    all.push(first);
    let cycles = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(tokio::sync::Notify::new());
    let tasks: Vec<_> = all
        .iter()
        .enumerate()
        .map(|(i, locker)| {
            let (locker, cycles, started) =
                (locker.clone(), Arc::clone(&cycles), Arc::clone(&started));
            let key = i % KEYS;
            tokio::spawn(async move {
                let mut held = Vec::new();
                for _ in 0..ROUNDS {
                    let guard = match locker.lock(&patient(), &Key::from(format!("k{key}"))).await {
                        Ok(guard) => guard,
                        // With a 2 s TTL the leader's death may outlast a
                        // waiter's session, or its retries: it is told so
                        // and gives up. Safety, not liveness, is checked
                        // here; any other error fails the test.
                        Err(
                            fairlock::Error::SessionLost { .. }
                            | fairlock::Error::Unavailable { .. }
                            | fairlock::Error::Backend { .. },
                        ) => {
                            if cycles.fetch_add(1, Ordering::SeqCst) + 1 == LOCKERS * 2 {
                                started.notify_one();
                            }
                            continue;
                        }
                        Err(e) => panic!("lock: {e}"),
                    };
                    let (from, token) = (Instant::now(), guard.fencing_token());
                    tokio::task::yield_now().await;
                    let still = guard.is_held();
                    let to = Instant::now();
                    let kept = guard.unlock().await.is_ok() && still;
                    held.push(Held {
                        key,
                        token,
                        from,
                        to,
                        kept,
                    });
                    if cycles.fetch_add(1, Ordering::SeqCst) + 1 == LOCKERS * 2 {
                        started.notify_one();
                    }
                }
                held
            })
        })
        .collect();
    started.notified().await;
    let leader = cluster
        .wait_leader(Duration::from_secs(30))
        .await
        .expect("leader");
    cluster.kill(leader).expect("kill the leader");
    let mut held = Vec::new();
    for task in tasks {
        held.extend(task.await.expect("locker task"));
    }
    cluster.restart(leader).expect("restart");
    assert!(
        held.len() >= LOCKERS,
        "only {} of {} rounds were granted",
        held.len(),
        LOCKERS * ROUNDS
    );
    for key in 0..KEYS {
        let mut turns: Vec<&Held> = held.iter().filter(|h| h.key == key).collect();
        turns.sort_by_key(|h| h.from);
        for pair in turns.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                !(a.kept && b.from < a.to),
                "key k{key}: token {} was granted while token {} was still held",
                b.token,
                a.token
            );
            assert!(
                b.token > a.token,
                "key k{key}: token {} was granted after token {}",
                b.token,
                a.token
            );
        }
    }
    for locker in all {
        let _ = locker.close().await;
    }
}
