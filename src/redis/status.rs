//! Who holds which lock and who waits for it (for `fairlock status` and
//! the progress of a waiting `fairlock lock`).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::api::status::{LineEntry, locker_of};
use crate::redis::connect::node::Node;
use crate::redis::connect::node::{Admission, Call, Reach};
use crate::redis::connect::node_error::NodeError;
use crate::redis::protocol::keys::{Layout as Naming, LockKeys as Layout};
use crate::redis::protocol::line::{LineKeys, parse_entry};
use crate::redis::protocol::line_lua::STATUS_SCRIPT as LINE_STATUS_SCRIPT;
use crate::redis::protocol::lock_lua::STATUS_SCRIPT;
use crate::redis::redis_locker::RedisLocker;
use crate::{Elector, Key, LockHolder, LockStatus, LockWaiter, NodeCount, Owner, Result};

/// What one node says about one lock.
struct NodeView {
    /// The lock key's value, when it is a string.
    value: Option<String>,
    pttl: i64,
    /// Keys on this node holding data fairlock did not write.
    foreign: Vec<String>,
    waiters: Vec<(String, String)>,
}

impl RedisLocker {
    /// The locks under this locker's prefix (or just `key`), with holders,
    /// the time left on their TTL, and queues. Locks with neither holder
    /// nor waiters do not exist in Redis and are not listed. On Redlock the
    /// holder is the one holding the key on the most nodes, and the queue
    /// the longest among the nodes.
    ///
    /// A read/write lock or semaphore lists every holder (readers, permits
    /// held) in [`crate::LockStatus::holders`] and its waiters with their
    /// modes, as on etcd.
    ///
    /// Keys fairlock did not write are listed in
    /// [`crate::LockStatus::foreign`]: a lock key of another type or whose
    /// value does not parse (such a string is shown as the holder, with
    /// fencing token 0), a queue that is not a sorted set, queue members
    /// whose waiter record fairlock did not write (their record keys), a
    /// fencing counter that cannot count. Remove them with `redis-cli DEL`
    /// if nothing of yours uses them.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn demo(locker: fairlock::redis::RedisLocker) -> fairlock::Result<()> {
    /// for lock in locker.status(None).await? {
    ///     let holder = lock.holder.map_or("free".into(), |h| h.owner.describe());
    ///     println!("{}: {holder}, {} waiting", lock.key, lock.waiters.len());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::InvalidKey`] for a bad key; backend errors, or
    /// [`crate::Error::Unavailable`] when too few Redlock nodes answer.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn status(&self, key: Option<&Key>) -> Result<Vec<LockStatus>> {
        let prefix = self.config().prefix().to_owned();
        let names: BTreeSet<String> = match key {
            Some(key) => {
                key.validate()?;
                self.inner().nodes.layout.check(key)?;
                BTreeSet::from([key.to_string()])
            }
            None => self.scan(&prefix).await?,
        };
        let mut locks = Vec::new();
        for name in names {
            let status = self.status_of(&prefix, &name).await?;
            if status.holder.is_some() || !status.waiters.is_empty() || !status.foreign.is_empty() {
                locks.push(status);
            }
        }
        Ok(locks)
    }

    /// The lock names that have keys under `prefix`, on any node (on a
    /// cluster, on each of its masters; keys whose names are not UTF-8 are
    /// passed over).
    async fn scan(&self, prefix: &str) -> Result<BTreeSet<String>> {
        let nodes = &self.inner().nodes;
        let mut names = BTreeSet::new();
        let mut errors = Vec::new();
        for node in &nodes.list {
            let scanned = match masters(node).await {
                Ok(masters) => scan_masters(node, nodes.layout, prefix, &masters, &mut names).await,
                Err(e) => Err(e),
            };
            if let Err(e) = scanned {
                errors.push(e);
            }
        }
        if nodes.list.len() - errors.len() < nodes.quorum {
            return Err(nodes.unavailable("status", errors));
        }
        Ok(names)
    }

    async fn status_of(&self, prefix: &str, name: &str) -> Result<LockStatus> {
        let nodes = &self.inner().nodes;
        let layout = Layout::new(nodes.layout, prefix, &Key::from(name));
        let keys = [
            layout.lock.as_str(),
            layout.queue.as_str(),
            layout.fence.as_str(),
        ];
        let results = nodes
            .all::<Vec<redis::Value>, _>(|_, _| Call {
                script: &STATUS_SCRIPT,
                keys: &keys,
                args: vec![layout.waiters.clone()],
                reach: Reach::Master,
                admission: Admission::InTurn,
            })
            .await;
        let mut views = Vec::new();
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok(values) => views.push(parse_view(&layout, &values)),
                Err(e) => errors.push(e),
            }
        }
        if views.len() < nodes.quorum {
            return Err(nodes.unavailable("status", errors));
        }
        let mut lock = merge(name, &layout, &views, nodes.list.len());
        if lock.holder.is_none() && lock.waiters.is_empty() && !nodes.is_redlock() {
            self.line_status(&mut lock, layout.clone()).await?;
        }
        // An election's leader (no elections on Redlock).
        let key = Key::from(name);
        if lock.holder.is_some() && !nodes.is_redlock() && key.validate().is_ok() {
            lock.leader = self.elector().leader(&key).await?;
        }
        Ok(lock)
    }
}

