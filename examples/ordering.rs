//! Fair ordering across processes: N copies of this program queue on one
//! lock, and the lock is granted in the order etcd saw them arrive.
//!
//! ```text
//! cargo run --example ordering                # 5 processes, fair
//! cargo run --example ordering -- 8 --unfair  # 8 processes, unfair
//! ```
//!
//! The parent takes the lock first, starts the children (each calls
//! `lock` on the same key and waits), reads the queue from etcd until all
//! of them are in it (their arrival order), then releases. Each child
//! prints its fencing token while it holds the lock; tokens grow with
//! every grant, so sorting by token gives the grant order. A fair lock
//! grants in arrival order and the parent fails if it did not; an unfair
//! one promises no order. etcd comes from `FAIRLOCK_ENDPOINTS` (default
//! 127.0.0.1:2379).

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use fairlock::etcd::{EtcdConfig, EtcdLocker};
use fairlock::{Context, Error, Key, Locker};

type BoxResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A child: wait for the lock, report the grant while holding it.
async fn child(index: usize, key: Key, fair: bool) -> BoxResult<()> {
    let locker = EtcdLocker::connect(EtcdConfig::from_env()?, fair).await?;
    let ctx = Context::background().with_timeout(Duration::from_secs(60));
    let guard = locker.lock(&ctx, &key).await?;
    println!("granted {index} {}", guard.fencing_token());
    tokio::time::sleep(Duration::from_millis(20)).await;
    guard.unlock().await?;
    locker.close().await?;
    Ok(())
}

/// The parent: hold the lock, let the children queue, release, compare.
async fn parent(processes: usize, fair: bool) -> BoxResult<()> {
    let mode = if fair { "fair" } else { "unfair" };
    let locker = EtcdLocker::connect(EtcdConfig::from_env()?, fair).await?;
    let key = Key::from(format!("ordering-example-{}", std::process::id()));
    let gate = locker.lock(&Context::background(), &key).await?;
    println!("holding {key}; starting {processes} {mode} processes that wait for it");

    let exe = std::env::current_exe()?;
    let mut children: Vec<Child> = (0..processes)
        .map(|i| {
            let mut cmd = Command::new(&exe);
            cmd.args(["--child", &i.to_string(), key.as_str(), mode]);
            cmd.stdout(Stdio::piped()).spawn()
        })
        .collect::<Result<_, _>>()?;
    let pids: Vec<u32> = children.iter().map(Child::id).collect();

    // The queue in etcd's order (create revisions) is the arrival order.
    let started = Instant::now();
    let arrival: Vec<usize> = loop {
        let status = locker.status(Some(&key)).await?;
        let queue: Vec<usize> = status
            .iter()
            .flat_map(|lock| &lock.waiters)
            .filter_map(|w| pids.iter().position(|&p| Some(p) == w.owner.pid))
            .collect();
        if queue.len() == processes {
            break queue;
        }
        for c in &mut children {
            if let Some(exit) = c.try_wait()? {
                return Err(format!("a child exited before queueing: {exit}").into());
            }
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err("the children did not all queue within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!("arrival order (etcd's queue): {}", names(&arrival));
    gate.unlock().await?;

    let mut grants: Vec<(u64, usize)> = Vec::new();
    for c in children {
        let out = c.wait_with_output()?;
        if !out.status.success() {
            return Err(format!("a child failed: {}", out.status).into());
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut words = line.split_whitespace().skip(1);
            if let (Some(i), Some(t)) = (words.next(), words.next()) {
                grants.push((t.parse()?, i.parse()?));
            }
        }
    }
    grants.sort_unstable();
    for (token, i) in &grants {
        println!(
            "  granted child {i} (pid {}) with fencing token {token}",
            pids[*i]
        );
    }
    let order: Vec<usize> = grants.iter().map(|&(_, i)| i).collect();
    println!("grant order:                  {}", names(&order));
    let out_of_order = order.iter().zip(&arrival).filter(|(g, a)| g != a).count();
    locker.close().await?;
    if out_of_order == 0 {
        println!("{mode} mode granted all {processes} requests in arrival order");
    } else if fair {
        return Err(format!(
            "fair mode granted {out_of_order} of {processes} requests out of arrival order"
        )
        .into());
    } else {
        println!("{mode} mode granted {out_of_order} of {processes} requests out of arrival order");
    }
    Ok(())
}

fn names(order: &[usize]) -> String {
    order
        .iter()
        .map(|i| format!("child {i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [flag, index, key, mode] if flag == "--child" => match index.parse() {
            Ok(index) => child(index, Key::from(key.as_str()), mode == "fair").await,
            Err(e) => Err(e.into()),
        },
        _ => {
            let fair = !args.iter().any(|a| a == "--unfair");
            let count = args
                .iter()
                .find(|a| !a.starts_with("--"))
                .map(|n| n.parse());
            match count.unwrap_or(Ok(5)) {
                Ok(n) if n > 0 => parent(n, fair).await,
                _ => Err("usage: ordering [PROCESSES] [--unfair]".into()),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            if let Some(Error::Connect { endpoints, .. }) = err.downcast_ref::<Error>() {
                eprintln!(
                    "No etcd answered at {endpoints}. Start one (`etcd`), or point \
                     FAIRLOCK_ENDPOINTS at yours."
                );
            }
            ExitCode::FAILURE
        }
    }
}
