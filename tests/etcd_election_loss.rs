//! Lost leaderships on etcd, against a real etcd the tests start (see
//! tests/support): a leader paused past its TTL (a child process,
//! SIGSTOP), a leader whose lease is revoked or whose lock key is
//! deleted, and a proclaim that reaches etcd after the leadership ended.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use etcd_client::{Txn, TxnOp};
use fairlock::conformance::{ElectionBackend, patient};
use fairlock::etcd::{EtcdConfig, EtcdElector, FencedTxn};
use fairlock::{Elector, Error, Key, Leader, LeaderWatch, LossCause};
use support::etcd_elections::EtcdElections;

async fn etcd(test: &str) -> EtcdElections {
    EtcdElections::on_shared(test).await
}

/// The next state of `watch`, with a guard deadline against a hang.
async fn next_state(watch: &mut LeaderWatch) -> Option<Leader> {
    tokio::time::timeout(Duration::from_secs(120), watch.next())
        .await
        .expect("no change within two minutes")
        .expect("watch")
}

/// The value of a leader, or "none".
fn shown(state: Option<Leader>) -> String {
    state.map_or("none".into(), |l| String::from_utf8_lossy(&l.value).into())
}

// ---- a leader in a child process ------------------------------------------
//
// The child re-runs this test binary with CHILD_ENV set: it campaigns,
// prints `ELECTED <term>`, and on a line `check` on stdin prints what it
// believes (`LEADER <bool>`) and what its proclaim and a fenced write do.

const CHILD_ENV: &str = "FAIRLOCK_TEST_ELECTION_CHILD";

#[test]
fn child_process_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // an ordinary test run: nothing to do
    };
    let parts: Vec<&str> = spec.split(' ').collect();
    let [endpoint, prefix, name, ttl] = parts[..] else {
        panic!("bad {CHILD_ENV}: {spec}");
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let config = EtcdConfig::new([endpoint])
            .with_prefix(prefix)
            .with_ttl(Duration::from_secs(ttl.parse().expect("ttl")));
        let elector = EtcdElector::connect(config).await.expect("connect");
        let leadership = elector
            .campaign(&patient(), &Key::from(name), b"child")
            .await
            .expect("campaign");
        println!("ELECTED {}", leadership.fencing_token());
        std::io::stdout().flush().expect("flush");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("stdin");
        println!("LEADER {}", leadership.is_held());
        match leadership.proclaim(b"stale").await {
            Ok(()) => println!("PROCLAIM applied"),
            Err(Error::LockLost { .. }) => println!("PROCLAIM refused"),
            Err(e) => println!("PROCLAIM error {e}"),
        }
        let write = Txn::new().and_then([TxnOp::put(format!("{prefix}fenced"), "x", None)]);
        match leadership.guard().fenced_txn(write).await {
            Ok(_) => println!("FENCED applied"),
            Err(Error::LockLost { .. }) => println!("FENCED rejected"),
            Err(e) => println!("FENCED error {e}"),
        }
    });
}

struct ChildLeader {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl ChildLeader {
    fn spawn(prefix: &str, name: &str, ttl_secs: u64) -> Self {
        let endpoint = &support::shared().endpoint;
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "child_process_entry", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_ENV, format!("{endpoint} {prefix} {name} {ttl_secs}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            // libtest may print "test child_process_entry ... " before ours.
            for line in stdout.lines().map_while(Result::ok) {
                let tags = ["ELECTED", "LEADER", "PROCLAIM", "FENCED"];
                if let Some(at) = tags.iter().find_map(|t| line.find(t)) {
                    let _ = tx.send(line[at..].to_string());
                }
            }
        });
        ChildLeader { child, lines }
    }

    fn next_line(&self) -> String {
        // A safety net against a hang, not a timing assertion.
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .expect("no message from the child")
    }

    fn signal(&self, sig: &str) {
        support::signal(self.child.id(), sig);
    }

    fn check(&mut self) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "check").expect("write to child");
        stdin.flush().expect("flush");
    }
}

