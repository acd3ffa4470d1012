//! Which member a request goes to: the least loaded of one connection per
//! endpoint, weighted by how each member has been answering.
//!
//! etcd-client's own balancer picks a connected member at random. A member
//! that is cut off behind a relay or an L4 load balancer that still accepts
//! connections looks connected to it, so a third of the requests (with
//! three members) hang there until their timeout, again after every
//! reconnect, and a retried or hedged copy may well go the same way. Here
//! each member's load is the number of its requests still waiting for an
//! answer, and a member counts as failing (and is passed over while
//! another is not) when:
//! - a request to it has waited longer than `slow` (a third of the request
//!   timeout: when a hedged copy goes out, it goes elsewhere);
//! - a request was given up after waiting that long, failed in transport
//!   (refused, reset, pings unanswered), or was answered "unavailable" (no
//!   leader there).
//!
//! A failing member is passed over for a while that doubles with each
//! failure in a row (from `cooldown`, at most 32 times that; requests that
//! fail together count once) and is tried again after it; its first good
//! answer clears it. A request given up on a member also replaces the
//! connection it was sent on, also while the member is failing already,
//! unless that connection answered another request since this one was
//! sent: a connect that never ends (a TLS handshake with a load balancer
//! whose backend is gone has no timeout) would otherwise hold every later
//! request to it, while a new connection to a slow member that still
//! answers would only add to its load. Copies given up on one connection
//! together make one new connection. With every member failing, the least
//! loaded is used: requests never wait for a member to recover. Ties go
//! round the members in turn. `health.rs` keeps the score.
//!
//! The choice is made in the caller's task, and each member's connection
//! is tonic's own (`Endpoint::connect_lazy`: it reconnects by itself), so a
//! request takes no more task hops than through etcd-client's balancer.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, TryLockError};
use std::task::{Context, Poll};

use etcd_client::{BalancedChannelBuilder, Channel};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::Endpoint;
use tonic::transport::channel::Change;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceExt};

use super::health::Health;
use super::health::Routing;
use crate::etcd::client::request_body::EndWithLastFrame;
use crate::etcd::client::stale_token::{self, RenewInTrailers};

type Request = http::Request<tonic::body::Body>;
type Response = http::Response<tonic::body::Body>;
type Endpoints = mpsc::Receiver<Change<http::Uri, Endpoint>>;

/// How many endpoint changes can wait before a request applies them.
const ENDPOINT_ROOM: usize = 4096;

/// The gRPC status code of an "unavailable" answer (etcd: no leader, or
/// the member is stopping).
const UNAVAILABLE: &[u8] = b"14";

impl BalancedChannelBuilder for Routing {
    type Error = etcd_client::Error;

    fn balanced_channel(
        self,
        buffer_size: usize,
    ) -> Result<(Channel, mpsc::Sender<Change<http::Uri, Endpoint>>), Self::Error> {
        // etcd-client sends every endpoint before its first request, which
        // is what drains them: leave room for any list a person writes.
        let (tx, rx) = mpsc::channel(buffer_size.max(ENDPOINT_ROOM));
        let balancer = Balancer {
            members: Arc::new(Members {
                routing: self,
                endpoints: Mutex::new(rx),
                list: RwLock::default(),
                turn: AtomicUsize::new(0),
            }),
        };
        Ok((Channel::Custom(BoxCloneSyncService::new(balancer)), tx))
    }
}

/// The service etcd-client sends every request through.
#[derive(Clone)]
struct Balancer {
    members: Arc<Members>,
}

/// The members, as etcd-client inserts and removes their endpoints.
struct Members {
    routing: Routing,
    /// Endpoint changes not applied yet.
    endpoints: Mutex<Endpoints>,
    list: RwLock<Vec<(http::Uri, Member)>>,
    /// Where the next tie-break starts.
    turn: AtomicUsize,
}

