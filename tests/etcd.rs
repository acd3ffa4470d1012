//! The conformance suite and etcd-only behaviour, against a real etcd that
//! the tests start themselves (see tests/support). Lost locks and fencing:
//! etcd_loss.rs; connecting and configuration: etcd_connect.rs.

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use etcd_client::{Txn, TxnOp};
use fairlock::conformance::{Backend, patient};
use fairlock::etcd::{EtcdConfig, EtcdLocker, FencedTxn};
use fairlock::{Error, Key, Locker};
use support::etcd_backend::EtcdBackend as Etcd;

async fn etcd(test: &str) -> Etcd {
    Etcd::on_shared(test).await
}

fairlock::conformance_tests!(etcd);

// ---- child processes -------------------------------------------------------
//
// Cross-process tests re-run this test binary as a child that executes
// `child_process_entry` below with FAIRLOCK_TEST_CHILD set. The child takes
// the lock, prints `GRANTED <token>`, and unlocks when it reads a line on
// stdin (or exits without unlocking when killed).

const CHILD_ENV: &str = "FAIRLOCK_TEST_CHILD";

#[test]
fn child_process_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // an ordinary test run: nothing to do
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [endpoint, prefix, key, fair, ttl] = parts[..] else {
        panic!("bad {CHILD_ENV}: {spec}");
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let config = EtcdConfig::new([endpoint])
            .with_prefix(prefix)
            .with_ttl(Duration::from_secs(ttl.parse().expect("ttl")));
        let locker = EtcdLocker::connect(config, fair == "fair")
            .await
            .expect("connect");
        let guard = locker
            .lock(&patient(), &Key::from(key))
            .await
            .expect("lock");
        println!("GRANTED {}", guard.fencing_token());
        std::io::stdout().flush().expect("flush");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("stdin");
        if line.trim() == "check" {
            // Asked after a pause: what does the holder believe, and does a
            // fenced write get through?
            println!("HELD {}", guard.is_held());
            let write = Txn::new().and_then([TxnOp::put(format!("{prefix}fenced"), "x", None)]);
            match guard.fenced_txn(write).await {
                Ok(_) => println!("FENCED applied"),
                Err(Error::LockLost { .. }) => println!("FENCED rejected"),
                Err(e) => println!("FENCED error {e}"),
            }
            return;
        }
        guard.unlock().await.expect("unlock");
        println!("RELEASED");
    });
}

struct ChildLocker {
    child: Child,
}

impl ChildLocker {
    /// Starts a child that locks `key`; its stdout lines go to `lines`
    /// tagged with `tag`.
    fn spawn(
        endpoint: &str,
        prefix: &str,
        key: &str,
        fair: bool,
        ttl_secs: u64,
        tag: usize,
        lines: mpsc::Sender<(usize, String)>,
    ) -> Self {
        let mode = if fair { "fair" } else { "unfair" };
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "child_process_entry",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(
                CHILD_ENV,
                format!("{endpoint} {prefix} {key} {mode} {ttl_secs}"),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        std::thread::spawn(move || {
            // libtest may print "test child_process_entry ... " before ours.
            for line in stdout.lines().map_while(Result::ok) {
                let tags = ["GRANTED", "RELEASED", "HELD", "FENCED"];
                if let Some(at) = tags.iter().find_map(|t| line.find(t)) {
                    let _ = lines.send((tag, line[at..].to_string()));
                }
            }
        });
        ChildLocker { child }
    }

    fn release(&mut self) {
        self.tell("release");
    }

    fn tell(&mut self, what: &str) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{what}").expect("write to child");
        stdin.flush().expect("flush");
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} the child");
    }
}

impl Drop for ChildLocker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn next_line(lines: &mpsc::Receiver<(usize, String)>) -> (usize, String) {
    // A safety net against a hang, not a timing assertion.
    lines
        .recv_timeout(Duration::from_secs(120))
        .expect("no message from the child processes")
}