impl Drop for ChildLeader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A leader paused (SIGSTOP) past its TTL is deposed: its lease expires,
/// observers see nobody lead, then the next candidate, elected; woken, it
/// knows it no longer leads before any request, and neither its proclaim
/// nor its fenced write lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_leader_is_deposed_and_its_writes_refused() {
    let b = etcd("el-paused").await;
    let name = Key::from("paused");
    let mut child = ChildLeader::spawn(b.config.prefix(), name.as_str(), 2);
    let elected = child.next_line();
    let term: u64 = elected["ELECTED ".len()..].parse().expect("term");
    let follower = b.elector();
    let mut watch = follower.observe(&name).await.expect("observe");
    let first = next_state(&mut watch).await.expect("the child leads");
    assert_eq!(
        (first.value.as_slice(), first.fencing_token),
        (&b"child"[..], term)
    );
    let candidate = b.elector();
    let next = {
        let name = name.clone();
        tokio::spawn(async move { candidate.campaign(&patient(), &name, b"next").await })
    };
    b.wait_candidates(&name, 1).await;
    child.signal("-STOP");
    let leadership = next.await.expect("task").expect("elected");
    assert!(leadership.fencing_token() > term);
    assert_eq!(
        shown(next_state(&mut watch).await),
        "none",
        "the lease ended"
    );
    let now = next_state(&mut watch).await.expect("the next leader");
    assert_eq!(
        (now.value.as_slice(), now.fencing_token),
        (&b"next"[..], leadership.fencing_token())
    );
    child.signal("-CONT");
    child.check();
    assert_eq!(child.next_line(), "LEADER false");
    assert_eq!(child.next_line(), "PROCLAIM refused");
    assert_eq!(child.next_line(), "FENCED rejected");
    let leader = follower.leader(&name).await.expect("leader").expect("some");
    assert_eq!(leader.value, b"next", "the stale leader's value landed");
    leadership.resign().await.expect("resign");
    assert_eq!(shown(next_state(&mut watch).await), "none");
    drop(child);
    b.wait_clean().await;
    b.finish().await;
}

/// A leader whose lease is revoked learns it at once (`lost()`, cause
/// `LeaseEnded`); the candidate in line is elected; the deposed leader's
/// proclaim and resign answer `LockLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_lease_ends_the_leadership() {
    let b = etcd("el-revoked").await;
    let name = Key::from("r");
    let (a, c) = (b.etcd_elector(), b.etcd_elector());
    let leadership = a.campaign(&patient(), &name, b"a").await.expect("campaign");
    let mut watch = c.observe(&name).await.expect("observe");
    assert_eq!(shown(next_state(&mut watch).await), "a");
    let next = {
        let (c, name) = (c.clone(), name.clone());
        tokio::spawn(async move { c.campaign(&patient(), &name, b"c").await })
    };
    b.wait_candidates(&name, 1).await;
    let lease = a.locker().lease_id().await.expect("lease");
    b.client.clone().lease_revoke(lease).await.expect("revoke");
    tokio::time::timeout(Duration::from_secs(120), leadership.lost())
        .await
        .expect("the loss signal never fired");
    assert!(!leadership.is_held());
    assert_eq!(leadership.loss_cause(), Some(LossCause::LeaseEnded));
    let second = next.await.expect("task").expect("elected");
    assert_eq!(shown(next_state(&mut watch).await), "none");
    assert_eq!(shown(next_state(&mut watch).await), "c");
    let e = leadership.proclaim(b"late").await.expect_err("deposed");
    assert!(matches!(e, Error::LockLost { .. }), "{e}");
    assert!(e.to_string().contains("the server ended the lease"), "{e}");
    let e = leadership.resign().await.expect_err("deposed");
    assert!(matches!(e, Error::LockLost { .. }), "{e}");
    assert_eq!(shown(c.leader(&name).await.expect("leader")), "c");
    second.resign().await.expect("resign");
    b.wait_clean().await;
    b.finish().await;
}

/// A leader whose lock key is deleted by someone else learns it (cause
/// `KeyChanged`) and removes its value: observers see nobody lead at once,
/// not when its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_lock_key_ends_the_leadership_and_its_value() {
    let b = etcd("el-deleted").await;
    let name = Key::from("deleted");
    let a = b.etcd_elector();
    let leadership = a.campaign(&patient(), &name, b"a").await.expect("campaign");
    let mut watch = a.observe(&name).await.expect("observe");
    assert_eq!(shown(next_state(&mut watch).await), "a");
    let lock_key = format!("{}deleted", b.config.prefix());
    b.client
        .clone()
        .delete(lock_key, None)
        .await
        .expect("delete");
    tokio::time::timeout(Duration::from_secs(120), leadership.lost())
        .await
        .expect("the loss signal never fired");
    assert_eq!(leadership.loss_cause(), Some(LossCause::KeyChanged));
    assert_eq!(shown(next_state(&mut watch).await), "none");
    b.wait_clean().await;
    let e = leadership.resign().await.expect_err("deposed");
    assert!(matches!(e, Error::LockLost { .. }), "{e}");
    b.finish().await;
}

