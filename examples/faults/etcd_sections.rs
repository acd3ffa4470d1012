//! The etcd workers' [`Resource`] for the shared and election workloads
//! (`sections.rs`): the data key written by `fenced_txn` (or, with
//! `--unfenced`, by a plain txn), and after a loss the same write under
//! etcd's compare of the guard's key alone, then the lease's state.

use etcd_client::{Txn, TxnOp};
use fairlock::etcd::{EtcdLocker, FencedTxn};
use fairlock::{Error, LockGuard};

use crate::events::{Ev, Kind};
use crate::sections::{Cycle, Resource, value};
use crate::support::chain;
use crate::worker::{Args, lease_state};
use crate::workload::Section;

pub struct EtcdResource<'a> {
    pub a: &'a Args,
    pub locker: &'a EtcdLocker,
}

impl EtcdResource<'_> {
    pub fn cycle(&self) -> Cycle {
        Cycle {
            id: self.a.id,
            hold: self.a.hold,
            workload: self.a.workload,
        }
    }

    fn put(&self, value: String) -> TxnOp {
        TxnOp::put(self.a.counter.as_str(), value, None)
    }
}

impl Resource for EtcdResource<'_> {
    async fn acq_fields(&self) -> String {
        let lease = self.locker.session_lease().await.unwrap_or(0);
        format!("lease={lease:x}")
    }

    async fn write(&self, guard: &LockGuard, _: Section, value: String) -> String {
        let result = if self.a.unfenced {
            let mut kv = self.locker.client().kv_client();
            match tokio::time::timeout(
                self.a.request_timeout,
                kv.txn(Txn::new().and_then([self.put(value)])),
            )
            .await
            {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no answer".into()),
            }
        } else {
            match guard
                .fenced_txn(Txn::new().and_then([self.put(value)]))
                .await
            {
                Ok(_) => Ok(()),
                Err(Error::LockLost { .. }) => return "lost".into(),
                Err(e) => Err(chain(&e)),
            }
        };
        match result {
            Ok(()) => "ok".into(),
            Err(e) => format!("err {e}"),
        }
    }

    async fn after_loss(&self, guard: &LockGuard, kind: Section, id: u64, seq: &mut u64) -> String {
        if self.a.unfenced {
            return String::new();
        }
        // The library may refuse locally (past the deadline): send the
        // same write under nothing but etcd's compare of the guard's key.
        let token = guard.fencing_token();
        *seq += 1;
        Ev::new(Kind::ProbeStart, token, *seq, kind.name()).emit();
        let outcome = match guard.fence() {
            Ok(fence) => {
                let probe = Txn::new()
                    .when([fence])
                    .and_then([self.put(value(kind, token, id, *seq))]);
                let mut kv = self.locker.client().kv_client();
                match tokio::time::timeout(self.a.request_timeout, kv.txn(probe)).await {
                    Ok(Ok(resp)) if resp.succeeded() => "ok".to_string(),
                    Ok(Ok(_)) => "rejected".to_string(),
                    Ok(Err(e)) => format!("err {e}"),
                    Err(_) => "err no answer".to_string(),
                }
            }
            Err(e) => format!("err {}", chain(&e)),
        };
        Ev::new(Kind::Probe, token, *seq, outcome).emit();
        let lease = self.locker.session_lease().await.unwrap_or(0);
        lease_state(self.a, self.locker, lease).await.to_string()
    }
}
