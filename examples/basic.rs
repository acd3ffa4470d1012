//! The README's example: take a fair lock on etcd, print its fencing token,
//! release it.
//!
//! ```text
//! cargo run --example basic                                   # etcd on 127.0.0.1:2379
//! FAIRLOCK_ENDPOINTS=10.0.0.1:2379 cargo run --example basic
//! ```

use std::process::ExitCode;
use std::time::Duration;

use fairlock::{Context, Key};

async fn run() -> fairlock::Result<()> {
    // Once per process: connect to etcd (FAIRLOCK_ENDPOINTS, default
    // 127.0.0.1:2379) and make it the backend of get_locker.
    fairlock::etcd::register(fairlock::etcd::EtcdConfig::from_env()?).await?;

    let locker = fairlock::get_locker(true)?; // true: fair
    let ctx = Context::background().with_timeout(Duration::from_secs(30));
    let guard = locker.lock(&ctx, &Key::from("nightly-export")).await?;
    println!("exporting with fencing token {}", guard.fencing_token());
    guard.unlock().await?; // reports a lock lost while held
    println!("released");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let Err(err) = run().await else {
        return ExitCode::SUCCESS;
    };
    eprintln!("error: {err}");
    if let fairlock::Error::Connect { endpoints, .. } = &err {
        eprintln!(
            "No etcd answered at {endpoints}. Start one (`etcd`, or \
             `docker compose -f etcd-compose.yml up -d` in this repository), \
             or point FAIRLOCK_ENDPOINTS at yours."
        );
    }
    ExitCode::FAILURE
}
