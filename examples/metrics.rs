//! fairlock's metrics in Prometheus text format, served over HTTP while a
//! few tasks contend for one lock.
//!
//! ```text
//! cargo run --example metrics --features metrics -- [SECONDS] [ADDR]
//! curl -s http://127.0.0.1:9898/metrics | grep fairlock_
//! ```
//! With `FAIRLOCK_ENDPOINTS` set (e.g. `127.0.0.1:2379` or
//! `redis://127.0.0.1:6379`) the tasks lock there; without it they use the
//! in-process memory backend. It runs for SECONDS (default 10), then
//! prints the final scrape and exits.

use std::sync::Arc;
use std::time::Duration;

use fairlock::{Context, Key, Locker};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let secs: u64 = args.next().map_or(Ok(10), |s| s.parse())?;
    let addr: std::net::SocketAddr = args.next().unwrap_or("127.0.0.1:9898".into()).parse()?;

    let (recorder, exporter) = PrometheusBuilder::new().with_http_listener(addr).build()?;
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    tokio::spawn(exporter);
    println!("serving http://{addr}/metrics for {secs}s");

    let store = fairlock::memory::MemoryStore::new();
    let key = Key::from("metrics-example");
    let mut tasks = Vec::new();
    for i in 0..4u64 {
        // Three fair tasks that wait as long as it takes, one unfair task
        // that gives up after 20 ms (fairlock_timeouts_total).
        let (fair, patience) = if i < 3 {
            (true, None)
        } else {
            (false, Some(Duration::from_millis(20)))
        };
        let locker = locker(&store, fair).await?;
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let end = tokio::time::Instant::now() + Duration::from_secs(secs);
            while tokio::time::Instant::now() < end {
                let mut ctx = Context::background();
                if let Some(p) = patience {
                    ctx = ctx.with_timeout(p);
                }
                match locker.lock(&ctx, &key).await {
                    Ok(guard) => {
                        tokio::time::sleep(Duration::from_millis(5 + i * 3)).await;
                        guard.unlock().await?;
                    }
                    Err(e) if e.is_gave_up() => {}
                    Err(e) => return Err(e),
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    println!("{}", handle.render());
    Ok(())
}

/// A locker on `FAIRLOCK_ENDPOINTS` if set, else on `store`.
async fn locker(
    store: &fairlock::memory::MemoryStore,
    fair: bool,
) -> fairlock::Result<Arc<dyn Locker>> {
    if std::env::var("FAIRLOCK_ENDPOINTS").is_ok_and(|e| !e.is_empty()) {
        fairlock::connect_from_env(fair).await
    } else {
        Ok(Arc::new(store.locker(fair)))
    }
}