/// Fair mode grants in arrival order across separate OS processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_order_across_processes() {
    const PROCESSES: usize = 5;
    let b = etcd("xproc-order").await;
    let key = Key::from("shared");
    let holder = b.locker(true);
    let first = holder
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    let (tx, rx) = mpsc::channel();
    let mut children = Vec::new();
    for i in 0..PROCESSES {
        children.push(ChildLocker::spawn(
            &support::shared().endpoint,
            b.config.prefix(),
            key.as_str(),
            true,
            10,
            i,
            tx.clone(),
        ));
        b.wait_queued(&key, i + 1).await; // child i is queued before child i+1 starts
    }
    let mut last_token = first.fencing_token();
    first.unlock().await.expect("unlock");
    let mut released = 0;
    for (i, child) in children.iter_mut().enumerate() {
        let (tag, line) = loop {
            match next_line(&rx) {
                (_, line) if line == "RELEASED" => released += 1,
                granted => break granted,
            }
        };
        assert_eq!(
            tag, i,
            "process {tag} was granted before process {i}: {line}"
        );
        let token: u64 = line["GRANTED ".len()..].parse().expect("token");
        assert!(token > last_token, "token {token} after {last_token}");
        last_token = token;
        child.release();
    }
    while released < PROCESSES {
        assert_eq!(next_line(&rx).1, "RELEASED");
        released += 1;
    }
    b.wait_clean().await;
}

/// A holder killed with SIGKILL frees the lock when its lease expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_frees_the_lock_after_its_ttl() {
    for fair in [true, false] {
        let b = etcd("sigkill").await;
        let (tx, rx) = mpsc::channel();
        let mut child = ChildLocker::spawn(
            &support::shared().endpoint,
            b.config.prefix(),
            "victim",
            fair,
            2,
            0,
            tx,
        );
        let (_, line) = next_line(&rx);
        assert!(line.starts_with("GRANTED"), "{line}");
        child.child.kill().expect("SIGKILL the holder");
        child.child.wait().expect("reap");
        let waiter = b.locker(fair);
        let guard = waiter
            .lock(&patient(), &Key::from("victim"))
            .await
            .expect("lock after holder died");
        guard.unlock().await.expect("unlock");
        b.wait_clean().await;
    }
}

/// A holder paused (SIGSTOP) past its TTL learns on waking, before any
/// request, that its lock is gone, and its fenced write is rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_learns_its_lock_is_lost() {
    let b = etcd("paused").await;
    let (tx, rx) = mpsc::channel();
    let mut child = ChildLocker::spawn(
        &support::shared().endpoint,
        b.config.prefix(),
        "k",
        true,
        2,
        0,
        tx,
    );
    let (_, line) = next_line(&rx);
    assert!(line.starts_with("GRANTED"), "{line}");
    child.signal("-STOP");
    // The lease expires while the holder sleeps: another locker gets in.
    let other = b.locker(true);
    let guard = other
        .lock(&patient(), &Key::from("k"))
        .await
        .expect("lock after the holder's lease expired");
    child.signal("-CONT");
    child.tell("check");
    assert_eq!(next_line(&rx).1, "HELD false");
    assert_eq!(next_line(&rx).1, "FENCED rejected");
    let fenced = format!("{}fenced", b.config.prefix());
    let written = b.client.clone().get(fenced, None).await.expect("get");
    assert!(written.kvs().is_empty(), "the stale holder's write landed");
    guard.unlock().await.expect("unlock");
    b.wait_clean().await;
}

/// `close` revokes the session lease: its keys vanish and no lease is left.
#[tokio::test]
async fn close_revokes_the_session_lease() {
    let b = etcd("close").await;
    let locker = EtcdLocker::from_client(b.client.clone(), b.config.clone(), true);
    let lease = locker.lease_id().await.expect("lease");
    let _guard = locker
        .try_lock(&Key::from("x"))
        .await
        .expect("try_lock")
        .expect("free");
    assert!(!b.is_clean().await);
    locker.close().await.expect("close");
    assert!(
        b.is_clean().await,
        "revoking the lease must delete its keys"
    );
    let ttl = b
        .client
        .clone()
        .lease_time_to_live(lease, None)
        .await
        .expect("ttl");
    assert_eq!(ttl.ttl(), -1, "the lease must be gone");
}

