//! The network suite (`--net`): the 3 etcd members and every worker each
//! in a network namespace of their own on one bridge (`tests/support/net.rs`),
//! each worker reaching the members through a delay relay of its own
//! (`tests/support/proxy.rs`). The orchestrator reaches the members through
//! gateways from an observer node that partitions leave alone.
//!
//! Faults, one after another, in both modes:
//! - a holder cut off from every member past its TTL, then healed;
//! - a waiter cut off past its TTL, then healed;
//! - the leader isolated with a minority holding a holder and a waiter;
//! - 30 % packet loss on every worker's link for 10 s;
//! - delay spikes of 200-500 ms on every worker's path (1 s on, 1 s off);
//! - the holder's link flapping (1 s down, 1 s up) for 10 s;
//! - then, with Redis (one instance, `redis_net.rs`), a holder cut off.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::fault::{Fault, Injection, PAST_TTL};
use crate::run::{MEMBERS, Phase, phases};
use crate::support::cluster::{Cluster, Placement};
use crate::support::net::Net;
use crate::support::proxy::Proxy;
use crate::{BoxError, Opts, mono_ns};

/// Share of packets dropped on every worker link, and for how long.
const LOSS_PERCENT: u8 = 30;
const LOSS_FOR: Duration = Duration::from_secs(10);
/// Delay spikes: `base` + jitter in `[0, JITTER)` per chunk, on for
/// `SPIKE`, then off for as long; `SPIKES` times.
const SPIKE_BASE: Duration = Duration::from_millis(200);
const SPIKE_JITTER: Duration = Duration::from_millis(300);
const SPIKE: Duration = Duration::from_secs(1);
const SPIKES: u32 = 5;
/// Link flapping: down for `FLAP`, up for `FLAP`, `FLAPS` times.
const FLAP: Duration = Duration::from_secs(1);
const FLAPS: u32 = 5;

/// The network, which node each member and worker slot runs in, and the
/// orchestrator's gateways to the members.
pub struct NetEnv {
    pub net: Net,
    pub members: Vec<usize>,
    pub workers: Vec<usize>,
    _gateways: Vec<Proxy>,
}

pub fn label(fault: Fault, ttl: Duration) -> String {
    let past = (ttl + PAST_TTL).as_secs_f64();
    match fault {
        Fault::HolderCut => format!("holder cut off {past:.1}s"),
        Fault::WaiterCut => format!("waiter cut off {past:.1}s"),
        Fault::LeaderMinority => "leader + holder + waiter isolated".into(),
        Fault::Loss => format!("{LOSS_PERCENT}% loss, all workers {}s", LOSS_FOR.as_secs()),
        Fault::DelaySpikes => format!(
            "delay spikes {}-{} ms x{SPIKES}",
            SPIKE_BASE.as_millis(),
            (SPIKE_BASE + SPIKE_JITTER).as_millis()
        ),
        Fault::LinkFlap => format!("holder link flapping {FLAPS}x{}s", FLAP.as_secs()),
        other => format!("{other:?}"),
    }
}

