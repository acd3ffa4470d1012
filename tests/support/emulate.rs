//! etcd versions this machine cannot run, emulated in front of a real etcd.
//!
//! No etcd 3.6 or 3.7 binary can be had here (Debian packages 3.4 and 3.5
//! only, and etcd cannot be built offline). What those versions answer
//! differently is emulated by a gRPC relay between the client and a real
//! etcd: [`Relay`] passes every call through, streams included, and
//! rewrites the answers a newer etcd gives differently.
//!
//! - **etcd 3.7 keys-only ranges.** etcd 3.7 answers a range with
//!   `keys_only` set (and not sorted by value) from its in-memory index:
//!   each KeyValue carries its key, create and mod revision and version
//!   only, **lease 0 and no value** (etcd `server/etcdserver/txn/range.go`).
//!   The relay clears `lease` and `value` in such answers, in `Range` and
//!   in every keys-only range of the `Txn` branch that ran (nested txns
//!   included).
//!
//! `FAIRLOCK_ETCD_EMULATE=3.7` makes every [`super::Etcd`] the tests
//! start answer through such a relay (scripts/test.sh runs a round so).
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Buf, Bytes, BytesMut};
use etcd_client::proto::{
    PbRangeRequest, PbRangeResponse, PbTxnOpRequest, PbTxnOpResponse, PbTxnRequest, PbTxnResponse,
};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::{TcpListener, TcpStream};

/// The environment variable that names the etcd version to emulate.
pub const EMULATE_VAR: &str = "FAIRLOCK_ETCD_EMULATE";

/// An etcd version the relay answers as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// etcd 3.7: keys-only ranges without leases and values.
    V3_7,
}

impl Version {
    /// The version [`EMULATE_VAR`] names, if any; panics on one it does
    /// not know, saying which it knows.
    pub fn from_env() -> Option<Version> {
        let name = std::env::var(EMULATE_VAR).ok().filter(|v| !v.is_empty())?;
        match name.as_str() {
            "3.7" => Some(Version::V3_7),
            other => panic!("{EMULATE_VAR}={other}: the tests can emulate etcd 3.7 only"),
        }
    }
}

/// `SortTarget::VALUE` in etcd's `RangeRequest`: a range sorted by value
/// reads values, so etcd 3.7 does not answer it from the index.
const SORT_BY_VALUE: i32 = 4;

/// A running relay; dropping it stops it and closes its connections.
pub struct Relay {
    /// Where clients connect, `127.0.0.1:port`.
    pub endpoint: String,
    /// Key-values answered without their lease and value so far.
    stripped: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    /// Relays to the etcd at `upstream` (`host:port`), answering as
    /// `version`. It runs on a thread of its own, so it outlives the
    /// runtime of any one test.
    pub fn start(upstream: &str, version: Version) -> Relay {
        let upstream: SocketAddr = upstream.parse().expect("upstream is host:port");
        let listener =
            super::on_free_ports(|| std::net::TcpListener::bind(("127.0.0.1", super::free_port())))
                .expect("bind the relay");
        listener.set_nonblocking(true).expect("nonblocking");
        let endpoint = listener.local_addr().expect("local addr").to_string();
        let stripped = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let count = Arc::clone(&stripped);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("relay runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                tokio::select! {
                    () = accept(listener, upstream, version, count) => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime ends every connection task.
        });
        Relay {
            endpoint,
            stripped,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// How many key-values the relay answered without lease and value.
    pub fn stripped(&self) -> u64 {
        self.stripped.load(Ordering::Relaxed)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves each client connection over a connection of its own to etcd.
async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    version: Version,
    count: Arc<AtomicU64>,
) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            continue;
        };
        let count = Arc::clone(&count);
        tokio::spawn(async move {
            let _ = inbound.set_nodelay(true);
            let Ok(outbound) = TcpStream::connect(upstream).await else {
                return; // dropping `inbound` tells the client
            };
            let _ = outbound.set_nodelay(true);
            let Ok((sender, upstream)) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(outbound))
                    .await
            else {
                return;
            };
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (sender, count) = (sender.clone(), Arc::clone(&count));
                async move { Ok::<_, Infallible>(relay(sender, req, version, &count).await) }
            });
            // No limits etcd does not have: etcd takes any number of
            // streams at once (`--max-concurrent-streams`), and closes no
            // connection for streams its client reset (hyper's defaults, 200
            // streams and 20 resets of streams not yet served, closed a
            // connection whose client gave up on hedged copies under a
            // burst of 1,000 lock calls).
            let client = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .max_concurrent_streams(u32::MAX)
                .max_pending_accept_reset_streams(usize::MAX)
                .max_local_error_reset_streams(None)
                .serve_connection(TokioIo::new(inbound), service);
            // The two connections end together: a client whose etcd went
            // away (killed, restarted) sees its connection break, as it
            // would without the relay, and connects again.
            tokio::select! {
                _ = upstream => {}
                _ = client => {}
            }
        });
    }
}

/// Which answers of a call the relay rewrites.
enum Rewrite {
    Range,
    Txn,
}