/// The registry: no provider is a clear error; `etcd::register` provides
/// independent lockers that exclude each other.
#[tokio::test]
async fn registry_hands_out_etcd_lockers() {
    let err = fairlock::Registry::new()
        .get_locker(true)
        .err()
        .expect("empty registry");
    assert!(
        matches!(err, Error::NoProvider) && err.to_string().contains("register"),
        "{err}"
    );
    let b = etcd("registry").await;
    fairlock::etcd::register(b.config.clone())
        .await
        .expect("register");
    let (a, c) = (
        fairlock::get_locker(true).expect("locker"),
        fairlock::get_locker(false).expect("locker"),
    );
    assert!(a.is_fair() && !c.is_fair());
    let key = Key::from("reg");
    let g = a.try_lock(&key).await.expect("try_lock").expect("free");
    assert!(c.try_lock(&key).await.expect("try_lock").is_none());
    g.unlock().await.expect("unlock");
    b.wait_clean().await;
}

/// Dropping an `unlock()` future part way does not stop the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_unlock_future_still_releases() {
    let b = etcd("unlock-drop").await;
    let key = Key::from("k");
    let (a, c) = (b.locker(true), b.locker(true));
    let guard = a.lock(&patient(), &key).await.expect("lock");
    {
        let unlock = guard.unlock();
        tokio::pin!(unlock);
        // Poll once, then drop it, as a caller's timeout or select! would.
        let _ = futures_poll_once(unlock.as_mut()).await;
    }
    let again = c
        .lock(&patient(), &key)
        .await
        .expect("lock after a dropped unlock");
    again.unlock().await.expect("unlock");
    b.finish().await;
}

async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// `lock` futures cancelled at any point (even while their txn is in
/// flight) leave nothing behind: the cleanup waits for the write's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_cancelled_at_any_point_leaves_nothing() {
    for fair in [true, false] {
        let b = etcd("cancel-anywhere").await;
        let key = Key::from("k");
        let holder = b.locker(fair);
        let held = holder
            .try_lock(&key)
            .await
            .expect("try_lock")
            .expect("free");
        let waiter = b.locker(fair);
        for i in 0..60u32 {
            let (w, k) = (Arc::clone(&waiter), key.clone());
            let task = tokio::spawn(async move { w.lock(&patient(), &k).await });
            for _ in 0..(i % 20) {
                tokio::task::yield_now().await;
            }
            task.abort();
            let _ = task.await;
        }
        // Give the same test to a free key: the take txn itself in flight.
        let free = Key::from("free");
        for i in 0..60u32 {
            let (w, k) = (Arc::clone(&waiter), free.clone());
            let task = tokio::spawn(async move { w.lock(&patient(), &k).await });
            for _ in 0..(i % 20) {
                tokio::task::yield_now().await;
            }
            task.abort();
            if let Ok(Ok(guard)) = task.await {
                guard.unlock().await.expect("unlock");
            }
        }
        held.unlock().await.expect("unlock");
        b.wait_clean().await;
        b.finish().await;
    }
}

/// Unicode keys with `/` separators work like any other, and `status`
/// names them as given.
#[tokio::test]
async fn unicode_keys_with_separators() {
    let b = etcd("unicode").await;
    let locker = EtcdLocker::from_client(b.client.clone(), b.config.clone(), true);
    let key = Key::from("報告/夜間 ✓/ü");
    let guard = locker.lock(&patient(), &key).await.expect("lock");
    let status = locker.status(Some(&key)).await.expect("status");
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].key, key.as_str());
    assert_eq!(
        status[0].holder.as_ref().map(|h| h.fencing_token),
        Some(guard.fencing_token())
    );
    // Its parent segment is a different lock.
    let parent = locker
        .try_lock(&Key::from("報告"))
        .await
        .expect("try_lock")
        .expect("a parent path is a separate lock");
    parent.unlock().await.expect("unlock");
    guard.unlock().await.expect("unlock");
    locker.close().await.expect("close");
    b.wait_clean().await;
}

