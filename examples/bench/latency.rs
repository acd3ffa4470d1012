//! `--latency-ms D`: the etcd rows on a 3-member cluster where every client
//! and peer link passes a relay that holds each chunk D ms (about a
//! datacenter at 0.5), so that round trips, not CPU, dominate.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::cluster::{Cluster, Listen};
use crate::support::free_port;
use crate::support::proxy::Proxy;
use crate::workloads::Res;

/// A cluster reached only through delaying relays, and the relays; both
/// stop when this drops.
pub struct Delayed {
    _cluster: Cluster,
    _relays: Vec<Proxy>,
    /// The leader's client endpoint, through its relay.
    pub leader: String,
}

/// Starts `n` members on loopback, each behind a client relay and a peer
/// relay that delay every chunk by `delay`.
pub async fn start(n: usize, delay: Duration) -> Res<Delayed> {
    let mut relays = Vec::new();
    let mut members = Vec::new();
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    for _ in 0..n {
        let (client, peer) = (free_port(), free_port());
        let client_relay = Proxy::start(any, format!("127.0.0.1:{client}")).await?;
        let peer_relay = Proxy::start(any, format!("127.0.0.1:{peer}")).await?;
        for relay in [&client_relay, &peer_relay] {
            relay.set_delay(delay, Duration::ZERO);
        }
        members.push((
            Listen {
                client_url: format!("http://127.0.0.1:{client}"),
                peer_url: format!("http://127.0.0.1:{peer}"),
            },
            format!("http://{}", client_relay.addr),
            format!("http://{}", peer_relay.addr),
        ));
        relays.extend([client_relay, peer_relay]);
    }
    let cluster = tokio::task::spawn_blocking(move || Cluster::start_relayed(members))
        .await?
        .map_err(|e| e.to_string())?;
    let leader = cluster.wait_leader(Duration::from_secs(30)).await?;
    let leader = cluster.endpoint(leader);
    Ok(Delayed {
        _cluster: cluster,
        _relays: relays,
        leader,
    })
}
