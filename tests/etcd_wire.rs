//! What fairlock's requests look like on the wire to etcd, read by a relay
//! that parses the client's HTTP/2 frames on their way to a real etcd.

mod support;

use std::sync::{Arc, Mutex};

use fairlock::conformance::patient;
use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Key, Locker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The HTTP/2 client preface, before the first frame.
const PREFACE: usize = 24;
const DATA: u8 = 0x0;
const END_STREAM: u8 = 0x1;

/// The client's DATA frames that end a stream, as the relay saw them.
#[derive(Default, Debug, Clone, Copy, PartialEq)]
struct StreamEnds {
    /// On a frame that carries a message.
    with_message: usize,
    /// On an empty frame of their own.
    empty: usize,
}

/// Passes connections on to `target`, counting the stream ends in what
/// clients send.
async fn relay(target: String) -> (String, Arc<Mutex<StreamEnds>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let endpoint = listener.local_addr().expect("address").to_string();
    let ends = Arc::new(Mutex::new(StreamEnds::default()));
    let counted = Arc::clone(&ends);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let upstream = TcpStream::connect(&target).await.expect("connect etcd");
            tokio::spawn(pass_on(client, upstream, Arc::clone(&counted)));
        }
    });
    (endpoint, ends)
}

async fn pass_on(client: TcpStream, upstream: TcpStream, ends: Arc<Mutex<StreamEnds>>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_etcd, mut to_etcd) = upstream.into_split();
    tokio::spawn(async move { tokio::io::copy(&mut from_etcd, &mut to_client).await });
    let mut seen = Vec::new();
    let mut parsed = PREFACE;
    let mut chunk = vec![0; 16 * 1024];
    while let Ok(n) = from_client.read(&mut chunk).await {
        if n == 0 {
            return;
        }
        // Every complete frame after the preface, counted before etcd can
        // answer it.
        seen.extend_from_slice(&chunk[..n]);
        while seen.len() >= parsed + 9 {
            let header = &seen[parsed..parsed + 9];
            let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            if seen.len() < parsed + 9 + length {
                break;
            }
            if header[3] == DATA && header[4] & END_STREAM != 0 {
                let mut ends = ends.lock().unwrap();
                match length {
                    0 => ends.empty += 1,
                    _ => ends.with_message += 1,
                }
            }
            parsed += 9 + length;
        }
        let done = parsed.min(seen.len());
        seen.drain(..done);
        parsed -= done;
        if to_etcd.write_all(&chunk[..n]).await.is_err() {
            return;
        }
    }
}

/// A request's message ends its stream itself: tonic's bodies learn they
/// are done only when polled again, and hyper would send the end in an
/// empty DATA frame of its own, often in a TCP packet of its own that etcd
/// reads and handles on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_end_their_stream_with_their_message() {
    let etcd = support::shared();
    let target = etcd.endpoint.trim_start_matches("http://").to_string();
    let mut ends = StreamEnds::default();
    for fair in [true, false] {
        // A relay per locker, read before the locker closes: closing ends
        // its streaming calls (the lease keepalive, the watches) with an
        // empty frame, rightly, which is not what this counts, and which
        // may reach a relay still counting at any time after.
        let (endpoint, counted) = relay(target.clone()).await;
        let config = EtcdConfig::new([endpoint]).with_prefix(support::unique_prefix("wire-ends"));
        let locker = EtcdLocker::connect(config, fair).await.expect("connect");
        let key = Key::from("k");
        for _ in 0..10 {
            locker
                .lock(&patient(), &key)
                .await
                .expect("lock")
                .unlock()
                .await
                .expect("unlock");
        }
        // Every request was counted before etcd could answer it.
        let seen = *counted.lock().unwrap();
        ends.with_message += seen.with_message;
        ends.empty += seen.empty;
        locker.close().await.expect("close");
    }
    assert!(
        ends.with_message >= 40,
        "at least a lock and an unlock request each time: {ends:?}"
    );
    assert_eq!(ends.empty, 0, "streams ended by an empty frame: {ends:?}");
}
