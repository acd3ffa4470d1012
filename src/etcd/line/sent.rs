//! The join txn on its way: left again if its caller gives up before the
//! answer and etcd applied it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Poll, ready};

use etcd_client::Txn;

use super::depart::{Leaving, depart};
use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::request::Answer;
use crate::etcd::protocol::line::LineKeys;
use crate::etcd::protocol::line_txn::queued_at;
use crate::etcd::session::handout::{Lease, LeaseEnd};
use crate::etcd::session::state::LockerState;
use crate::semantics::admission::Share;

/// The join txn on its way. Polled in the caller's task; if the caller
/// drops it before the answer (a deadline, a cancel, an aborted task), the
/// rest goes on in a task of its own, which leaves the line again if the
/// join was applied: a join etcd applied is never left behind.
pub(crate) struct Sent {
    rest: Option<Pin<Box<dyn Future<Output = EtcdResult<Answer>> + Send>>>,
    joining: Option<Joining>,
}

/// Whose join a [`Sent`] carries: what it leaves if abandoned.
struct Joining {
    state: Arc<LockerState>,
    keys: LineKeys,
    share: Share,
    entry: Vec<u8>,
    lease: i64,
}

impl Sent {
    pub(crate) fn new(
        state: &Arc<LockerState>,
        (keys, share, entry): (&LineKeys, Share, &[u8]),
        lease: &Arc<Lease>,
        txn: Txn,
    ) -> Self {
        let sending = Arc::clone(state);
        Sent {
            rest: Some(Box::pin(async move { sending.txn("join", txn).await })),
            joining: Some(Joining {
                state: Arc::clone(state),
                keys: keys.clone(),
                share,
                entry: entry.to_vec(),
                lease: lease.id,
            }),
        }
    }
}

impl Future for Sent {
    type Output = EtcdResult<Answer>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(rest) = this.rest.as_mut() else {
            return Poll::Pending;
        };
        let answer = ready!(rest.as_mut().poll(cx));
        this.rest = None;
        Poll::Ready(answer)
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        let (Some(rest), Some(joining)) = (self.rest.take(), self.joining.take()) else {
            return;
        };
        let Joining {
            state,
            keys,
            share,
            entry,
            lease,
        } = joining;
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return; // the entry expires with the lease
        };
        rt.spawn(async move {
            let resp = match rest.await {
                Ok(resp) => resp,
                // It may still land: stop renewing the lease, so that the
                // entry expires within the TTL.
                Err(e) if e.is_transient() => {
                    state.session.forget(lease, LeaseEnd::Distrusted).await;
                    return;
                }
                Err(_) => return,
            };
            if resp.succeeded() {
                let leaving = Leaving {
                    keys: &keys,
                    share,
                    entry: &entry,
                    created: resp.revision,
                };
                let _ = depart(&state, &leaving, queued_at(&entry, resp.revision)).await;
            }
        });
    }
}
