//! Who holds each name and who waits in etcd's layout, whoever they are
//! (fairlock, `etcdctl lock`, a Go client): the contenders under `N/` in
//! create order, read at one revision; the first holds.

use std::collections::BTreeMap;

use etcd_client::KeyValue;

use crate::etcd::client::error::EtcdResult;
use crate::etcd::protocol::etcd_layout::{self, NameKeys};
use crate::etcd::protocol::keys::prefix_end;
use crate::etcd::session::state::LockerState;
use crate::{Key, LeaseId, LockHolder, LockStatus, LockWaiter, Owner};

/// The names under the locker's prefix that have contenders (or just
/// `key`), holders and waiters in create order. A key under a name that
/// is not named after a lease is listed as foreign.
pub(crate) async fn read(state: &LockerState, key: Option<&Key>) -> EtcdResult<Vec<LockStatus>> {
    let prefix = state.config.prefix().to_owned();
    let (from, only) = match key {
        Some(key) => (NameKeys::new(&prefix, key.as_str()).dir, Some(key.as_str())),
        None => (prefix.clone().into_bytes(), None),
    };
    let opts = etcd_layout::all(prefix_end(&from));
    let resp = state.get("status", from, opts).await?;
    let mut names: BTreeMap<String, LockStatus> = BTreeMap::new();
    for kv in resp.kvs() {
        let full = String::from_utf8_lossy(kv.key());
        let Some(rest) = full.strip_prefix(&prefix) else {
            continue;
        };
        // `<name>/<lease hex>`; with a key asked for, every key under it
        // belongs to that name (nested names wait for it too).
        let (name, contender) = match (only, rest.rsplit_once('/')) {
            (Some(name), _) => (name, lease_named(&prefix, name, kv)),
            (None, Some((name, _))) => (name, lease_named(&prefix, name, kv)),
            (None, None) => continue,
        };
        let status = names
            .entry(name.to_owned())
            .or_insert_with(|| LockStatus::new(name));
        let Some(lease) = contender else {
            status.foreign.push(full.into_owned());
            continue;
        };
        let owner = match kv.value() {
            [] => Owner::parse(&format!("lease={}", LeaseId(lease))),
            value => Owner::parse(&String::from_utf8_lossy(value)),
        };
        if status.holder.is_none() {
            let token = u64::try_from(kv.create_revision()).unwrap_or_default();
            let mut holder = LockHolder::new(owner, token);
            holder.lease = Some(LeaseId(lease));
            status.holder = Some(holder);
        } else {
            status
                .waiters
                .push(LockWaiter::new(owner, LeaseId(lease).to_string(), true));
        }
    }
    Ok(names.into_values().collect())
}

/// The lease `kv` is named after, if it is a contender of `name`: its key
/// is `<name>/<the lease's hex>` and it is bound to that lease.
fn lease_named(prefix: &str, name: &str, kv: &KeyValue) -> Option<i64> {
    let lease = NameKeys::new(prefix, name).lease_of(kv.key())?;
    (kv.lease() == lease).then_some(lease)
}
