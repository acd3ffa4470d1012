//! What stands in the way of reviving a session lease that lapsed only
//! here (see [`Session::revive`](super::handout::Session::revive)): the
//! lock keys its holdings may have left in etcd, and leases that may carry
//! keys nobody accounts for.
//!
//! A lease lapses here when no renewal counted for a TTL, for instance
//! while the cluster had no leader; etcd may still have it (a new leader
//! extends every lease when it takes over). Every holding on it was
//! reported lost at that moment, but its lock key stays in etcd as long as
//! the lease lives: before the lease is renewed again, those keys are
//! deleted, as etcd would have deleted them had the lease expired.

use std::collections::{HashMap, HashSet};

use etcd_client::Client;

use crate::etcd::client::error::EtcdResult;
use crate::etcd::client::request::{hedged, request};
use crate::etcd::protocol::abandon::clear_holding;

/// A lock held on a session lease: its keys, until it is released cleanly.
#[derive(Clone, Debug)]
pub(crate) struct Holding {
    pub lease: i64,
    pub lock: Vec<u8>,
    /// The lock key's mod revision when granted.
    pub token: i64,
    /// A fair holder's queue key and its create revision.
    pub queue: Option<(Vec<u8>, i64)>,
}

/// The holdings not yet released cleanly, and the leases that must never
/// be revived.
#[derive(Default)]
pub(crate) struct Leftovers {
    next: u64,
    holdings: HashMap<u64, Holding>,
    /// Leases that may carry keys nobody accounts for: a write bound to it
    /// got no answer, or an abandoned attempt could not remove its keys.
    refused: HashSet<i64>,
}

impl Leftovers {
    /// Records a new holding; the number names it for [`Leftovers::released`].
    pub fn hold(&mut self, holding: Holding) -> u64 {
        self.next += 1;
        self.holdings.insert(self.next, holding);
        self.next
    }

    /// The holding `id` left nothing in etcd.
    pub fn released(&mut self, id: u64) {
        self.holdings.remove(&id);
    }

    /// Lease `lease` must never be revived.
    pub fn refuse(&mut self, lease: i64) {
        self.refused.insert(lease);
    }

    pub fn is_refused(&self, lease: i64) -> bool {
        self.refused.contains(&lease)
    }

    /// The holdings on `lease` not released cleanly.
    pub fn holdings_on(&self, lease: i64) -> Vec<(u64, Holding)> {
        self.holdings
            .iter()
            .filter(|(_, h)| h.lease == lease)
            .map(|(id, h)| (*id, h.clone()))
            .collect()
    }

    /// Forgets everything about leases other than `current`: only the
    /// current lease is ever revived.
    pub fn keep_only(&mut self, current: i64) {
        self.holdings.retain(|_, h| h.lease == current);
        self.refused.retain(|&l| l == current);
    }
}

/// Deletes what `holding` left: its lock key, if still the one it was
/// granted (mod revision = token), and its queue key, if still its own.
pub(crate) async fn clear(
    client: &Client,
    timeout: std::time::Duration,
    holding: &Holding,
) -> EtcdResult<()> {
    // Its compares make a second or late copy harmless: sent hedged.
    let txn = clear_holding(&holding.lock, holding.token, holding.queue.as_ref()).into_txn();
    hedged(timeout / 3, || {
        let (mut kv, txn) = (client.kv_client(), txn.clone());
        async move { request("clear a lost holding", timeout, kv.txn(txn)).await }
    })
    .await?;
    Ok(())
}
