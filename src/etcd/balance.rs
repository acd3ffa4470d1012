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
//! member's connection: a connect that never ends (a TLS handshake with a
//! load balancer whose backend is gone has no timeout) would otherwise
//! hold every later request to it. With every member
//! failing, the least loaded is used: requests never wait for a member to
//! recover. Ties go round the members in turn.
//!
//! The choice is made in the caller's task, and each member's connection
//! is tonic's own (`Endpoint::connect_lazy`: it reconnects by itself), so a
//! request takes no more task hops than through etcd-client's balancer.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, TryLockError};
use std::task::{Context, Poll};
use std::time::Duration;

use etcd_client::{BalancedChannelBuilder, Channel};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::Endpoint;
use tonic::transport::channel::Change;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceExt};

type Request = http::Request<tonic::body::Body>;
type Response = http::Response<tonic::body::Body>;
type Endpoints = mpsc::Receiver<Change<http::Uri, Endpoint>>;

/// How many endpoint changes can wait before a request applies them.
const ENDPOINT_ROOM: usize = 4096;

/// The longest a failing member is passed over, in multiples of `cooldown`.
const MAX_BACKOFF: u32 = 32;

/// The gRPC status code of an "unavailable" answer (etcd: no leader, or
/// the member is stopping).
const UNAVAILABLE: &[u8] = b"14";

/// How the balancer judges members (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Routing {
    /// A request unanswered for this long marks its member failing.
    pub slow: Duration,
    /// How long a member that just failed is passed over.
    pub cooldown: Duration,
}

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
            .min_by(|a, b| {
                let (a, b) = (a.health().weight(now), b.health().weight(now));
                a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
            })
            .cloned()
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
        Box::pin(async move {
            let Some(member) = member else {
                return Err("no etcd endpoint to send the request to".into());
            };
            let pending = Pending::start(&member);
            let result = match member.channel().ready().await {
                Ok(channel) => channel.call(request).await,
                Err(e) => Err(e),
            };
            let failed = match &result {
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .is_some_and(|code| code.as_bytes() == UNAVAILABLE),
                Err(_) => true,
            };
            pending.finish(failed);
            result.map_err(Into::into)
        })
    }
}

/// One member's connection and how it has been answering.
#[derive(Clone)]
struct Member(Arc<Link>);

struct Link {
    endpoint: Endpoint,
    channel: Mutex<tonic::transport::Channel>,
    health: Health,
}

impl Member {
    fn new(endpoint: &Endpoint, routing: Routing) -> Self {
        Member(Arc::new(Link {
            endpoint: endpoint.clone(),
            channel: Mutex::new(endpoint.connect_lazy()),
            health: Health::new(routing),
        }))
    }

    fn health(&self) -> &Health {
        &self.0.health
    }

    fn channel(&self) -> tonic::transport::Channel {
        self.0
            .channel
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the connection with a fresh one: a request given up on it
    /// may be stuck in a connect that never ends (a TLS handshake with a
    /// load balancer whose backend is gone has no timeout of its own).
    /// Requests still on the old one keep it until they end.
    fn reconnect(&self) {
        if tokio::runtime::Handle::try_current().is_ok() {
            let fresh = self.0.endpoint.connect_lazy();
            *self.0.channel.lock().unwrap_or_else(|p| p.into_inner()) = fresh;
        }
    }
}

/// A member's load: failing members come after all others, then by the
/// number of requests waiting for an answer.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub(crate) struct Weight {
    failing: bool,
    waiting: usize,
}

/// What a member's requests have shown.
struct Health {
    routing: Routing,
    state: Mutex<HealthState>,
}

#[derive(Default)]
struct HealthState {
    /// Requests waiting for an answer, by number: when each was sent.
    waiting: BTreeMap<u64, Instant>,
    next: u64,
    /// Failures since the last good answer.
    failures: u32,
    /// Passed over until then.
    failing_until: Option<Instant>,
}

