//! The etcd queue over a long life: waiting reuses a few key names (etcd
//! keeps an index entry for every name ever written until it compacts), and
//! data under a lock's prefix that fairlock did not write never blocks or
//! takes the lock.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, PutOptions, WatchOptions};
use fairlock::conformance::patient;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Error, Key, Locker};

async fn setup(test: &str) -> (Client, EtcdConfig) {
    let server = support::shared();
    let config =
        EtcdConfig::new([server.endpoint.clone()]).with_prefix(support::unique_prefix(test));
    (server.client().await, config)
}

/// Every queue key name created under `queue` from revision `from` on, and
/// how many creations there were, read from etcd's own history: a watch
/// replays it from `from` up to a marker key written under `prefix` now.
async fn names_created(
    client: &mut Client,
    prefix: &str,
    queue: &str,
    from: i64,
) -> (BTreeSet<Vec<u8>>, usize) {
    let opts = WatchOptions::new().with_prefix().with_start_revision(from);
    let mut stream = client
        .watch_client()
        .watch(prefix, Some(opts))
        .await
        .expect("watch");
    let marker = format!("{prefix}marker");
    client
        .put(marker.as_str(), "end", None)
        .await
        .expect("marker");
    let (mut names, mut creates) = (BTreeSet::new(), 0);
    loop {
        let resp = stream.message().await.expect("watch").expect("open");
        for ev in resp.events() {
            let kv = ev.kv().expect("kv");
            if kv.key() == marker.as_bytes() {
                client.delete(marker.as_str(), None).await.expect("marker");
                return (names, creates);
            }
            let created =
                ev.event_type() == EventType::Put && kv.create_revision() == kv.mod_revision();
            if created && kv.key().starts_with(queue.as_bytes()) {
                names.insert(kv.key().to_vec());
                creates += 1;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_reuses_a_few_queue_key_names() {
    for fair in [true, false] {
        let (mut client, config) = setup(if fair { "names-fair" } else { "names-unfair" }).await;
        let key = Key::from("busy");
        let queue = format!("{}busy/_OWNERS_/", config.prefix());
        let locker = |f| Arc::new(EtcdLocker::from_client(client.clone(), config.clone(), f));
        let (holder, a, b) = (locker(fair), locker(fair), locker(fair));
        let start = client
            .get("x", None)
            .await
            .expect("read")
            .header()
            .expect("h")
            .revision();
        let rounds = 15;
        for _ in 0..rounds {
            // Two waiters queue behind a holder, then get the lock in turn.
            let guard = holder.lock(&patient(), &key).await.expect("hold");
            let waiters: Vec<_> = [&a, &b]
                .into_iter()
                .map(|l| {
                    let (l, key) = (Arc::clone(l), key.clone());
                    tokio::spawn(async move { l.lock(&patient(), &key).await?.unlock().await })
                })
                .collect();
            support::wait_for_count(&mut client, &queue, 2, false).await;
            guard.unlock().await.expect("unlock");
            for w in waiters {
                w.await.expect("join").expect("waiter");
            }
        }
        let (names, creates) = names_created(&mut client, config.prefix(), &queue, start + 1).await;
        assert!(
            creates >= 2 * rounds,
            "only {creates} queue entries were written"
        );
        // One name per waiting locker (the holder's own lock() took the free
        // lock or queued at most once per round): never one per attempt.
        assert!(
            names.len() <= 3,
            "{creates} waits wrote {} distinct queue key names: {:?}",
            names.len(),
            names
                .iter()
                .map(|n| String::from_utf8_lossy(n))
                .collect::<Vec<_>>()
        );
        support::wait_for_count(&mut client, config.prefix(), 0, true).await;
    }
}

/// Puts `value` at `key` with no lease, as another program might.
async fn put_foreign(client: &mut Client, key: &str, value: &[u8]) {
    client.put(key, value, None).await.expect("put");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_entries_fairlock_did_not_write_never_block_or_take_the_lock() {
    for fair in [true, false] {
        let (mut client, config) = setup(if fair { "stray-fair" } else { "stray-unfair" }).await;
        let key = Key::from("h4");
        let queue = format!("{}h4/_OWNERS_/", config.prefix());
        // Entries nobody renews: no lease, a foreign name, a fairlock-like
        // name without a lease, and one with a lease and a name that is not
        // fairlock's.
        put_foreign(
            &mut client,
            &format!("{queue}foreign"),
            b"not-a-fairlock-value",
        )
        .await;
        put_foreign(
            &mut client,
            &format!("{queue}0123abcd/f0"),
            &[0xff, 0, b'\n', 7],
        )
        .await;
        let lease = client.lease_grant(60, None).await.expect("lease").id();
        let opts = PutOptions::new().with_lease(lease);
        client
            .put(format!("{queue}x/y/z"), "odd", Some(opts))
            .await
            .expect("put");
        let locker = EtcdLocker::from_client(client.clone(), config.clone(), fair);
        let other = EtcdLocker::from_client(client.clone(), config.clone(), fair);

        // A waiter behind the strays is granted the lock, with its own lease.
        let guard = locker.lock(&patient(), &key).await.expect("lock");
        let lock_key = format!("{}h4", config.prefix());
        let held = client.get(lock_key.as_str(), None).await.expect("get");
        let kv = held.kvs().first().expect("lock key");
        assert_eq!(kv.lease(), locker.lease_id().await.expect("lease"));

        // A second waiter queues behind the holder and is handed the lock
        // on release, with the strays still there.
        // The three strays, and in fair mode the holder's own entry: the
        // waiter is queued once one more entry is there.
        let before = client
            .get(
                queue.as_str(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .expect("count")
            .count();
        let waiter = {
            let (other, key) = (other.clone(), key.clone());
            tokio::spawn(async move { other.lock(&patient(), &key).await })
        };
        support::wait_for_count(&mut client, &queue, before + 1, false).await;
        let status = locker.status(Some(&key)).await.expect("status");
        assert_eq!(status[0].foreign.len(), 3, "{:?}", status[0].foreign);
        assert_eq!(status[0].waiters.len(), 1);
        guard.unlock().await.expect("unlock");
        let second = waiter.await.expect("join").expect("second lock");
        second.unlock().await.expect("unlock");

        // With nobody holding it, the lock stays free: nothing is handed to
        // the strays.
        let resp = client.get(lock_key.as_str(), None).await.expect("get");
        assert!(
            resp.kvs().is_empty(),
            "the lock key was handed to a stray entry"
        );
        assert!(locker.try_lock(&key).await.expect("try").is_some_and(|g| {
            drop(g);
            true
        }));
        client
            .delete(
                queue.as_str(),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .expect("del");
        client.lease_revoke(lease).await.expect("revoke");
        locker.close().await.expect("close");
        other.close().await.expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_key_fairlock_did_not_write_is_held_by_someone_else() {
    let (mut client, config) = setup("foreign-holder").await;
    let key = Key::from("taken");
    let lock_key = format!("{}taken", config.prefix());
    put_foreign(&mut client, &lock_key, &[0xde, 0xad, b'\n', 0xbe, 0xef]).await;
    for fair in [true, false] {
        let locker = EtcdLocker::from_client(client.clone(), config.clone(), fair);
        assert!(locker.try_lock(&key).await.expect("try_lock").is_none());
        let ctx = Context::background().with_timeout(Duration::from_millis(300));
        match locker.lock(&ctx, &key).await {
            Err(Error::Timeout { .. }) => {}
            other => panic!(
                "expected a timeout, got {:?}",
                other.map(|g| g.fencing_token())
            ),
        }
        let status = locker.status(Some(&key)).await.expect("status");
        let holder = status[0].holder.as_ref().expect("holder");
        assert_eq!(holder.lease, Some(fairlock::LeaseId::NONE));
        assert_eq!(holder.ttl_left, None, "a key without a lease never expires");
        // The waiter that gave up left nothing behind.
        let queue = format!("{lock_key}/_OWNERS_/");
        support::wait_for_count(&mut client, &queue, 0, true).await;
        locker.close().await.expect("close");
    }
    client.delete(lock_key.as_str(), None).await.expect("del");
}

/// A small seeded generator (xorshift), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, max: u64) -> Vec<u8> {
        (0..self.below(max + 1))
            .map(|_| self.next() as u8)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_foreign_data_under_the_prefix_never_panics_or_hangs() {
    let seed = std::env::var("FAIRLOCK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f00d_u64);
    let (mut client, config) = setup("random-data").await;
    let mut rng = Rng(seed);
    let lease = client.lease_grant(60, None).await.expect("lease").id();
    for round in 0..12 {
        let name = format!("r{round}");
        let (lock_key, queue) = (
            format!("{}{name}", config.prefix()),
            format!("{}{name}/_OWNERS_/", config.prefix()),
        );
        let hostile_holder = rng.below(3) == 0;
        if hostile_holder {
            put_foreign(&mut client, &lock_key, &rng.bytes(40)).await;
        }
        for _ in 0..rng.below(6) {
            let suffix = match rng.below(4) {
                0 => String::from_utf8_lossy(&rng.bytes(12)).into_owned(),
                1 => format!("{:x}/f{}", rng.next(), rng.below(5)),
                2 => format!("{:x}/u{}", rng.next(), rng.below(5)),
                _ => format!("{:x}", rng.next()),
            };
            let opts = (rng.below(2) == 0).then(|| PutOptions::new().with_lease(lease));
            client
                .put(format!("{queue}{suffix}"), rng.bytes(64), opts)
                .await
                .expect("put");
        }
        let fair = rng.below(2) == 0;
        let locker = EtcdLocker::from_client(client.clone(), config.clone(), fair);
        let key = Key::from(name.as_str());
        // Behind a foreign holder the wait can only end by its deadline;
        // otherwise the deadline only guards against a hang.
        let wait = if hostile_holder { 300 } else { 60_000 };
        let ctx = Context::background().with_timeout(Duration::from_millis(wait));
        let outcome = locker.lock(&ctx, &key).await;
        let status = locker.status(Some(&key)).await.expect("status never fails");
        match outcome {
            Ok(guard) => {
                assert!(
                    !hostile_holder,
                    "seed {seed} round {round}: granted over a foreign holder"
                );
                guard.unlock().await.expect("unlock");
            }
            Err(Error::Timeout { .. }) => assert!(
                hostile_holder,
                "seed {seed} round {round}: timed out behind foreign queue entries: {status:?}"
            ),
            Err(e) => panic!("seed {seed} round {round}: {e}"),
        }
        let _ = locker.try_lock(&key).await.expect("try_lock answers");
        locker.close().await.expect("close");
    }
    client.lease_revoke(lease).await.expect("revoke");
    let all = GetOptions::new().with_prefix();
    client
        .delete(
            config.prefix(),
            Some(etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await
        .expect("clean up");
    assert_eq!(
        client
            .get(config.prefix(), Some(all.with_count_only()))
            .await
            .expect("count")
            .count(),
        0
    );
}

/// etcd's `/metrics` page.
fn metrics(endpoint: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(endpoint).expect("connect to etcd");
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("ask for metrics");
    let mut page = String::new();
    conn.read_to_string(&mut page).expect("read metrics");
    page
}

/// etcd's count of watch events it sent, from its `/metrics`.
fn events_sent(endpoint: &str) -> u64 {
    metrics(endpoint)
        .lines()
        .find_map(|l| l.strip_prefix("etcd_debugging_mvcc_events_total "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .expect("etcd_debugging_mvcc_events_total in /metrics") as u64
}

/// A fair handoff costs etcd about two watch events on the waiter's own
/// watch, its enqueue and the touch that grants it the lock: the releasing
/// locker's watch does not get its own queue key's deletion back (that
/// made it three and a half here). Counted on an etcd of its own, over
/// handoffs between two lockers that each wait until the other has queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_handoff_sends_one_watch_event() {
    let server = support::Etcd::start();
    let config = EtcdConfig::new([server.endpoint.clone()]).with_prefix("/handoff-events/");
    let client = server.client().await;
    let lockers = [
        EtcdLocker::from_client(client.clone(), config.clone(), true),
        EtcdLocker::from_client(client.clone(), config.clone(), true),
    ];
    let key = Key::from("k");
    let queue = "/handoff-events/k/_OWNERS_/";
    let mut held = lockers[0].lock(&patient(), &key).await.expect("first lock");
    let handoffs = 20;
    let before = events_sent(&server.direct);
    for round in 0..handoffs {
        let next = lockers[(round + 1) % 2].clone();
        let (key2, ctx) = (key.clone(), patient());
        let waiter = tokio::spawn(async move { next.lock(&ctx, &key2).await });
        // The waiter's entry, after the holder's own: a holder that was
        // handed the lock keeps its entry until it releases (the first
        // took a free lock and has none).
        let entries = if round == 0 { 1 } else { 2 };
        support::wait_for_count(&mut client.clone(), queue, entries, false).await;
        held.unlock().await.expect("unlock");
        held = waiter.await.expect("task").expect("handed the lock");
    }
    let events = events_sent(&server.direct) - before;
    held.unlock().await.expect("unlock");
    for l in lockers {
        l.close().await.expect("close");
    }
    // Waits are short, so no waiter opens its patient watch (which would
    // add an event or two now and then).
    assert!(
        events < handoffs as u64 * 3,
        "{events} watch events for {handoffs} handoffs"
    );
}

/// etcd's count of watch requests it received (creates and cancels), from
/// its `/metrics`.
fn watch_requests(endpoint: &str) -> u64 {
    metrics(endpoint)
        .lines()
        .filter(|l| {
            l.starts_with("grpc_server_msg_received_total{")
                && l.contains("grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Thousands of waiters of one locker on one key are each served once,
/// with growing tokens, and cost etcd no watch of their own: a lock freed
/// with nobody to hand it on is watched for by the locker's one vigil.
/// Before, each waiter that had waited its patience read the whole queue
/// and watched its predecessor: 3,000 watches here, and in a closed loop
/// of 3,000 waiters (the scale bench) no handoff went through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_thousand_waiters_of_one_locker_are_all_served() {
    const WAITERS: usize = 3000;
    let server = support::Etcd::start();
    let config = EtcdConfig::new([server.endpoint.clone()]).with_prefix("/thousands/");
    let mut client = server.client().await;
    let queue = "/thousands/q/_OWNERS_/";
    let locker = EtcdLocker::from_client(client.clone(), config, true);
    let key = Key::from("q");
    let first = locker.lock(&patient(), &key).await.expect("lock");
    let watches = watch_requests(&server.direct);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WAITERS {
        let (locker, key) = (locker.clone(), key.clone());
        tasks.spawn(async move {
            let guard = locker.lock(&patient(), &key).await?;
            let token = guard.fencing_token();
            guard.unlock().await?;
            Ok::<_, Error>(token)
        });
    }
    // The holder took a free lock: it has no entry in the queue.
    support::wait_for_count(&mut client, queue, WAITERS as i64, false).await;
    let before = first.fencing_token();
    first.unlock().await.expect("unlock");
    let mut tokens = Vec::with_capacity(WAITERS);
    while let Some(done) = tasks.join_next().await {
        tokens.push(done.expect("task").expect("served"));
    }
    let watches = watch_requests(&server.direct) - watches;
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), WAITERS, "a token was granted twice");
    assert!(tokens[0] > before, "a token went back");
    assert!(
        watches < 50,
        "{watches} watch requests for {WAITERS} waiters of one locker"
    );
    locker.close().await.expect("close");
}