impl Members {
    /// Applies the endpoint changes sent since the last call (etcd-client
    /// sends them all before its first request).
    fn update(&self) {
        let mut endpoints = match self.endpoints.try_lock() {
            Ok(endpoints) => endpoints,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            // Another request is applying them: go on with the members
            // there are, unless there are none yet.
            Err(_)
                if !self
                    .list
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_empty() =>
            {
                return;
            }
            Err(_) => self.endpoints.lock().unwrap_or_else(|p| p.into_inner()),
        };
        while let Ok(change) = endpoints.try_recv() {
            let mut list = self.list.write().unwrap_or_else(|p| p.into_inner());
            match change {
                Change::Insert(uri, endpoint) => {
                    list.retain(|(u, _)| *u != uri);
                    list.push((uri, Member::new(&endpoint, self.routing)));
                }
                Change::Remove(uri) => list.retain(|(u, _)| *u != uri),
            }
        }
    }

    /// The member with the least [`Weight`] now, ties taken in turn.
    fn pick(&self) -> Option<Member> {
        self.update();
        let list = self.list.read().unwrap_or_else(|p| p.into_inner());
        let n = list.len();
        let first = self.turn.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        (0..n)
            .map(|i| &list[first.wrapping_add(i) % n].1)
            .map(|member| (member.health().weight(now), member))
            .min_by(|(a, _), (b, _)| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal))
            .map(|(_, member)| member.clone())
    }
}

impl Service<Request> for Balancer {
    type Response = Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each member's connection is made ready in the request's future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let member = self.members.pick();
        let request = request.map(|body| tonic::body::Body::new(EndWithLastFrame::new(body)));
        Box::pin(async move {
            let Some(member) = member else {
                return Err("no etcd endpoint to send the request to".into());
            };
            let (connection, mut channel) = member.channel();
            let pending = Pending::start(&member, connection);
            let mut result = match channel.ready().await {
                Ok(channel) => channel.call(request).await,
                Err(e) => Err(e),
            };
            if let Ok(answer) = &mut result {
                stale_token::renew_in_headers(answer.headers_mut());
            }
            let result =
                result.map(|answer| answer.map(|b| tonic::body::Body::new(RenewInTrailers(b))));
            let answered = result.is_ok();
            let failed = match &result {
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .is_some_and(|code| code.as_bytes() == UNAVAILABLE),
                Err(_) => true,
            };
            pending.finish(answered, failed);
            result.map_err(Into::into)
        })
    }
}

/// One member's connection and how it has been answering.
#[derive(Clone)]
struct Member(Arc<Link>);

struct Link {
    endpoint: Endpoint,
    connection: Mutex<Connection>,
    health: Health,
}

/// How many streams this process reset (a request given up, a hedged
/// copy that lost, a watch stream closed) a connection remembers, so that
/// what etcd still sends on them is dropped quietly. h2 remembers 10 by
/// default and counts a frame on a forgotten one as an error of its own;
/// after 1,024 such it closes the connection (`GOAWAY`,
/// `too_many_internal_resets`), failing every request on it: seen in a
/// test's client that closed a watch per change of a burst of 1,000.
const RESETS_REMEMBERED: usize = 10_000;

/// A member's current connection.
struct Connection {
    /// How many were replaced before it.
    number: u64,
    channel: tonic::transport::Channel,
    /// When it last brought an answer (any answer: it is alive).
    answered: Option<Instant>,
}

impl Member {
    fn new(endpoint: &Endpoint, routing: Routing) -> Self {
        let endpoint = endpoint
            .clone()
            .http2_max_concurrent_reset_streams(RESETS_REMEMBERED);
        Member(Arc::new(Link {
            connection: Mutex::new(Connection {
                number: 0,
                channel: endpoint.connect_lazy(),
                answered: None,
            }),
            endpoint,
            health: Health::new(routing),
        }))
    }

