//! "fairlock's scripts by hand": the floor of fairlock's own shape. The
//! acquire and release scripts that fairlock sends on an uncontended
//! `lock` + `unlock`, with the same `KEYS` and `ARGV` (built by the crate
//! itself, `RedisLocker::hand_cycle`, from the locker the fairlock row
//! uses), sent with `EVALSHA` from a bare `MultiplexedConnection`: one
//! connection, no watchdog, no task, no timeout, no queue registration.
//! What fairlock costs above this row is its client; what this row costs
//! above the SET NX + compare-and-del floor is the scripts' own work.
//!
//! How it is checked that both send the same: before the rounds,
//! [`check_same_commands`] turns on Redis' slow log for every command
//! (`slowlog-log-slower-than 0`), runs one real `lock` + `unlock` and one
//! hand cycle, and compares what the server logged for each, command by
//! command: each `EVALSHA` (the script's SHA1, the number of keys, the
//! keys and every argument) and the commands the scripts ran, with the
//! per-attempt parts (uuids, the owner's timestamp, the fencing token)
//! masked; the two SHA1s must be those of `HandCycle::script_hashes`.
//! The bench stops if they differ (an extra command, another script,
//! another argument), as it did when the hand cycle was made to send
//! `joined` = 1 for a trial (the acquire then took its general path,
//! `ZSCORE`, `ZREM` and `DEL` among its commands). On one server it logs,
//! for both, 2 `EVALSHA`s (3 keys and 9 arguments, 3 keys and 4
//! arguments) and the 9 commands the scripts run.

use std::sync::Arc;

use fairlock::redis::{HandCycle, RedisLocker};
use fairlock::{Context, Key, Locker};
use redis::aio::MultiplexedConnection;

use crate::workloads::{Fut2, Res};

/// One hand cycle: the acquire script (granted: `{1, token}`), then the
/// release script with that token (released: 1).
pub fn cycle(c: MultiplexedConnection, hand: HandCycle) -> impl FnMut() -> Fut2<()> {
    let hand = Arc::new(hand);
    move || {
        let (mut c, hand) = (c.clone(), Arc::clone(&hand));
        Box::pin(async move {
            let token = acquire(&mut c, &hand).await?;
            release(&mut c, &hand, token).await
        })
    }
}

async fn acquire(c: &mut MultiplexedConnection, hand: &HandCycle) -> Res<i64> {
    let (granted, token): (i64, i64) = hand.acquire().invoke_async(c).await?;
    if granted != 1 {
        return Err(format!("hand: not granted (pttl {token})").into());
    }
    Ok(token)
}

async fn release(c: &mut MultiplexedConnection, hand: &HandCycle, token: i64) -> Res<()> {
    let released: i64 = hand.release(token).invoke_async(c).await?;
    if released != 1 {
        return Err(format!("hand: release answered {released}").into());
    }
    Ok(())
}

/// One slow log entry: id, time, microseconds, the command's words, the
/// client's address and name.
type Entry = (i64, i64, i64, Vec<String>, String, String);

/// The commands the server logged while `run` ran, oldest first, with the
/// per-attempt parts masked (see [`mask`]); the slow log's own and
/// `CONFIG` commands left out.
async fn logged(
    admin: &mut MultiplexedConnection,
    run: impl Future<Output = Res<u64>>,
) -> Res<Vec<Vec<String>>> {
    let () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(admin)
        .await?;
    let token = run.await?.to_string();
    let log: Vec<Entry> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(admin)
        .await?;
    Ok(log
        .into_iter()
        .rev()
        .map(|e| e.3)
        .filter(|words| !matches!(words[0].to_uppercase().as_str(), "SLOWLOG" | "CONFIG"))
        .map(|words| words.iter().map(|w| mask(w, &token)).collect())
        .collect())
}

/// A word with what differs between two attempts masked: the fencing
/// token (a run of digits), runs of 32 or 33 hex digits (uuids: the key
/// prefix, waiter ids, `f` and a uuid, owner ids; a locker's own id stays
/// the same but is masked alike; not the 40 of a script's SHA1) and of 13
/// or more decimal digits (the owner value's `at=` milliseconds).
fn mask(word: &str, token: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run == token {
            out.push_str("<token>");
        } else if run.len() == 32 || run.len() == 33 {
            out.push_str("<hex>");
        } else if run.len() >= 13 && run.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str("<ms>");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for ch in word.chars() {
        if ch.is_ascii_hexdigit() && !ch.is_ascii_uppercase() {
            run.push(ch);
        } else {
            flush(&mut run, &mut out);
            out.push(ch);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// Checks on the server at `url` that one `lock` + `unlock` of `key` by
/// `locker` and one cycle of `hand` (its hand cycle on the same key, sent
/// on `c`) send the same commands; see the module docs.
pub async fn check_same_commands(
    url: &str,
    locker: &RedisLocker,
    key: &Key,
    hand: &HandCycle,
    mut c: MultiplexedConnection,
) -> Res<()> {
    let mut admin = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let before: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-log-slower-than")
        .query_async(&mut admin)
        .await?;
    let config = admin.clone();
    let set = |value: String| {
        let mut admin = config.clone();
        async move {
            let () = redis::cmd("CONFIG")
                .arg("SET")
                .arg("slowlog-log-slower-than")
                .arg(value)
                .query_async(&mut admin)
                .await?;
            Res::Ok(())
        }
    };
    set("0".into()).await?;
    let real = logged(&mut admin, async {
        let guard = locker.lock(&Context::background(), key).await?;
        let token = guard.fencing_token();
        guard.unlock().await?;
        Ok(token)
    })
    .await;
    let by_hand = logged(&mut admin, async {
        let token = acquire(&mut c, hand).await?;
        release(&mut c, hand, token).await?;
        Ok(u64::try_from(token)?)
    })
    .await;
    set(before.get(1).cloned().unwrap_or_else(|| "10000".into())).await?;
    let (real, by_hand) = (real?, by_hand?);
    let [acquire_sha, release_sha] = HandCycle::script_hashes();
    // The slow log has the scripts' own commands too, each before its
    // script's EVALSHA.
    let scripts: Vec<&Vec<String>> = real.iter().filter(|w| w[0] == "EVALSHA").collect();
    let shas: Vec<&str> = scripts.iter().map(|w| w[1].as_str()).collect();
    if real != by_hand || shas != [acquire_sha, release_sha] {
        return Err(format!(
            "the hand cycle does not send what fairlock sends (key {key}):\n  fairlock: \
             {real:?}\n  by hand:  {by_hand:?}"
        )
        .into());
    }
    eprintln!(
        "bench: {key}: fairlock and its scripts by hand send the same {} (the scripts \
         running {} commands)",
        scripts
            .iter()
            .map(|w| format!(
                "{} {} {} keys + {} args",
                w[0],
                &w[1][..8],
                w[2],
                w.len() - 6
            ))
            .collect::<Vec<_>>()
            .join(", "),
        real.len() - scripts.len()
    );
    Ok(())
}