/// One locker holding thousands of keys at once, all released cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_keys_at_once() {
    const KEYS: usize = 2000;
    let b = etcd("many").await;
    // The test is about how many keys one locker holds, not about its
    // lease: its burst of 2,000 requests, on test.sh's loaded 2-core run
    // and through the 3.7 relay, took round trips of about 3 s, and a
    // renewal confirmed by a read needs two of them within the TTL.
    let config = b.config.clone().with_ttl(Duration::from_secs(30));
    let locker = Arc::new(EtcdLocker::from_client(b.client.clone(), config, true));
    let mut tasks = Vec::new();
    for i in 0..KEYS {
        let locker = Arc::clone(&locker);
        tasks.push(tokio::spawn(async move {
            locker.lock(&patient(), &Key::from(format!("k{i}"))).await
        }));
    }
    let mut guards = Vec::new();
    for t in tasks {
        guards.push(t.await.expect("task").expect("lock"));
    }
    let held = support::count_keys(&mut b.client.clone(), b.config.prefix()).await;
    assert_eq!(held, KEYS as i64);
    assert!(guards.iter().all(fairlock::LockGuard::is_held));
    let releases: Vec<_> = guards
        .into_iter()
        .map(|g| tokio::spawn(g.unlock()))
        .collect();
    for r in releases {
        r.await.expect("task").expect("unlock");
    }
    b.wait_clean().await;
}

/// A queued `lock` on its own locker, whose session lease the test can
/// revoke to simulate a crash.
struct Queued {
    locker: EtcdLocker,
    cancel: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<fairlock::Result<fairlock::LockGuard>>,
}

impl Queued {
    /// Queues a fair `lock` on `key` and waits until it is the `n`-th entry.
    async fn start(b: &Etcd, key: &Key, n: usize) -> Queued {
        let locker = EtcdLocker::from_client(b.client.clone(), b.config.clone(), true);
        let (ctx, cancel) = patient().with_cancel();
        let task = {
            let (locker, key) = (locker.clone(), key.clone());
            tokio::spawn(async move { locker.lock(&ctx, &key).await })
        };
        b.wait_queued(key, n).await;
        Queued {
            locker,
            cancel,
            task,
        }
    }

    /// Simulates a crash: revokes the lease behind the locker's back.
    async fn crash(&self, b: &Etcd) {
        let lease = self.locker.lease_id().await.expect("lease");
        b.client.clone().lease_revoke(lease).await.expect("revoke");
    }

    async fn granted(self) -> fairlock::LockGuard {
        self.task.await.expect("task").expect("granted")
    }
}

/// Waiters ahead in line that cancel or crash, with the holder releasing,
/// crashing or already gone, never strand those behind them, and the
/// survivors are served in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_ahead_vanishing_do_not_strand_the_queue() {
    let b = etcd("vanish-ahead").await;
    let key = Key::from("k");
    let holder = EtcdLocker::from_client(b.client.clone(), b.config.clone(), true);

    // A middle waiter cancels; the holder releases; another one crashes.
    let held = holder
        .try_lock(&key)
        .await
        .expect("try_lock")
        .expect("free");
    let w1 = Queued::start(&b, &key, 1).await;
    let w2 = Queued::start(&b, &key, 2).await;
    let w3 = Queued::start(&b, &key, 3).await;
    let w4 = Queued::start(&b, &key, 4).await;
    w2.cancel.cancel();
    let err = w2.task.await.expect("task").expect_err("cancelled");
    assert!(matches!(err, Error::Cancelled { .. }), "{err}");
    held.unlock().await.expect("unlock");
    let g1 = w1.granted().await;
    // w1's grant passed w3 and w4 along; w3 then crashes.
    w3.crash(&b).await;
    let err = w3.task.await.expect("task").expect_err("crashed");
    assert!(matches!(err, Error::SessionLost { .. }), "{err}");
    assert!(!w4.task.is_finished(), "granted out of order");
    g1.unlock().await.expect("unlock");
    let locker4 = w4.locker.clone();
    let g4 = w4.granted().await;

    // The first waiter crashes, then the holder (no handoff): the next one
    // notices on its own.
    let w5 = Queued::start(&b, &key, 2).await;
    let w6 = Queued::start(&b, &key, 3).await;
    let w7 = Queued::start(&b, &key, 4).await;
    w5.crash(&b).await;
    // Its own cleanup ran while the lock was held, so it served nobody: the
    // next waiter must notice the holder's crash by itself.
    let err = w5.task.await.expect("task").expect_err("crashed");
    assert!(matches!(err, Error::SessionLost { .. }), "{err}");
    let holder_lease = locker4.lease_id().await.expect("lease");
    std::mem::forget(g4); // its locker "crashed": no release
    b.client
        .clone()
        .lease_revoke(holder_lease)
        .await
        .expect("revoke");
    let locker6 = w6.locker.clone();
    let g6 = w6.granted().await;
    assert!(!w7.task.is_finished(), "granted out of order");

    // The holder crashes, then the first waiter gives up: the next one is
    // served.
    let w8 = Queued::start(&b, &key, 3).await;
    let lease6 = locker6.lease_id().await.expect("lease");
    std::mem::forget(g6);
    b.client.clone().lease_revoke(lease6).await.expect("revoke");
    w7.cancel.cancel();
    let _ = w7.task.await.expect("task");
    let g8 = w8.granted().await;
    g8.unlock().await.expect("unlock");
    b.wait_clean().await;
}

