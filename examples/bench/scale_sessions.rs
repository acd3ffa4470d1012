//! The sessions curve of `bench --scale` (etcd): 0 .. 1,000 idle locker
//! processes, each with its own session: keepalive messages per second,
//! etcd's CPU, and the uncontended cycle beside them against the txn floor
//! beside them.

use crate::chart::{Chart, Series};
use crate::scale::{Plan, unique};
use crate::scale_procs::{Proc, Server, finish_all};
use crate::scale_table::Table;
use crate::workloads::Res;

/// One point of the sessions curve.
pub struct SessionsPoint {
    pub procs: usize,
    pub keepalives_per_s: f64,
    pub cpu_pct: f64,
    pub cycle_us: f64,
    pub floor_us: f64,
}

/// `procs` idle lockers, each its own process and session, and the
/// uncontended cycle beside them.
pub async fn sessions_point(server: &Server, procs: usize, plan: &Plan) -> Res<SessionsPoint> {
    let prefix = unique("sessions");
    let mut children = Vec::new();
    for _ in 0..procs {
        children.push(Proc::start("idle", server.endpoint(), &prefix, 0).await?);
    }
    let (keepalives_per_s, cpu_pct) = server.renewal_window(plan.renewals).await?;
    let (cycle_us, floor_us) = crate::scale_run::cycle_beside(server.endpoint(), &prefix).await?;
    finish_all(children).await?;
    Ok(SessionsPoint {
        procs,
        keepalives_per_s,
        cpu_pct,
        cycle_us,
        floor_us,
    })
}

pub async fn sessions_curve(server: &Server, plan: &Plan) -> Res<Vec<SessionsPoint>> {
    let mut points = Vec::new();
    for &procs in &plan.sessions {
        eprintln!("scale: {procs} idle locker processes");
        points.push(sessions_point(server, procs, plan).await?);
    }
    Ok(points)
}

pub fn sessions_table(points: &[SessionsPoint]) -> Table {
    let mut t = Table::new(
        "etcd: idle locker processes, each with its own session",
        &[
            "processes",
            "keepalive msgs/s",
            "etcd CPU (idle)",
            "uncontended cycle",
            "txn floor beside",
            "cycle vs floor",
        ],
    );
    for p in points {
        t.row(vec![
            p.procs.to_string(),
            format!("{:.1}", p.keepalives_per_s),
            format!("{:.1} %", p.cpu_pct),
            format!("{:.0} us", p.cycle_us),
            format!("{:.0} us", p.floor_us),
            format!("{:.2}x", p.cycle_us / p.floor_us),
        ]);
    }
    t
}

pub fn sessions_chart(points: &[SessionsPoint]) -> Chart {
    let at = |f: fn(&SessionsPoint) -> f64| {
        points
            .iter()
            .map(|p| ((p.procs.max(1)) as f64, 1e6 / f(p)))
            .collect()
    };
    Chart {
        title: "etcd: the uncontended cycle beside idle locker processes".into(),
        x_label: "idle locker processes (0 drawn at 1)".into(),
        y_label: "cycles per second".into(),
        series: vec![
            Series {
                name: "fairlock lock+unlock".into(),
                points: at(|p| p.cycle_us),
                dashed: false,
            },
            Series {
                name: "txn floor".into(),
                points: at(|p| p.floor_us),
                dashed: true,
            },
        ],
    }
}
