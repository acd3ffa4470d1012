//! The test network (`tests/support/net.rs`) and the delay relay
//! (`tests/support/proxy.rs`) that the network fault suite
//! (`examples/faults --net`) is built on.
//!
//! The relay tests run everywhere. The network tests need root (network
//! namespaces); without it they pass after printing why they did nothing.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::Instant;

use support::net::Net;
use support::proxy::Proxy;

/// A server that reads everything a connection sends and returns it with
/// the (tokio) instant the first byte came in.
async fn sink() -> (
    SocketAddr,
    tokio::task::JoinHandle<std::io::Result<(Vec<u8>, Instant)>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        let mut first = [0u8; 1];
        s.read_exact(&mut first).await?;
        let at = Instant::now();
        let mut all = first.to_vec();
        s.read_to_end(&mut all).await?;
        Ok((all, at))
    });
    (addr, task)
}

/// With tokio's clock paused, time moves only to the next timer, so a
/// chunk's arrival time says exactly how long the relay held it.
#[tokio::test(start_paused = true)]
async fn relay_holds_chunks_for_the_delay() {
    let (target, got) = sink().await;
    let proxy = Proxy::start("127.0.0.1:0".parse().unwrap(), target.to_string())
        .await
        .unwrap();
    let delay = Duration::from_millis(300);
    proxy.set_delay(delay, Duration::ZERO);
    let mut c = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let sent = Instant::now();
    c.write_all(b"hello").await.unwrap();
    c.shutdown().await.unwrap();
    let (data, at) = got.await.unwrap().unwrap();
    assert_eq!(data, b"hello");
    assert!(
        at.duration_since(sent) >= delay,
        "the chunk came through after {:?}, before the {delay:?} delay",
        at.duration_since(sent)
    );
}

/// Jitter delays chunks by different amounts but never reorders them.
#[tokio::test]
async fn relay_keeps_order_under_jitter() {
    let (target, got) = sink().await;
    let proxy = Proxy::start("127.0.0.1:0".parse().unwrap(), target.to_string())
        .await
        .unwrap();
    proxy.set_delay(Duration::from_millis(1), Duration::from_millis(5));
    let mut c = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    c.set_nodelay(true).unwrap();
    let mut want = Vec::new();
    for i in 0..300u32 {
        let line = format!("{i}\n");
        want.extend_from_slice(line.as_bytes());
        c.write_all(line.as_bytes()).await.unwrap();
        if i % 10 == 0 {
            tokio::task::yield_now().await;
        }
    }
    c.shutdown().await.unwrap();
    let (data, _) = got.await.unwrap().unwrap();
    assert_eq!(
        String::from_utf8(data).unwrap(),
        String::from_utf8(want).unwrap()
    );
}

/// Whether the network tests can run here; prints why not.
fn net_or_skip(test: &str) -> bool {
    match Net::unavailable() {
        None => true,
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// A TCP listener inside node `i` (a process of its own), echoing nothing:
/// accepting is what the tests look at.
fn listen_in(net: &Net, i: usize, port: u16) -> std::process::Child {
    let code = format!(
        "import socket,sys\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('{}',{port}))\ns.listen(64)\nprint('ready',flush=True)\n\
         while True:\n  c,_=s.accept()\n  c.sendall(b'x')\n  c.close()\n",
        net.node(i).ip
    );
    let mut child = net
        .command(i, "python3")
        .args(["-c", &code])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 in the node");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

/// Connects from node `from` to `to` and reads the server's byte.
async fn reaches(net: &Net, from: usize, to: SocketAddr) -> bool {
    let Ok(mut s) = net.dial(from, to).await else {
        return false;
    };
    let mut b = [0u8; 1];
    // A safety net for a cut that lands mid-connection, not a timing check.
    matches!(
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut b)).await,
        Ok(Ok(_))
    )
}

#[tokio::test]
async fn cut_heal_partition_and_loss() {
    if !net_or_skip("cut_heal_partition_and_loss") {
        return;
    }
    let mut net = Net::new().unwrap();
    let a = net.add_node("a").unwrap();
    let b = net.add_node("b").unwrap();
    let c = net.add_node("c").unwrap();
    let watcher = net.add_observer("obs").unwrap();
    let names = net.namespaces();
    let mut server = listen_in(&net, b, 7000);
    let to_b = SocketAddr::from((net.node(b).ip, 7000));

    assert!(reaches(&net, a, to_b).await, "a reaches b");
    net.cut(b).unwrap();
    assert!(!reaches(&net, a, to_b).await, "a reaches b while b is cut");
    assert!(!reaches(&net, watcher, to_b).await, "cut from everyone");
    net.heal(b).unwrap();
    assert!(reaches(&net, a, to_b).await, "a reaches b after the heal");

    // b and c against a: c still reaches b, a does not; the observer does.
    net.partition(&[b, c]).unwrap();
    assert!(
        !reaches(&net, a, to_b).await,
        "a reaches b across the partition"
    );
    assert!(reaches(&net, c, to_b).await, "c reaches b on its side");
    assert!(reaches(&net, watcher, to_b).await, "the observer reaches b");
    net.heal_partition().unwrap();
    assert!(
        reaches(&net, a, to_b).await,
        "a reaches b after the partition"
    );

    // Loss: the rules are in place in b's namespace, and gone after.
    net.loss(b, 30).unwrap();
    let rules = net.run(b, "nft", &["list", "ruleset"]).unwrap();
    assert!(rules.contains("numgen random mod 100 < 30"), "{rules}");
    net.clear_loss(b).unwrap();
    let rules = net.run(b, "nft", &["list", "ruleset"]).unwrap();
    assert!(!rules.contains("numgen"), "{rules}");

    // The harness reaches b through a gateway on the host's loopback.
    let gw = net.gateway(watcher, to_b).await.unwrap();
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let mut byte = [0u8; 1];
    s.read_exact(&mut byte).await.unwrap();
    assert_eq!(&byte, b"x");

    let _ = server.kill();
    let _ = server.wait();
    drop(net);
    let left = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    for ns in names {
        assert!(!left.contains(&ns), "namespace {ns} left behind:\n{left}");
    }
}

/// A run that was killed leaves its namespaces; the next run deletes them.
#[tokio::test]
async fn stale_namespaces_of_a_dead_run_are_swept() {
    if !net_or_skip("stale_namespaces_of_a_dead_run_are_swept") {
        return;
    }
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = format!("{}{dead}-test-x", support::net::PREFIX);
    let ok = std::process::Command::new("ip")
        .args(["netns", "add", &stale])
        .status()
        .unwrap();
    assert!(ok.success());
    let net = Net::new().unwrap();
    let left = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout).into_owned();
    drop(net);
    if left.contains(&stale) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &stale])
            .status();
        panic!("stale namespace {stale} survived Net::new:\n{left}");
    }
}
