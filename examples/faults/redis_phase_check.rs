//! The end of a Redis phase (`redis_faults.rs`): what is left under the
//! workers' prefix, the resource's record of the writes, and the
//! workload's checkers. The mutex's are `redis_check.rs`'s; the shared and
//! election workloads' are etcd's own (`shared_check.rs`,
//! `election_check.rs`) on the resource's lists of applied writes
//! (`redis_sections.rs`) instead of etcd's history, with [`applied`] in
//! place of etcd's `fenced_history`.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::check::{self, Input, Report, Violation};
use crate::election_check::{self, Finding};
use crate::events::{Kind, Log};
use crate::redis_deploy::Redis;
use crate::redis_fault::{self, Deployment};
use crate::redis_faults::Phase;
use crate::redis_sections::data_key;
use crate::shared_check::{self, Writes, parse_writes};
use crate::workload::{Section, Workload};
use crate::{BoxError, redis_check};

impl Phase<'_> {
    /// Waits (the recovery bound) for what a fault's cut-short sessions
    /// left to expire, reads the resource, runs the workload's checkers.
    pub async fn check(&mut self, redis: &Redis, finale: Vec<Finding>) -> Result<Report, BoxError> {
        let (prefix, fair) = (self.prefix.clone(), self.fair);
        let workload = self.o.workload;
        let deadline = Instant::now() + redis_fault::bound(self.o);
        let locks = loop {
            let locks = format!("{prefix}locks:");
            let mut keys = Vec::new();
            for k in redis.keys(&locks).await? {
                if !expected_left(redis, workload, &locks, &k).await {
                    keys.push(k);
                }
            }
            if keys.is_empty() || Instant::now() >= deadline {
                break keys;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let mut conn = redis::Client::open(redis.resource_url())?
            .get_multiplexed_async_connection()
            .await?;
        let counter_key = format!("{prefix}data:counter");
        let counter: Option<u64> = redis::cmd("GET")
            .arg(&counter_key)
            .query_async(&mut conn)
            .await?;
        // Each lock key's list of applied writes, one after another.
        let mut lists: Vec<(i64, String)> = Vec::new();
        for kind in [Section::Read, Section::Permit, Section::Leader] {
            let list: Vec<String> = redis::cmd("LRANGE")
                .arg(data_key(&counter_key, kind))
                .arg(0)
                .arg(-1)
                .query_async(&mut conn)
                .await?;
            lists.extend((0..).zip(list));
        }
        let inp = Input::without_history(fair, self.o, &self.shared, &mut self.injections, locks);
        let (mut v, mut notes) = (Vec::new(), Vec::new());
        let values = lists.iter().map(|(at, value)| (*at, value.as_str()));
        let data = Writes {
            source: "the resource's lists",
            list: parse_writes(values, &mut v),
        };
        match workload {
            Workload::Mutex => {
                check::harness(&inp, &mut v);
                redis_check::counter(&inp, counter.unwrap_or(0), &mut v, &mut notes);
                let intervals = check::intervals(&inp.log);
                redis_check::exclusion(&inp, &intervals, &mut v, &mut notes);
                redis_check::tokens(&inp, &mut v, &mut notes);
            }
            Workload::Shared => {
                shared_check::shared(&inp, &data, &mut v, &mut notes);
                applied(&inp.log, &data, &mut v, &mut notes);
            }
            Workload::Election => {
                election_check::election(&inp, &data, finale, &mut v, &mut notes);
                applied(&inp.log, &data, &mut v, &mut notes);
            }
        }
        Ok(check::report(&inp, v, notes))
    }
}

/// Checker 1 on the resource's lists: every write applied was one a
/// worker started and was told `ok` or got no answer for (never `lost`:
/// a refused write must not land), none applied twice, and every write a
/// worker was told `ok` is in them.
fn applied(log: &Log, data: &Writes<'_>, v: &mut Vec<Violation>, notes: &mut Vec<String>) {
    // (worker, seq) -> what the worker was told (None: no answer seen).
    let mut told: HashMap<(usize, u64), Option<&str>> = HashMap::new();
    for (&proc, p) in &log.procs {
        for e in &p.events {
            match e.kind {
                Kind::WriteStart => {
                    told.insert((proc, e.seq), None);
                }
                Kind::Write => {
                    told.insert((proc, e.seq), Some(e.detail.as_str()));
                }
                _ => {}
            }
        }
    }
    let mut seen = HashMap::new();
    let mut indeterminate = 0;
    for &(_, _, value) in &data.list {
        let f: Vec<&str> = value.split(' ').collect();
        let id = f.get(2).and_then(|w| w.parse::<usize>().ok());
        let seq = f.get(3).and_then(|s| s.parse::<u64>().ok());
        let (Some(proc), Some(seq)) = (id, seq) else {
            v.push(violation(format!(
                "applied write {value:?} names no worker and seq"
            )));
            continue;
        };
        if seen.insert((proc, seq), value).is_some() {
            v.push(violation(format!("write {value:?} was applied twice")));
        }
        match told.get(&(proc, seq)) {
            None => v.push(violation(format!(
                "applied write {value:?} that no worker reported starting"
            ))),
            Some(Some("ok")) => {}
            Some(None) => indeterminate += 1,
            Some(Some(o)) if o.starts_with("err") => indeterminate += 1,
            Some(Some(o)) => v.push(violation(format!(
                "write {value:?} was applied but its worker was told {o:?}"
            ))),
        }
    }
    let acked: Vec<_> = told
        .iter()
        .filter(|(_, o)| **o == Some("ok"))
        .map(|(k, _)| *k)
        .collect();
    for (proc, seq) in &acked {
        if !seen.contains_key(&(*proc, *seq)) {
            v.push(violation(format!(
                "worker {proc}'s write {seq} was acknowledged but is not in the resource's lists"
            )));
        }
    }
    notes.push(format!(
        "resource: {} writes applied = {} acknowledged + {indeterminate} indeterminate",
        data.list.len(),
        acked.len()
    ));
}

fn violation(text: String) -> Violation {
    Violation {
        checker: 1,
        t: None,
        text,
    }
}

/// Keys the library leaves by design (`src/redis/protocol/keys.rs`), under the
/// workers' lock prefix `locks`: the fencing counter, so that tokens keep
/// growing across every holder a key will ever have (one per prefix,
/// `_OWNERS_/fence`, or on a cluster one per lock, `{<key>}/_OWNERS_/fence`
/// for each of the workload's keys), and the epoch that tells a dataset
/// which lost them (one per prefix, `_OWNERS_/epoch`, or on a cluster one
/// per hash slot, `_OWNERS_/epoch/{<n>}`, which must be in the slot of one
/// of the workload's keys).
async fn expected_left(redis: &Redis, workload: Workload, locks: &str, key: &str) -> bool {
    let Some(name) = key.strip_prefix(locks) else {
        return false;
    };
    if redis.which != Deployment::Cluster {
        return name == "_OWNERS_/fence" || name == "_OWNERS_/epoch";
    }
    let keys = workload.lock_keys();
    if keys
        .iter()
        .any(|k| name == format!("{{{k}}}/_OWNERS_/fence"))
    {
        return true;
    }
    let tag = name
        .strip_prefix("_OWNERS_/epoch/{")
        .and_then(|t| t.strip_suffix('}'));
    if !tag.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    let Some(slot) = redis.keyslot(key).await else {
        return false;
    };
    for k in keys {
        if redis.keyslot(&format!("{{{k}}}")).await == Some(slot) {
            return true;
        }
    }
    false
}
