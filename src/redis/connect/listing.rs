//! The sentinels' list of a master's replicas (`SENTINEL REPLICAS`),
//! counted the two ways `replicas.rs` uses: the replicas replicating now,
//! and those that may still be promoted with the master's writes.
//!
//! A listed replica that reports itself a master is one of two things:
//! - a replica promoted in a failover not yet announced: it may become
//!   the master with every write the old one gave it, so it counts (the
//!   old master's writes must fall short until the locker leaves it);
//! - an old master the sentinels have not reconfigured yet (after a pause
//!   or a partition, for about ten seconds plus a sync) or a node that
//!   restarted empty: it holds none of the master's writes since the
//!   failover, and counting it would fail every grant until it follows.
//!
//! They are told apart by replication history: a promoted replica's
//! secondary id (`master_replid2`) is the id of the master it was
//! promoted from. Only a replica whose history continues the master's
//! counts; where either cannot be read it counts, to be safe.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo};

/// One replica as `SENTINEL REPLICAS` lists it.
pub(crate) type Replica = HashMap<String, String>;

/// The sentinels' list of a master's replicas, counted two ways
/// (`replicas.rs` says which counts when).
pub(crate) struct Listing {
    /// The master this locker was connected to when it was read.
    pub master: Option<String>,
    /// Replicas that are up and replicating: no down flag, reporting
    /// themselves replicas, their link to the master up.
    pub replicating: usize,
    /// Replicas without a down flag that may still be promoted with the
    /// master's writes (see the module docs).
    pub not_down: usize,
}

/// The master a listing was read for: its address, a connection to it,
/// and how to reach a replica as it (credentials, TLS).
pub(crate) struct Master {
    pub addr: String,
    pub conn: MultiplexedConnection,
    pub info: ConnectionInfo,
}

impl Listing {
    /// Counts `replicas`; a replica that reports itself a master is asked
    /// whether it was promoted from `master` (within `timeout`).
    pub async fn count(replicas: &[Replica], master: Option<Master>, timeout: Duration) -> Listing {
        let mut not_down = 0;
        for replica in replicas.iter().filter(|r| is_not_down(r)) {
            let counts = match (&master, field(replica, "role-reported")) {
                (Some(master), Some("master")) => {
                    promoted_from(master, replica, timeout).await != Some(false)
                }
                _ => true,
            };
            not_down += usize::from(counts);
        }
        Listing {
            master: master.map(|m| m.addr),
            replicating: replicas.iter().filter(|r| is_replicating(r)).count(),
            not_down,
        }
    }
}

fn field<'a>(replica: &'a Replica, name: &str) -> Option<&'a str> {
    replica.get(name).map(String::as_str)
}

/// Whether a replica of `SENTINEL REPLICAS` has no flag that says it is
/// down or disconnected.
fn is_not_down(replica: &Replica) -> bool {
    field(replica, "flags").is_some_and(|flags| {
        !flags
            .split(',')
            .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
    })
}

/// Whether a replica of `SENTINEL REPLICAS` is up and replicating: not
/// down, it reports itself a replica, and its link to the master is up.
fn is_replicating(replica: &Replica) -> bool {
    is_not_down(replica)
        && field(replica, "role-reported") == Some("slave")
        && field(replica, "master-link-status") == Some("ok")
}

/// Whether `replica`, which the sentinels saw report itself a master, has
/// a history that continues `master`'s (promoted from it), or follows a
/// master by now; `None` where either could not be asked in time.
async fn promoted_from(master: &Master, replica: &Replica, timeout: Duration) -> Option<bool> {
    let ask = async {
        let host = field(replica, "ip")?;
        let port = field(replica, "port")?.parse().ok()?;
        let addr = match master.info.addr() {
            ConnectionAddr::Tcp(..) => ConnectionAddr::Tcp(host.to_owned(), port),
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => return None,
        };
        let ours = replication(&mut master.conn.clone()).await?;
        let client = redis::Client::open(master.info.clone().set_addr(addr)).ok()?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()?;
        let theirs = replication(&mut conn).await?;
        Some(
            info_field(&theirs, "role") != Some("master")
                || info_field(&theirs, "master_replid2") == info_field(&ours, "master_replid"),
        )
    };
    tokio::time::timeout(timeout, ask).await.ok().flatten()
}

/// `INFO replication` of a connection.
async fn replication(conn: &mut MultiplexedConnection) -> Option<String> {
    redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await
        .ok()
}

/// A field of `INFO` text.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(fields: &[(&str, &str)]) -> Replica {
        fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn replicas_are_counted_by_flags_role_and_link() {
        let up = replica(&[
            ("flags", "slave"),
            ("role-reported", "slave"),
            ("master-link-status", "ok"),
        ]);
        assert!(is_replicating(&up) && is_not_down(&up));
        // The old master, listed before the sentinels reconfigured it (or
        // a replica just promoted, in its old master's list).
        let old = replica(&[
            ("flags", "slave"),
            ("role-reported", "master"),
            ("master-link-status", "err"),
        ]);
        assert!(!is_replicating(&old) && is_not_down(&old));
        let down = replica(&[
            ("flags", "slave,s_down"),
            ("role-reported", "slave"),
            ("master-link-status", "ok"),
        ]);
        assert!(!is_replicating(&down) && !is_not_down(&down));
        let cut = replica(&[
            ("flags", "slave"),
            ("role-reported", "slave"),
            ("master-link-status", "err"),
        ]);
        assert!(!is_replicating(&cut) && is_not_down(&cut));
    }

    #[test]
    fn info_fields_are_read_by_name() {
        let info = "# Replication\r\nrole:master\r\nmaster_replid:abc\r\nmaster_replid2:def\r\n";
        assert_eq!(info_field(info, "role"), Some("master"));
        assert_eq!(info_field(info, "master_replid"), Some("abc"));
        assert_eq!(info_field(info, "master_replid2"), Some("def"));
        assert_eq!(info_field(info, "master_repl_offset"), None);
    }
}