impl RedisLocker {
    /// Fills `lock` with its line's holders and waiters, if the key is a
    /// read/write lock or semaphore.
    async fn line_status(&self, lock: &mut LockStatus, keys: Layout) -> Result<()> {
        let keys = LineKeys::new(keys);
        let node = &self.inner().nodes.list[0];
        let values: Vec<Vec<u8>> = node
            .run(Call {
                script: &LINE_STATUS_SCRIPT,
                keys: &keys.script_keys(),
                args: vec![keys.entries.clone()],
                reach: Reach::Master,
                admission: Admission::InTurn,
            })
            .await
            .map_err(|e| self.inner().nodes.unavailable("status", vec![e]))?;
        lock.fill_line(values.chunks(2).filter_map(|pair| {
            let [_, record] = pair else { return None };
            let record = String::from_utf8_lossy(record);
            let (share, token, owner) = parse_entry(&record)?;
            let owner = Owner::parse(owner);
            let locker = locker_of(&owner);
            let (held, lease) = ((token > 0).then_some(token), None);
            Some(LineEntry {
                share,
                owner,
                locker,
                held,
                lease,
            })
        }));
        Ok(())
    }
}

/// The addresses of a cluster's masters (from `CLUSTER NODES`), or `[None]`
/// for a node that is one master.
async fn masters(node: &Node) -> Result<Vec<Option<(String, u16)>>, NodeError> {
    if !node.is_cluster() {
        return Ok(vec![None]);
    }
    let text: String = node
        .query(&redis::cmd("CLUSTER").arg("NODES").to_owned(), None)
        .await?;
    Ok(cluster_masters(&text).into_iter().map(Some).collect())
}

/// The masters that serve slots in a `CLUSTER NODES` answer: lines
/// `<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch>
/// <link> <slot>...`.
fn cluster_masters(text: &str) -> Vec<(String, u16)> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            let is_master = flags.split(',').any(|f| f == "master")
                && !flags.split(',').any(|f| f == "fail" || f == "noaddr");
            if !is_master || fields.len() < 9 {
                return None;
            }
            let addr = fields.get(1)?.split(['@', ',']).next()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