/// A proclaim sent while the leader still believes it leads, but that
/// reaches etcd after its lock key was deleted, is refused by etcd (the
/// term's fence): `LockLost`, and the value stays as it was. The leader's
/// connection goes through a relay that delays it, so it learns of the
/// deletion only after its proclaim is on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaim_landing_after_the_loss_is_refused() {
    let b = etcd("el-fence").await;
    let proxy = support::proxy::Proxy::start(
        "127.0.0.1:0".parse().expect("addr"),
        support::shared().endpoint.clone(),
    )
    .await
    .expect("proxy");
    let config = EtcdConfig::new([proxy.addr.to_string()])
        .with_prefix(b.config.prefix())
        .with_ttl(Duration::from_secs(10));
    let elector = EtcdElector::connect(config).await.expect("connect");
    let name = Key::from("fenced");
    let leadership = elector
        .campaign(&patient(), &name, b"a")
        .await
        .expect("campaign");
    proxy.set_delay(Duration::from_millis(300), Duration::ZERO);
    let lock_key = format!("{}fenced", b.config.prefix());
    b.client
        .clone()
        .delete(lock_key, None)
        .await
        .expect("delete");
    assert!(
        leadership.is_held(),
        "the leader learnt of the deletion too soon"
    );
    let e = leadership.proclaim(b"late").await.expect_err("fenced");
    assert!(matches!(e, Error::LockLost { .. }), "{e}");
    let value_key = format!("{}fenced/_OWNERS_/leader", b.config.prefix());
    let stored = b.client.clone().get(value_key, None).await.expect("get");
    assert!(
        stored
            .kvs()
            .iter()
            .all(|kv| !kv.value().ends_with(b"\nlate")),
        "the late proclaim landed"
    );
    proxy.set_delay(Duration::ZERO, Duration::ZERO);
    tokio::time::timeout(Duration::from_secs(120), leadership.lost())
        .await
        .expect("the loss signal never fired");
    drop(leadership);
    b.wait_clean().await;
    elector.close().await.expect("close");
}

/// A leader that resigns over a slow connection removes its value only
/// after the successor, elected by its release, wrote its own: the
/// removal spares the successor's value (it compares the term).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_retraction_spares_the_successors_value() {
    let b = etcd("el-late-retract").await;
    let proxy = support::proxy::Proxy::start(
        "127.0.0.1:0".parse().expect("addr"),
        support::shared().endpoint.clone(),
    )
    .await
    .expect("proxy");
    let config = EtcdConfig::new([proxy.addr.to_string()]).with_prefix(b.config.prefix());
    let slow = EtcdElector::connect(config).await.expect("connect");
    let name = Key::from("late");
    let leadership = slow
        .campaign(&patient(), &name, b"a")
        .await
        .expect("campaign");
    let next = {
        let (c, name) = (b.etcd_elector(), name.clone());
        tokio::spawn(async move { c.campaign(&patient(), &name, b"c").await })
    };
    b.wait_candidates(&name, 1).await;
    proxy.set_delay(Duration::from_millis(300), Duration::ZERO);
    leadership.resign().await.expect("resign");
    let second = next.await.expect("task").expect("elected");
    let leader = b.elector().leader(&name).await.expect("leader");
    assert_eq!(shown(leader), "c", "the successor's value was removed");
    second.resign().await.expect("resign");
    proxy.set_delay(Duration::ZERO, Duration::ZERO);
    slow.close().await.expect("close");
    b.wait_clean().await;
    b.finish().await;
}

/// An observer whose watch reaches etcd late (its connection delays every
/// message) still sees every change made after its first read, in order:
/// its watch replays them from the revision it read at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_observer_misses_no_change() {
    let b = etcd("el-slow-observer").await;
    let proxy = support::proxy::Proxy::start(
        "127.0.0.1:0".parse().expect("addr"),
        support::shared().endpoint.clone(),
    )
    .await
    .expect("proxy");
    let config = EtcdConfig::new([proxy.addr.to_string()]).with_prefix(b.config.prefix());
    let slow = EtcdElector::connect(config).await.expect("connect");
    let name = Key::from("slow");
    proxy.set_delay(Duration::from_millis(300), Duration::ZERO);
    let mut watch = slow.observe(&name).await.expect("observe");
    // Made while the observer's watch request is still on its way.
    let leadership = b
        .etcd_elector()
        .campaign(&patient(), &name, b"a1")
        .await
        .expect("campaign");
    leadership.proclaim(b"a2").await.expect("proclaim");
    leadership.resign().await.expect("resign");
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(shown(next_state(&mut watch).await));
    }
    assert_eq!(seen, ["none", "a1", "a2", "none"]);
    drop(watch);
    proxy.set_delay(Duration::ZERO, Duration::ZERO);
    slow.close().await.expect("close");
    b.wait_clean().await;
    b.finish().await;
}
