//! `--trace`: the uncontended lock+unlock cycle with no tracing subscriber,
//! then with a fmt subscriber at `fairlock=debug` writing to a sink (what
//! `fairlock -v` installs, minus the terminal), each phase in batches
//! interleaved with the txn floor cycle. A global subscriber cannot be
//! removed, so the phases run in that order and the run ends there.

use fairlock::Key;

use crate::report::{Row, median};
use crate::workloads::{self, Res, Run};

pub async fn rows(ep: &str, quick: bool) -> Res<Vec<Row>> {
    let (batches, n) = if quick { (4, 50) } else { (10, 200) };
    let client = workloads::connect(ep).await?;
    let lease = client.clone().lease_grant(60, None).await?.id();
    let id = uuid::Uuid::new_v4().simple();
    let floor_key = format!("/bench/trace-floor-{id}");
    let locker = workloads::locker(ep, &format!("/bench/trace-{id}/"), true).await?;
    let key = Key::from("traced");
    workloads::cycle(&locker, &key, 10).await?; // session lease + watches
    let mut rows = Vec::new();
    for phase in ["no subscriber", "subscriber: fairlock=debug to a sink"] {
        if !rows.is_empty() {
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter("fairlock=debug")
                .with_writer(std::io::sink)
                .finish();
            tracing::subscriber::set_global_default(subscriber)?;
        }
        let (mut floor_m, mut ours_m, mut ours) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..batches {
            let f = workloads::txn_cycle(&client, lease, &floor_key, n).await?;
            let a = workloads::cycle(&locker, &key, n).await?;
            floor_m.push(f.mean().as_secs_f64());
            ours_m.push(a.mean().as_secs_f64());
            ours.push(a);
        }
        let run = Run {
            elapsed: ours.iter().map(|r| r.elapsed).sum(),
            lat: ours.into_iter().flat_map(|r| r.lat).collect(),
        };
        let name = format!("fairlock uncontended lock+unlock, {phase}");
        rows.push(Row::of(&name, "fair", 1, 1, &run).ratio(
            median(ours_m) / median(floor_m),
            "x floor cycle (median of batch means)",
        ));
    }
    locker.close().await?;
    Ok(rows)
}