/// Relays one call: unary `Range` and `Txn` calls whole, to rewrite their
/// answer; every other call (watches, keepalives) streams through.
async fn relay(
    mut sender: hyper::client::conn::http2::SendRequest<Body>,
    req: Request<Incoming>,
    version: Version,
    count: &AtomicU64,
) -> Response<Body> {
    let rewrite = match (version, req.uri().path()) {
        (Version::V3_7, "/etcdserverpb.KV/Range") => Some(Rewrite::Range),
        (Version::V3_7, "/etcdserverpb.KV/Txn") => Some(Rewrite::Txn),
        _ => None,
    };
    let Some(rewrite) = rewrite else {
        return match sender.send_request(req.map(BodyExt::boxed)).await {
            Ok(resp) => resp.map(BodyExt::boxed),
            Err(e) => unavailable(&e),
        };
    };
    let (parts, body) = req.into_parts();
    let Ok(request) = body.collect().await.map(|b| b.to_bytes()) else {
        return unavailable(&"the client's request body broke");
    };
    let forwarded = Request::from_parts(parts, full(request.clone()));
    let resp = match sender.send_request(forwarded).await {
        Ok(resp) => resp,
        Err(e) => return unavailable(&e),
    };
    let (parts, body) = resp.into_parts();
    let Ok(collected) = body.collect().await else {
        return unavailable(&"etcd's answer broke off");
    };
    let trailers = collected.trailers().cloned();
    let answer = collected.to_bytes();
    let answer = match (grpc_message(&request), grpc_message(&answer)) {
        (Some(req), Some(resp)) => {
            let rewritten = match rewrite {
                Rewrite::Range => rewrite_range(req, resp, count),
                Rewrite::Txn => rewrite_txn(req, resp, count),
            };
            grpc_frame(&rewritten)
        }
        // An error answer (no message), or one the relay cannot read: as is.
        _ => answer,
    };
    let mut frames = vec![Ok(Frame::data(answer))];
    if let Some(trailers) = trailers {
        frames.push(Ok(Frame::trailers(trailers)));
    }
    let body = StreamBody::new(futures_util::stream::iter(frames));
    Response::from_parts(parts, BodyExt::boxed(body))
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).map_err(|never| match never {}).boxed()
}

/// A gRPC "unavailable" answer, as a relay that lost its upstream gives.
fn unavailable(why: &dyn std::fmt::Display) -> Response<Body> {
    Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", "14")
        .header(
            "grpc-message",
            format!("relay: {why}").replace(['\r', '\n'], " "),
        )
        .body(full(Bytes::new()))
        .expect("a valid response")
}

/// The one uncompressed message of a unary gRPC body, if that is what it is.
fn grpc_message(body: &Bytes) -> Option<Bytes> {
    let mut b = body.clone();
    if b.len() < 5 || b[0] != 0 {
        return None;
    }
    b.advance(1);
    let len = usize::try_from(b.get_u32()).ok()?;
    (b.len() == len).then_some(b)
}

/// `message` as the body of a unary gRPC answer.
fn grpc_frame(message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + message.len());
    b.extend_from_slice(&[0]);
    b.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    b.extend_from_slice(message);
    b.freeze()
}

/// Whether etcd 3.7 answers range `r` from its index.
fn fast_keys_only(r: &PbRangeRequest) -> bool {
    r.keys_only && r.sort_target != SORT_BY_VALUE
}

/// Clears what a fast keys-only answer lacks.
fn strip(resp: &mut PbRangeResponse, count: &AtomicU64) {
    for kv in &mut resp.kvs {
        kv.lease = 0;
        kv.value.clear();
        count.fetch_add(1, Ordering::Relaxed);
    }
}

fn rewrite_range(req: Bytes, resp: Bytes, count: &AtomicU64) -> Vec<u8> {
    let (Ok(req), Ok(mut answer)) = (
        PbRangeRequest::decode(req),
        PbRangeResponse::decode(resp.clone()),
    ) else {
        return resp.to_vec();
    };
    if fast_keys_only(&req) {
        strip(&mut answer, count);
    }
    answer.encode_to_vec()
}

fn rewrite_txn(req: Bytes, resp: Bytes, count: &AtomicU64) -> Vec<u8> {
    let (Ok(req), Ok(mut answer)) = (
        PbTxnRequest::decode(req),
        PbTxnResponse::decode(resp.clone()),
    ) else {
        return resp.to_vec();
    };
    strip_txn(&req, &mut answer, count);
    answer.encode_to_vec()
}

/// Strips the keys-only ranges of the branch of `req` that ran.
fn strip_txn(req: &PbTxnRequest, resp: &mut PbTxnResponse, count: &AtomicU64) {
    let ran = if resp.succeeded {
        &req.success
    } else {
        &req.failure
    };
    for (op, answer) in ran.iter().zip(resp.responses.iter_mut()) {
        match (&op.request, &mut answer.response) {
            (Some(PbTxnOpRequest::RequestRange(r)), Some(PbTxnOpResponse::ResponseRange(a)))
                if fast_keys_only(r) =>
            {
                strip(a, count);
            }
            (Some(PbTxnOpRequest::RequestTxn(t)), Some(PbTxnOpResponse::ResponseTxn(a))) => {
                strip_txn(t, a, count);
            }
            _ => {}
        }
    }
}
