//! The held-keys curve of `bench --scale`: 1 .. 100,000 keys held at once
//! by one locker: time to take and release them, client memory per key,
//! renewals per second while they are held (etcd: keepalive messages;
//! Redis: commands). Floor: as many plain puts (etcd) or `SET PX` (Redis),
//! as many at a time.

use crate::chart::{Chart, Series};
use crate::scale::{Plan, unique};
use crate::scale_child::TTL;
use crate::scale_procs::{Proc, Server};
use crate::scale_table::Table;
use crate::workloads::Res;

/// One point of the held-keys curve.
pub struct HeldPoint {
    pub n: usize,
    pub take_s: f64,
    pub release_s: f64,
    pub floor_s: f64,
    pub client_bytes_per_key: f64,
    pub renewals_per_s: f64,
    pub data_mib: f64,
}

/// `n` keys taken, held through a window, then released by one locker.
pub async fn held_point(server: &Server, n: usize, plan: &Plan) -> Res<HeldPoint> {
    let prefix = unique("held");
    let floor_s = crate::scale_run::puts(server, &unique("floor"), n).await?;
    let mut child = Proc::start("held", server.endpoint(), &prefix, n).await?;
    let take_s = child.answer("TOOK").await?;
    let client_bytes_per_key = (child.rss() - child.base) / n as f64;
    let data_mib = server.data_bytes().await? / 1048576.0;
    let (renewals_per_s, _) = server.renewal_window(plan.renewals).await?;
    child.send("release").await?;
    let release_s = child.answer("RELEASED").await?;
    child.finish().await?;
    Ok(HeldPoint {
        n,
        take_s,
        release_s,
        floor_s,
        client_bytes_per_key,
        renewals_per_s,
        data_mib,
    })
}

pub async fn held_curve(server: &Server, plan: &Plan) -> Res<Vec<HeldPoint>> {
    let mut points = Vec::new();
    for &n in &plan.held {
        eprintln!("scale: {} {n} keys held", server.name());
        points.push(held_point(server, n, plan).await?);
    }
    Ok(points)
}

pub fn held_table(server: &Server, points: &[HeldPoint], plan: &Plan) -> Table {
    let renewals = match server {
        Server::Etcd { .. } => "keepalive msgs/s",
        Server::Redis { .. } => "server commands/s",
    };
    let mut t = Table::new(
        &format!("{}: N keys held at once by one locker", server.name()),
        &[
            "keys",
            "take all",
            "floor (plain writes)",
            "take vs floor",
            "release all",
            "client bytes/key",
            renewals,
            "data MiB",
        ],
    );
    for p in points {
        t.row(vec![
            p.n.to_string(),
            format!("{:.3} s", p.take_s),
            format!("{:.3} s", p.floor_s),
            format!("{:.2}x", p.take_s / p.floor_s),
            format!("{:.3} s", p.release_s),
            format!("{:.0}", p.client_bytes_per_key),
            format!("{:.1}", p.renewals_per_s),
            format!("{:.1}", p.data_mib),
        ]);
    }
    t.note(&format!(
        "renewals counted over {} s while held, TTL {} s; the take runs {} calls at a time",
        plan.renewals.as_secs(),
        TTL.as_secs(),
        crate::scale_child::IN_FLIGHT
    ));
    t
}

pub fn held_chart(curves: &[(&Server, &[HeldPoint])]) -> Chart {
    let mut series = Vec::new();
    for (server, points) in curves {
        // Keys per second, from each point's seconds for all its keys.
        let line = |name: String, secs: fn(&HeldPoint) -> f64, dashed: bool| Series {
            name,
            points: points
                .iter()
                .map(|p| (p.n as f64, p.n as f64 / secs(p)))
                .collect(),
            dashed,
        };
        series.push(line(
            format!("fairlock on {}", server.name()),
            |p| p.take_s,
            false,
        ));
        series.push(line(
            format!("plain writes, {}", server.name()),
            |p| p.floor_s,
            true,
        ));
    }
    Chart {
        title: "Keys taken per second by one locker, against keys held".into(),
        x_label: "keys held at once".into(),
        y_label: "keys taken per second".into(),
        series,
    }
}
