//! `serde::Serialize` for the status types and [`Owner`] (feature
//! `serde`), written out so that the field names `fairlock status --json`
//! prints are stated here and not derived from Rust names: [`Owner`] as
//! `{"pid", "host", "age_ms", "value"}`, a [`LeaseId`] as its hex string,
//! durations as whole milliseconds (`ttl_left_ms`).

use std::time::Duration;

use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::{LeaseId, LockHolder, LockKind, LockStatus, LockWaiter, NodeCount, Owner};

/// `{"key", "holder", "waiters", "foreign", "kind", "limit", "holders",
/// "leader"}`: `kind` is `"lock"`, `"read/write"` or `"semaphore"`, `limit`
/// a semaphore's (else `null`), `leader` an election's `{"value",
/// "token"}` (the value as text, invalid UTF-8 replaced; else `null`).
/// An election's leader in a lock's status: `{"value", "token"}`.
struct LeaderField {
    value: String,
    token: u64,
}

impl Serialize for LeaderField {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Leader", 2)?;
        s.serialize_field("value", &self.value)?;
        s.serialize_field("token", &self.token)?;
        s.end()
    }
}

impl Serialize for LockStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (kind, limit) = match self.kind {
            LockKind::Mutex => ("lock", None),
            LockKind::ReadWrite => ("read/write", None),
            LockKind::Semaphore { limit } => ("semaphore", Some(limit)),
        };
        let mut s = serializer.serialize_struct("LockStatus", 8)?;
        s.serialize_field("key", &self.key)?;
        s.serialize_field("holder", &self.holder)?;
        s.serialize_field("waiters", &self.waiters)?;
        s.serialize_field("foreign", &self.foreign)?;
        s.serialize_field("kind", kind)?;
        s.serialize_field("limit", &limit)?;
        s.serialize_field("holders", &self.holders)?;
        let leader = self.leader.as_ref().map(|l| LeaderField {
            value: String::from_utf8_lossy(&l.value).into_owned(),
            token: l.fencing_token,
        });
        s.serialize_field("leader", &leader)?;
        s.end()
    }
}

/// `{"owner", "fencing_token", "lease", "ttl_left_ms", "nodes", "reads",
/// "permits"}`;
/// what a backend does not fill is `null`.
impl Serialize for LockHolder {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("LockHolder", 7)?;
        s.serialize_field("owner", &self.owner)?;
        s.serialize_field("fencing_token", &self.fencing_token)?;
        s.serialize_field("lease", &self.lease)?;
        s.serialize_field("ttl_left_ms", &self.ttl_left.as_ref().map(millis_of))?;
        s.serialize_field("nodes", &self.nodes)?;
        s.serialize_field("reads", &self.reads)?;
        s.serialize_field("permits", &self.permits)?;
        s.end()
    }
}

/// `{"owner", "locker", "fair", "reads", "permits"}`.
impl Serialize for LockWaiter {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("LockWaiter", 5)?;
        s.serialize_field("owner", &self.owner)?;
        s.serialize_field("locker", &self.locker)?;
        s.serialize_field("fair", &self.fair)?;
        s.serialize_field("reads", &self.reads)?;
        s.serialize_field("permits", &self.permits)?;
        s.end()
    }
}

/// `{"holding", "total"}`.
impl Serialize for NodeCount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("NodeCount", 2)?;
        s.serialize_field("holding", &self.holding)?;
        s.serialize_field("total", &self.total)?;
        s.end()
    }
}

/// The string a lease id displays as (16 hex digits, as etcdctl prints
/// and reads it).
impl Serialize for LeaseId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// An owner as `fairlock status --json` shows it: process id, host, age
/// in milliseconds by this machine's clock (see [`Owner::age`]), and the
/// raw value; fields the value lacks are `null`.
impl Serialize for Owner {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Owner", 4)?;
        s.serialize_field("pid", &self.pid)?;
        s.serialize_field("host", &self.host)?;
        s.serialize_field("age_ms", &self.age().map(|d| millis_of(&d)))?;
        s.serialize_field("value", &self.raw)?;
        s.end()
    }
}

fn millis_of(d: &Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(all(test, feature = "cli"))]
mod tests {
    use std::time::Duration;

    use crate::{LeaseId, LockHolder, LockKind, LockStatus, LockWaiter, NodeCount, Owner};

    #[test]
    fn owners_serialize_with_the_status_field_names() {
        let owner = Owner::parse("u1 pid=42 host=web1 at=0");
        let json = serde_json::to_value(&owner).expect("serialize");
        assert_eq!(json["pid"], 42);
        assert_eq!(json["host"], "web1");
        assert!(json["age_ms"].as_u64().is_some_and(|ms| ms > 0), "{json}");
        assert_eq!(json["value"], "u1 pid=42 host=web1 at=0");
        let json = serde_json::to_value(Owner::parse("plain")).expect("serialize");
        assert!(json["pid"].is_null() && json["age_ms"].is_null(), "{json}");
    }

    #[test]
    fn a_lock_serializes_with_the_status_field_names() {
        let owner = Owner::parse("plain");
        let mut lock = LockStatus::new("k");
        let mut holder = LockHolder::new(owner.clone(), 12);
        holder.lease = Some(LeaseId(4_111_120_175_541_098_758));
        holder.ttl_left = Some(Duration::from_millis(1500));
        holder.nodes = Some(NodeCount::new(2, 3));
        lock.holder = Some(holder);
        lock.waiters.push(LockWaiter::new(owner, "L", true));
        lock.foreign.push("/p/k/_OWNERS_/x".into());
        let owner = r#"{"pid":null,"host":null,"age_ms":null,"value":"plain"}"#;
        assert_eq!(
            serde_json::to_string(&lock).expect("serialize"),
            format!(
                concat!(
                    r#"{{"key":"k","holder":{{"owner":{owner},"fencing_token":12,"#,
                    r#""lease":"390da2049c119906","ttl_left_ms":1500,"#,
                    r#""nodes":{{"holding":2,"total":3}},"reads":false,"permits":1}},"#,
                    r#""waiters":[{{"owner":{owner},"locker":"L","fair":true,"reads":false,"#,
                    r#""permits":1}}],"#,
                    r#""foreign":["/p/k/_OWNERS_/x"],"kind":"lock","limit":null,"holders":[],"leader":null}}"#
                ),
                owner = owner
            )
        );
    }

    #[test]
    fn a_semaphore_serializes_its_kind_limit_and_holders() {
        let mut lock = LockStatus::new("k");
        lock.kind = LockKind::Semaphore { limit: 3 };
        let mut reader = LockHolder::new(Owner::parse("plain"), 5);
        reader.reads = true;
        lock.holders = vec![reader.clone(), reader];
        let json = serde_json::to_value(&lock).expect("serialize");
        assert_eq!(json["kind"], "semaphore");
        assert_eq!(json["limit"], 3);
        assert_eq!(json["holders"].as_array().map(Vec::len), Some(2));
        assert_eq!(json["holders"][1]["reads"], true);
    }
}