/// Adds to `names` the lock names that have keys under `prefix` on each of
/// `masters` of `node`.
async fn scan_masters(
    node: &Node,
    naming: Naming,
    prefix: &str,
    masters: &[Option<(String, u16)>],
    names: &mut BTreeSet<String>,
) -> Result<(), NodeError> {
    let pattern = format!("{}*", glob_escape(prefix));
    for master in masters {
        let at = master.as_ref().map(|(host, port)| (host.as_str(), *port));
        let mut cursor = "0".to_string();
        loop {
            let cmd = redis::cmd("SCAN")
                .arg(&cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .to_owned();
            let (next, keys) = node.query::<(String, Vec<Vec<u8>>)>(&cmd, at).await?;
            // A name that is not UTF-8 is no fairlock key (keys are
            // strings): passed over.
            for k in keys.into_iter().filter_map(|k| String::from_utf8(k).ok()) {
                if let Some(name) = k.strip_prefix(prefix).and_then(|n| naming.lock_name(n)) {
                    names.insert(name);
                }
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
    }
    Ok(())
}

/// Reads the status script's answer (see `lock_lua.rs`).
fn parse_view(layout: &Layout, values: &[redis::Value]) -> NodeView {
    let text = |v: Option<&redis::Value>| -> String {
        v.and_then(|v| redis::from_redis_value_ref::<Vec<u8>>(v).ok())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    };
    let pttl = values
        .get(1)
        .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
        .unwrap_or(-2);
    // "" (no key), "string", or "other" (another type); "" or "other".
    let (lock, queue, fence) = (
        text(values.get(2)),
        text(values.get(3)),
        text(values.get(4)),
    );
    let mut foreign = Vec::new();
    for (state, key) in [
        (lock.as_str(), &layout.lock),
        (&queue, &layout.queue),
        (&fence, &layout.fence),
    ] {
        if state == "other" {
            foreign.push(key.clone());
        }
    }
    let mut waiters = Vec::new();
    for entry in values.get(5..).unwrap_or_default().chunks(3) {
        let (tag, id, record) = (text(entry.first()), text(entry.get(1)), text(entry.get(2)));
        if tag == "w" {
            waiters.push((id, record));
        } else {
            foreign.push(format!("{}{id}", layout.waiters));
        }
    }
    NodeView {
        value: (lock == "string").then(|| text(values.first())),
        pttl,
        foreign,
        waiters,
    }
}

/// One lock from the views of the nodes that answered, out of `total`.
fn merge(name: &str, layout: &Layout, views: &[NodeView], total: usize) -> LockStatus {
    let mut counts: HashMap<&str, (usize, i64)> = HashMap::new();
    for v in views {
        if let Some(value) = &v.value {
            let entry = counts.entry(value.as_str()).or_insert((0, i64::MAX));
            entry.0 += 1;
            entry.1 = entry.1.min(v.pttl);
        }
    }
    let mut foreign: BTreeSet<String> = views.iter().flat_map(|v| v.foreign.clone()).collect();
    let holder = counts
        .into_iter()
        .max_by_key(|(value, (n, _))| (*n, *value))
        .map(|(value, (nodes, pttl))| {
            // "<token> <owner>"; anything else is someone else's lock.
            let parsed = value
                .split_once(' ')
                .and_then(|(token, owner)| Some((token.parse().ok()?, owner)));
            let (token, owner) = parsed.unwrap_or_else(|| {
                foreign.insert(layout.lock.clone());
                (0, value)
            });
            let mut holder = LockHolder::new(Owner::parse(owner), token);
            holder.ttl_left = u64::try_from(pttl).ok().map(Duration::from_millis);
            holder.nodes = Some(NodeCount::new(nodes, total));
            holder
        });
    let waiters = views
        .iter()
        .max_by_key(|v| v.waiters.len())
        .map(|v| {
            v.waiters
                .iter()
                .filter_map(|(id, record)| {
                    // "<hub> <f|u> <ttl> <owner>"
                    let mut parts = record.splitn(4, ' ');
                    let (_hub, _mode, _ttl) = (parts.next()?, parts.next()?, parts.next()?);
                    let owner = Owner::parse(parts.next()?);
                    Some(LockWaiter::new(
                        owner.clone(),
                        locker_of(&owner),
                        id.starts_with('f'),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut lock = LockStatus::new(name);
    lock.holder = holder;
    lock.waiters = waiters;
    lock.foreign = foreign.into_iter().collect();
    lock
}

/// `s` with glob characters escaped, for `SCAN MATCH`.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(value: &str, pttl: i64, waiters: &[(&str, &str)]) -> NodeView {
        NodeView {
            value: (!value.is_empty()).then(|| value.into()),
            pttl,
            foreign: Vec::new(),
            waiters: waiters
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn reads_cluster_masters() {
        let text = "a1 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460\n\
                    b2 10.0.0.2:7001@17001,host-b master - 0 0 2 connected 5461-10922\n\
                    c3 10.0.0.3:7002@17002 slave a1 0 0 1 connected\n\
                    d4 10.0.0.4:7003@17003 master,fail - 0 0 3 disconnected 10923-16383\n\
                    e5 10.0.0.5:7004@17004 master - 0 0 4 connected\n";
        assert_eq!(
            cluster_masters(text),
            [("10.0.0.1".to_owned(), 7000), ("10.0.0.2".to_owned(), 7001)]
        );
    }

    #[test]
    fn merges_node_views() {
        let owner = "fx pid=1 host=h at=1000 locker=L1";
        let views = [
            view(
                &format!("7 {owner}"),
                900,
                &[("fy", "hub f 10000 fy pid=2 host=h locker=L2")],
            ),
            view(&format!("7 {owner}"), 800, &[]),
            view("", -2, &[]),
        ];
        let layout = Layout::new(Naming::Flat, "p:", &Key::from("a"));
        let lock = merge("a", &layout, &views, 3);
        let holder = lock.holder.expect("holder");
        assert_eq!(holder.fencing_token, 7);
        assert_eq!(holder.nodes, Some(NodeCount::new(2, 3)));
        assert_eq!(holder.lease, None);
        assert_eq!(holder.ttl_left, Some(Duration::from_millis(800)));
        assert_eq!(holder.owner.describe(), "h:1");
        assert_eq!(lock.waiters.len(), 1);
        assert_eq!(lock.waiters[0].locker, "L2");
        assert!(lock.waiters[0].fair);
        assert!(lock.foreign.is_empty());
    }

    #[test]
    fn a_lock_value_that_does_not_parse_is_a_foreign_holder() {
        let layout = Layout::new(Naming::Flat, "p:", &Key::from("a"));
        let mut odd = view("not a lock", -1, &[]);
        odd.foreign.push(layout.queue.clone());
        let lock = merge("a", &layout, &[odd], 1);
        let holder = lock.holder.expect("holder");
        assert_eq!(holder.fencing_token, 0);
        assert_eq!(holder.ttl_left, None, "no TTL: it never expires");
        assert_eq!(holder.owner.raw, "not a lock");
        assert_eq!(lock.foreign, [layout.lock.clone(), layout.queue.clone()]);
    }

    #[test]
    fn escapes_glob_characters() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