/// The largest `lock_all` etcd takes in one txn: 32 keys of 4 KiB each
/// (128 KiB of names, the limit), fair and unfair, held and released; a
/// 33rd key is refused before any request, saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_takes_32_keys_of_4_kib() {
    let b = etcd("all-32").await;
    let long = "k".repeat(4096 - 3);
    let keys: Vec<Key> = (0..32)
        .map(|i| Key::from(format!("{i:02}{long}")))
        .collect();
    assert_eq!(
        keys.iter().map(|k| k.as_str().len()).sum::<usize>(),
        32 * 4095
    );
    for fair in [true, false] {
        let (l, other) = (b.locker(fair), b.locker(fair));
        let all = l.lock_all(&patient(), &keys).await.expect("32 keys");
        assert!(other.try_lock(&keys[31]).await.expect("try").is_none());
        all.unlock().await.expect("unlock");
        let again = other
            .try_lock_all(&keys)
            .await
            .expect("try 32")
            .expect("free");
        again.unlock().await.expect("unlock");
    }
    let mut more = keys.clone();
    more.push(Key::from("one-more"));
    match b.locker(true).lock_all(&patient(), &more).await {
        Err(Error::InvalidKey { reason, .. }) => {
            assert!(reason.contains("max-txn-ops"), "{reason}")
        }
        other => panic!("33 keys: {other:?}"),
    }
    assert!(b.is_clean().await);
    b.finish().await;
}

/// A `lock_all` guard's unlock releases every key in one txn: a waiter
/// for the same keys is handed all of them at one revision (so its tokens
/// are equal), and with nobody waiting every lock key is deleted at one
/// revision, as etcd's own history shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_unlock_is_one_txn() {
    let b = etcd("all-one-txn").await;
    let keys: Vec<Key> = ["a", "b", "c"].map(Key::from).to_vec();
    let (first, second) = (b.locker(true), b.locker(true));
    let held = first.lock_all(&patient(), &keys).await.expect("lock_all");
    let waiter = tokio::spawn({
        let keys = keys.clone();
        async move { second.lock_all(&patient(), &keys).await }
    });
    for key in &keys {
        b.wait_queued(key, 1).await;
    }
    held.unlock().await.expect("unlock");
    let handed = waiter.await.expect("task").expect("lock_all");
    let tokens: Vec<u64> = keys
        .iter()
        .filter_map(|k| handed.fencing_token(k))
        .collect();
    assert_eq!(tokens.len(), 3);
    assert!(tokens.windows(2).all(|t| t[0] == t[1]), "{tokens:?}");

    let prefix = b.config.prefix().to_owned();
    let opts = etcd_client::WatchOptions::new().with_prefix();
    let checker = b.checker.clone();
    let mut history = checker
        .watch_client()
        .watch(prefix.as_str(), Some(opts))
        .await
        .expect("watch");
    handed.unlock().await.expect("unlock");
    let lock_keys: Vec<String> = keys.iter().map(|k| format!("{prefix}{k}")).collect();
    let mut deleted = std::collections::BTreeMap::new();
    while deleted.len() < lock_keys.len() {
        let resp = history.message().await.expect("watch").expect("open");
        for ev in resp.events() {
            let kv = ev.kv().expect("kv");
            let name = String::from_utf8_lossy(kv.key()).into_owned();
            if ev.event_type() == etcd_client::EventType::Delete && lock_keys.contains(&name) {
                deleted.insert(name, kv.mod_revision());
            }
        }
    }
    let revisions: BTreeSet<i64> = deleted.values().copied().collect();
    assert_eq!(revisions.len(), 1, "deleted at {deleted:?}");
    assert!(b.is_clean().await);
    b.finish().await;
}