/// Builds the network and cluster, runs both modes' phases with the
/// network faults, prints the table; returns the number of violations.
/// Without root (or ip/nft) it says why and does nothing.
pub async fn run(o: &Opts) -> Result<usize, BoxError> {
    if let Some(why) = Net::unavailable() {
        println!("network fault suite SKIPPED: {why}");
        return Ok(0);
    }
    let started = Instant::now();
    let mut net = Net::new()?;
    let members = (0..MEMBERS)
        .map(|i| net.add_node(&format!("m{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let workers = (0..o.workers)
        .map(|i| net.add_node(&format!("w{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let observer = net.add_observer("obs")?;
    let mut gateways = Vec::new();
    let mut placements = Vec::new();
    for &m in &members {
        let node = net.node(m);
        let gw = net
            .gateway(observer, SocketAddr::from((node.ip, 2379)))
            .await?;
        placements.push(Placement {
            netns: node.ns.clone(),
            ip: node.ip,
            access: gw.addr.to_string(),
        });
        gateways.push(gw);
    }
    println!(
        "test network: namespaces {} (10.213.0.0/24 inside them only)",
        net.namespaces().join(" ")
    );
    let mut cluster = tokio::task::block_in_place(|| Cluster::start_placed(placements))?;
    let env = NetEnv {
        net,
        members,
        workers,
        _gateways: gateways,
    };
    let mut schedule = vec![Fault::Baseline];
    for _ in 0..o.rounds {
        schedule.extend([
            Fault::HolderCut,
            Fault::WaiterCut,
            Fault::LeaderMinority,
            Fault::Loss,
            Fault::DelaySpikes,
            Fault::LinkFlap,
        ]);
    }
    let reports = phases(o, &mut cluster, Some(&env), &schedule).await;
    // Members first (their wrappers), then the namespaces.
    drop(cluster);
    drop(env);
    #[allow(unused_mut)]
    let mut violations = crate::table::print(&reports?, o);
    // The Redis holder cut runs unless --only picks other faults.
    #[cfg(feature = "redis")]
    if o.only
        .as_ref()
        .is_none_or(|only| label(Fault::HolderCut, o.ttl).contains(only.as_str()))
    {
        violations += crate::redis_net::run(o).await?;
    }
    println!("total time {:.0} s", started.elapsed().as_secs_f64());
    Ok(violations)
}

impl Phase<'_> {
    fn env(&self) -> Result<&NetEnv, BoxError> {
        self.net
            .ok_or_else(|| "a network fault needs the network suite (--net)".into())
    }

    /// The node worker process `proc` runs in.
    fn node_of(&self, proc: usize) -> Result<usize, BoxError> {
        let env = self.env()?;
        let slot = self
            .slots
            .iter()
            .position(|s| s.proc == proc)
            .ok_or_else(|| format!("worker process {proc} has no slot"))?;
        Ok(env.workers[slot])
    }

    /// The worker process at the head of the lock's queue other than
    /// `holder` (the next to be served, read from etcd), else the one
    /// whose last unlock is the oldest.
    async fn waiter(&self, holder: usize) -> Result<usize, BoxError> {
        use crate::events::Kind;
        let pid_of = |proc: usize| self.shared.lock().procs.get(&proc).map_or(0, |p| p.pid);
        let queue = format!("{}{}/", self.locks(), crate::worker::LOCK_KEY);
        let mut client = self.client.clone();
        let entries = client
            .get(queue, Some(etcd_client::GetOptions::new().with_prefix()))
            .await?;
        let mut kvs: Vec<_> = entries.kvs().iter().collect();
        kvs.sort_by_key(|kv| kv.create_revision());
        let others: Vec<(usize, u32)> = self
            .slots
            .iter()
            .map(|s| (s.proc, pid_of(s.proc)))
            .filter(|&(p, _)| p != holder)
            .collect();
        for kv in kvs {
            let value = String::from_utf8_lossy(kv.value());
            let owner = value.lines().next().unwrap_or_default();
            if let Some(&(proc, _)) = others
                .iter()
                .find(|(_, pid)| owner.split_whitespace().any(|f| f == format!("pid={pid}")))
            {
                return Ok(proc);
            }
        }
        let log = self.shared.lock();
        others
            .iter()
            .map(|&(p, _)| p)
            .min_by_key(|p| {
                log.procs.get(p).and_then(|p| {
                    p.events
                        .iter()
                        .rev()
                        .find(|e| matches!(e.kind, Kind::Unl | Kind::Start))
                        .map(|e| e.t)
                })
            })
            .ok_or_else(|| "no worker besides the holder".into())
    }

    /// Tells every worker's relay its delay.
    fn set_delay(&mut self, base: Duration, jitter: Duration) -> Result<(), BoxError> {
        use std::io::Write;
        let line = format!("delay {} {}\n", base.as_millis(), jitter.as_millis());
        for s in &mut self.slots {
            if let Some(stdin) = s.stdin.as_mut() {
                stdin.write_all(line.as_bytes())?;
                stdin.flush()?;
            }
        }
        Ok(())
    }

    /// Injects network fault `fault`, filling in `inj` (its target, the
    /// cut window, and when recovery is measured from).
    pub async fn inject_net(&mut self, fault: Fault, inj: &mut Injection) -> Result<(), BoxError> {
        let cut_for = self.o.ttl + PAST_TTL;
        match fault {
            Fault::HolderCut | Fault::WaiterCut => {
                let (holder, token) = self.fresh_holder().await?;
                let proc = if fault == Fault::HolderCut {
                    holder
                } else {
                    self.waiter(holder).await?
                };
                let node = self.node_of(proc)?;
                inj.target = Some(proc);
                let cut = mono_ns();
                self.env()?.net.cut(node)?;
                tokio::time::sleep(cut_for).await;
                self.env()?.net.heal(node)?;
                inj.cut = Some((cut, mono_ns()));
                inj.measure_from = cut;
                if fault == Fault::HolderCut {
                    inj.missed = self.released_before(proc, token, cut);
                }
            }
            Fault::LeaderMinority => {
                let leader = self.cluster.wait_leader(Duration::from_secs(20)).await?;
                let (holder, token) = self.fresh_holder().await?;
                let waiter = self.waiter(holder).await?;
                let env = self.env()?;
                let group = [
                    env.members[leader],
                    self.node_of(holder)?,
                    self.node_of(waiter)?,
                ];
                inj.target = Some(holder);
                let majority: Vec<usize> = (0..MEMBERS).filter(|&m| m != leader).collect();
                let cut = mono_ns();
                env.net.partition(&group)?;
                // Long enough for the majority to elect a leader, for the
                // holder's lease (extended by the new leader) to expire,
                // and for a grant on the majority side. Meanwhile, when
                // the majority has its leader (the recovery bound counts
                // from there, see `Injection::bound`).
                let cut_for = self.o.ttl * 2 + PAST_TTL + crate::support::cluster::ELECTION_TIMEOUT;
                let elected = async {
                    loop {
                        let found = self
                            .cluster
                            .leader_among(&majority, Duration::from_millis(200))
                            .await;
                        if found.is_some_and(|l| l != leader) {
                            return mono_ns();
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                };
                let (elected, ()) = tokio::join!(
                    tokio::time::timeout(cut_for, elected),
                    tokio::time::sleep(cut_for)
                );
                inj.elected = elected.ok();
                env.net.heal_partition()?;
                inj.cut = Some((cut, mono_ns()));
                inj.measure_from = cut;
                inj.missed = self.released_before(holder, token, cut);
            }
            Fault::Loss => {
                let env = self.env()?;
                for &w in &env.workers {
                    env.net.loss(w, LOSS_PERCENT)?;
                }
                tokio::time::sleep(LOSS_FOR).await;
                for &w in &env.workers {
                    env.net.clear_loss(w)?;
                }
                inj.measure_from = mono_ns();
            }
            Fault::DelaySpikes => {
                for _ in 0..SPIKES {
                    self.set_delay(SPIKE_BASE, SPIKE_JITTER)?;
                    tokio::time::sleep(SPIKE).await;
                    self.set_delay(Duration::ZERO, Duration::ZERO)?;
                    tokio::time::sleep(SPIKE).await;
                }
                inj.measure_from = mono_ns();
            }
            Fault::LinkFlap => {
                let (holder, _) = self.fresh_holder().await?;
                let node = self.node_of(holder)?;
                for _ in 0..FLAPS {
                    self.env()?.net.cut(node)?;
                    tokio::time::sleep(FLAP).await;
                    self.env()?.net.heal(node)?;
                    tokio::time::sleep(FLAP).await;
                }
                inj.measure_from = mono_ns();
            }
            other => return Err(format!("{other:?} is not a network fault").into()),
        }
        Ok(())
    }
}