impl Health {
    fn new(routing: Routing) -> Self {
        Health {
            routing,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn weight(&self, now: Instant) -> Weight {
        let state = self.state();
        // The oldest waiting request is the first in number order.
        let stuck = state
            .waiting
            .values()
            .next()
            .is_some_and(|sent| now.duration_since(*sent) >= self.routing.slow);
        Weight {
            failing: stuck || state.failing_until.is_some_and(|until| now < until),
            waiting: state.waiting.len(),
        }
    }

    fn sent(&self, now: Instant) -> u64 {
        let mut state = self.state();
        let id = state.next;
        state.next += 1;
        state.waiting.insert(id, now);
        id
    }

    /// Request `id` ended: answered (`failed` tells how), or given up
    /// (`answered` false). `true` if that starts a failure: the member was
    /// not failing already (requests failing together, as when a
    /// connection breaks under several, count once).
    fn ended(&self, id: u64, now: Instant, answered: bool, failed: bool) -> bool {
        let mut state = self.state();
        let Some(sent) = state.waiting.remove(&id) else {
            return false;
        };
        let failed = failed || (!answered && now.duration_since(sent) >= self.routing.slow);
        if failed {
            if state.failing_until.is_some_and(|until| now < until) {
                return false;
            }
            state.failures = state.failures.saturating_add(1);
            let doubled = 1u32 << state.failures.saturating_sub(1).min(5);
            let pause = self.routing.cooldown * doubled.min(MAX_BACKOFF);
            state.failing_until = Some(now + pause);
            return true;
        }
        if answered {
            state.failures = 0;
            state.failing_until = None;
        }
        false
    }
}

/// A request on its way: ends as given up if dropped before an answer.
struct Pending {
    member: Member,
    id: u64,
    done: bool,
}

impl Pending {
    fn start(member: &Member) -> Self {
        Pending {
            member: member.clone(),
            id: member.health().sent(Instant::now()),
            done: false,
        }
    }

    fn finish(mut self, failed: bool) {
        self.done = true;
        // A failed answer or transport error: tonic's connection recovers
        // (or reconnects) by itself.
        self.member
            .health()
            .ended(self.id, Instant::now(), true, failed);
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
            self.member.reconnect();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Health, Routing, Weight};

    fn health() -> Health {
        Health::new(Routing {
            slow: Duration::from_millis(300),
            cooldown: Duration::from_secs(1),
        })
    }

    fn ok(waiting: usize) -> Weight {
        Weight {
            failing: false,
            waiting,
        }
    }

    fn failing(waiting: usize) -> Weight {
        Weight {
            failing: true,
            waiting,
        }
    }

    #[test]
    fn a_member_with_a_request_waiting_too_long_is_failing() {
        let h = health();
        let t = Instant::now();
        let id = h.sent(t);
        assert_eq!(h.weight(t + Duration::from_millis(299)), ok(1));
        assert_eq!(h.weight(t + Duration::from_millis(300)), failing(1));
        // Given up after that long: failing for the cooldown.
        h.ended(id, t + Duration::from_millis(400), false, false);
        assert_eq!(h.weight(t + Duration::from_millis(1399)), failing(0));
        assert_eq!(h.weight(t + Duration::from_millis(1400)), ok(0));
        // Failing members always weigh more than healthy ones.
        assert!(failing(0) > ok(100));
    }

    #[test]
    fn a_request_dropped_early_or_answered_is_no_failure() {
        let h = health();
        let t = Instant::now();
        // A hedge's losing copy, dropped soon after it was sent.
        let id = h.sent(t);
        h.ended(id, t + Duration::from_millis(100), false, false);
        assert_eq!(h.weight(t + Duration::from_millis(100)), ok(0));
        let id = h.sent(t);
        h.ended(id, t + Duration::from_secs(5), true, false);
        assert_eq!(h.weight(t + Duration::from_secs(5)), ok(0));
    }

    #[test]
    fn failures_in_a_row_double_the_pause_and_an_answer_clears_it() {
        let h = health();
        let mut t = Instant::now();
        for pause_s in [1, 2, 4, 8, 16, 32, 32] {
            let id = h.sent(t);
            h.ended(id, t, true, true);
            let pause = Duration::from_secs(pause_s);
            assert_eq!(h.weight(t + pause - Duration::from_millis(1)), failing(0));
            assert_eq!(h.weight(t + pause), ok(0));
            t += pause;
        }
        let id = h.sent(t);
        h.ended(id, t, true, true);
        let id = h.sent(t);
        h.ended(id, t, true, false);
        assert_eq!(h.weight(t), ok(0));
    }

    #[test]
    fn requests_failing_together_count_as_one_failure() {
        // A connection breaking under several requests fails them all.
        let h = health();
        let t = Instant::now();
        let ids: Vec<u64> = (0..8).map(|_| h.sent(t)).collect();
        let starts: Vec<bool> = ids.iter().map(|&id| h.ended(id, t, true, true)).collect();
        assert_eq!(
            starts.iter().filter(|&&s| s).count(),
            1,
            "one failure starts"
        );
        // Passed over for the first pause only, not 2^7 of them.
        assert_eq!(h.weight(t + Duration::from_millis(999)), failing(0));
        assert_eq!(h.weight(t + Duration::from_secs(1)), ok(0));
    }
}
