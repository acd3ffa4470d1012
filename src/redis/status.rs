//! Who holds which lock and who waits for it (for `fairlock status` and
//! the progress of a waiting `fairlock lock`).

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use super::locker::RedisLocker;
use super::node::Call;
use super::scripts::STATUS_SCRIPT;
use super::wire::LockKeys as Layout;
use crate::{Key, LockHolder, LockStatus, LockWaiter, NodeCount, Owner, RESERVED_SEGMENT, Result};

/// What one node says about one lock.
struct NodeView {
    value: String,
    pttl: i64,
    waiters: Vec<(String, String)>,
}

impl RedisLocker {
    /// The locks under this locker's prefix (or just `key`), with holders,
    /// the time left on their TTL, and queues. Locks with neither holder
    /// nor waiters do not exist in Redis and are not listed. On Redlock the
    /// holder is the one holding the key on the most nodes, and the queue
    /// the longest among the nodes.
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
                BTreeSet::from([key.to_string()])
            }
            None => self.scan(&prefix).await?,
        };
        let mut locks = Vec::new();
        for name in names {
            let status = self.status_of(&prefix, &name).await?;
            if status.holder.is_some() || !status.waiters.is_empty() {
                locks.push(status);
            }
        }
        Ok(locks)
    }

    /// The lock names that have keys under `prefix`, on any node.
    async fn scan(&self, prefix: &str) -> Result<BTreeSet<String>> {
        let nodes = &self.inner().nodes;
        let pattern = format!("{}*", glob_escape(prefix));
        let internal = format!("{RESERVED_SEGMENT}/");
        let marker = format!("/{RESERVED_SEGMENT}/");
        let mut names = BTreeSet::new();
        let mut errors = Vec::new();
        for node in &nodes.list {
            let mut cursor = "0".to_string();
            loop {
                let cmd = redis::cmd("SCAN")
                    .arg(&cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .to_owned();
                match node.query::<(String, Vec<String>)>(&cmd).await {
                    Ok((next, keys)) => {
                        for k in keys {
                            let Some(name) = k.strip_prefix(prefix) else {
                                continue;
                            };
                            if name.starts_with(&internal) {
                                continue;
                            }
                            let name = name.split_once(&marker).map_or(name, |(lock, _)| lock);
                            names.insert(name.to_owned());
                        }
                        if next == "0" {
                            break;
                        }
                        cursor = next;
                    }
                    Err(e) => {
                        errors.push(e);
                        break;
                    }
                }
            }
        }
        if nodes.list.len() - errors.len() < nodes.quorum {
            return Err(nodes.unavailable("status", errors));
        }
        Ok(names)
    }

    async fn status_of(&self, prefix: &str, name: &str) -> Result<LockStatus> {
        let nodes = &self.inner().nodes;
        let layout = Layout::new(prefix, &Key::from(name));
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
            })
            .await;
        let mut views = Vec::new();
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok(values) => views.push(parse_view(values)),
                Err(e) => errors.push(e),
            }
        }
        if views.len() < nodes.quorum {
            return Err(nodes.unavailable("status", errors));
        }
        Ok(merge(name, &views, nodes.list.len()))
    }
}

fn parse_view(values: Vec<redis::Value>) -> NodeView {
    let text = |v: &redis::Value| -> String {
        redis::from_redis_value_ref::<String>(v).unwrap_or_default()
    };
    let mut it = values.iter();
    let value = it.next().map(text).unwrap_or_default();
    let pttl = it
        .next()
        .and_then(|v| redis::from_redis_value_ref::<i64>(v).ok())
        .unwrap_or(-2);
    let mut waiters = Vec::new();
    while let (Some(id), Some(record)) = (it.next(), it.next()) {
        waiters.push((text(id), text(record)));
    }
    NodeView {
        value,
        pttl,
        waiters,
    }
}

/// One lock from the views of the nodes that answered, out of `total`.
fn merge(name: &str, views: &[NodeView], total: usize) -> LockStatus {
    let mut counts: HashMap<&str, (usize, i64)> = HashMap::new();
    for v in views.iter().filter(|v| !v.value.is_empty()) {
        let entry = counts.entry(v.value.as_str()).or_insert((0, i64::MAX));
        entry.0 += 1;
        entry.1 = entry.1.min(v.pttl);
    }
    let holder = counts
        .into_iter()
        .max_by_key(|(value, (n, _))| (*n, *value))
        .and_then(|(value, (nodes, pttl))| {
            let (token, owner) = value.split_once(' ')?;
            let mut holder =
                LockHolder::new(Owner::parse(owner), token.parse().unwrap_or_default());
            holder.ttl_left = u64::try_from(pttl).ok().map(Duration::from_millis);
            holder.nodes = Some(NodeCount::new(nodes, total));
            Some(holder)
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
                    let locker = owner.field("locker").unwrap_or_default().to_owned();
                    Some(LockWaiter::new(owner, locker, id.starts_with('f')))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut lock = LockStatus::new(name);
    lock.holder = holder;
    lock.waiters = waiters;
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
            value: value.into(),
            pttl,
            waiters: waiters
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect(),
        }
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
        let lock = merge("a", &views, 3);
        let holder = lock.holder.expect("holder");
        assert_eq!(holder.fencing_token, 7);
        assert_eq!(holder.nodes, Some(NodeCount::new(2, 3)));
        assert_eq!(holder.lease, None);
        assert_eq!(holder.ttl_left, Some(Duration::from_millis(800)));
        assert_eq!(holder.owner.describe(), "h:1");
        assert_eq!(lock.waiters.len(), 1);
        assert_eq!(lock.waiters[0].locker, "L2");
        assert!(lock.waiters[0].fair);
    }

    #[test]
    fn escapes_glob_characters() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
