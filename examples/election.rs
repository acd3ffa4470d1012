//! Leader election: three nodes campaign for one election, each leads in
//! turn (in arrival order) and resigns, while a follower prints every
//! change of leader.
//!
//! ```text
//! cargo run --example election        # etcd from FAIRLOCK_ENDPOINTS, default 127.0.0.1:2379
//! ```
//!
//! Each node is an [`EtcdElector`] of its own (its own session lease, as a
//! process on another machine would have). A leader works until its work
//! is done or it loses the leadership (`lost()`), whichever comes first,
//! and passes its term to what it writes, so a resource can refuse a
//! deposed leader's writes.

use std::process::ExitCode;
use std::time::Duration;

use fairlock::etcd::{EtcdConfig, EtcdElector};
use fairlock::{Context, Elector, Key, Leadership};

/// What a leader does while it leads: here, a short pause.
async fn work(node: &str, leadership: &Leadership) {
    println!("{node}: leading in term {}", leadership.fencing_token());
    tokio::time::sleep(Duration::from_millis(200)).await;
}

async fn node(elector: EtcdElector, name: Key, node: String) -> fairlock::Result<()> {
    let ctx = Context::background().with_timeout(Duration::from_secs(30));
    let leadership = elector.campaign(&ctx, &name, node.as_bytes()).await?;
    tokio::select! {
        () = work(&node, &leadership) => {
            leadership.resign().await?; // the next node in line is elected
            println!("{node}: resigned");
        }
        () = leadership.lost() => {
            println!("{node}: lost the leadership: {:?}", leadership.loss_cause());
        }
    }
    elector.close().await
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let config = EtcdConfig::from_env()?;
    let name = Key::from(format!("election-example-{}", std::process::id()));
    let follower = EtcdElector::connect(config.clone()).await?;
    let mut changes = follower.observe(&name).await?;
    let printer = tokio::spawn(async move {
        let mut led = 0;
        while led < 3 {
            match changes.next().await {
                Ok(Some(leader)) => {
                    led += 1;
                    println!(
                        "follower: {} leads (term {}, {})",
                        String::from_utf8_lossy(&leader.value),
                        leader.fencing_token,
                        leader.owner.describe()
                    );
                }
                Ok(None) => println!("follower: no leader"),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    });
    let mut nodes = Vec::new();
    for i in 1..=3 {
        let elector = EtcdElector::connect(config.clone()).await?;
        let (name, node_name) = (name.clone(), format!("node-{i}"));
        nodes.push(tokio::spawn(node(elector, name, node_name)));
    }
    for n in nodes {
        n.await??;
    }
    printer.await??;
    follower.close().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("election example failed: {e}");
            ExitCode::FAILURE
        }
    }
}