    fn health(&self) -> &Health {
        &self.0.health
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.0.connection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection to send on, with its number.
    fn channel(&self) -> (u64, tonic::transport::Channel) {
        let connection = self.connection();
        (connection.number, connection.channel.clone())
    }

    /// Connection number `number` brought an answer at `now`.
    fn answered(&self, number: u64, now: Instant) {
        let mut connection = self.connection();
        if connection.number == number {
            connection.answered = Some(now);
        }
    }

    /// A request sent on connection number `number` at `sent` was given
    /// up: replaces that connection with a fresh one, unless that was done
    /// already or it answered since. A request given up there may be stuck
    /// in a connect that never ends (a TLS handshake with a load balancer
    /// whose backend is gone has no timeout of its own). Requests still on
    /// the old one keep it until they end.
    fn given_up(&self, number: u64, sent: Instant) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let mut connection = self.connection();
        if connection.number == number && connection.answered.is_none_or(|at| at < sent) {
            *connection = Connection {
                number: number + 1,
                channel: self.0.endpoint.connect_lazy(),
                answered: None,
            };
        }
    }
}

/// A request on its way: ends as given up if dropped before an answer.
struct Pending {
    member: Member,
    id: u64,
    /// The number of the connection it was sent on.
    connection: u64,
    sent: Instant,
    done: bool,
}

impl Pending {
    fn start(member: &Member, connection: u64) -> Self {
        let sent = Instant::now();
        Pending {
            member: member.clone(),
            id: member.health().sent(sent),
            connection,
            sent,
            done: false,
        }
    }

    /// Ended with an answer from the server (`answered`, which `failed`
    /// tells as "unavailable"), or with a transport error: tonic's
    /// connection recovers (or reconnects) by itself.
    fn finish(mut self, answered: bool, failed: bool) {
        self.done = true;
        let now = Instant::now();
        if answered {
            self.member.answered(self.connection, now);
        }
        self.member.health().ended(self.id, now, true, failed);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done
            && self
                .member
                .health()
                .ended(self.id, Instant::now(), false, false)
        {
            self.member.given_up(self.connection, self.sent);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::transport::Endpoint;

    use super::{Member, Pending, Routing};

    fn member() -> Member {
        let routing = Routing {
            slow: Duration::from_millis(300),
            cooldown: Duration::from_secs(10),
        };
        Member::new(&Endpoint::from_static("http://127.0.0.1:1"), routing)
    }

    /// The connection broke under a request (the member is failing for
    /// the cooldown), and its replacement hangs in its handshake: giving
    /// up on it must replace it even so, or every retry queues behind it
    /// until the cooldown ends.
    #[tokio::test(start_paused = true)]
    async fn a_request_given_up_replaces_its_connection_while_the_member_is_failing() {
        let member = member();
        let (first, _) = member.channel();
        Pending::start(&member, first).finish(false, true);
        // A request and its hedged copy, stuck on the same connection.
        let stuck = [
            Pending::start(&member, first),
            Pending::start(&member, first),
        ];
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(stuck);
        let (second, _) = member.channel();
        assert_eq!(second, first + 1, "replaced once, not once per copy");
        // A hedge's losing copy dropped early is no sign of a stuck
        // connection.
        drop(Pending::start(&member, second));
        assert_eq!(member.channel().0, second);
    }

    /// A connection that answers other requests is slow, not stuck:
    /// giving up on a request there keeps it.
    #[tokio::test(start_paused = true)]
    async fn a_request_given_up_keeps_a_connection_that_answers_others() {
        let member = member();
        let (first, _) = member.channel();
        let slow = Pending::start(&member, first);
        tokio::time::advance(Duration::from_millis(500)).await;
        Pending::start(&member, first).finish(true, false);
        tokio::time::advance(Duration::from_millis(500)).await;
        drop(slow);
        assert_eq!(member.channel().0, first, "kept");
        // An answer from before the request was sent says nothing of it.
        let stuck = Pending::start(&member, first);
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(stuck);
        assert_eq!(member.channel().0, first + 1, "replaced");
    }
}
