//! `fairlock leader`: who leads an election, once or at every change.

use std::io::Write as _;
use std::time::SystemTime;

use fairlock::{BackendConfig, Elector, Key, Leader};

use crate::args::election_args::LeaderArgs;
use crate::elect::{connect, usage_or};
use crate::exit::report;

pub async fn run(config: BackendConfig, a: LeaderArgs) -> u8 {
    let name = Key::from(a.name.as_str());
    if let Err(e) = name.validate() {
        report(&e);
        return crate::exit::USAGE;
    }
    let elector = match connect(&config).await {
        Ok(elector) => elector,
        Err(e) => {
            report(&e);
            return usage_or(&e);
        }
    };
    let show = |state: Option<&Leader>| {
        let line = if a.json {
            json(&name, state)
        } else {
            text(&name, state)
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
    };
    let code = if a.watch {
        follow(&*elector, &name, show).await
    } else {
        match elector.leader(&name).await {
            Ok(state) => {
                show(state.as_ref());
                0
            }
            Err(e) => {
                report(&e);
                usage_or(&e)
            }
        }
    };
    let _ = elector.close().await;
    code
}

/// Shows the leader, then every change, until Ctrl-C or a closed stdout
/// (exit 0), or a failure (reported, with its exit code).
async fn follow(elector: &dyn Elector, name: &Key, show: impl Fn(Option<&Leader>) -> bool) -> u8 {
    let mut changes = match elector.observe(name).await {
        Ok(changes) => changes,
        Err(e) => {
            report(&e);
            return usage_or(&e);
        }
    };
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = &mut ctrl_c => return 0,
            state = changes.next() => match state {
                Ok(state) if show(state.as_ref()) => {}
                Ok(_) => return 0, // stdout closed: nobody is watching
                Err(e) => {
                    report(&e);
                    return usage_or(&e);
                }
            },
        }
    }
}

/// `web: 10.0.0.7:80 (term 42, host:pid, leading for 3.2s)`, or
/// `web: no leader`.
fn text(name: &Key, state: Option<&Leader>) -> String {
    match state {
        None => format!("{name}: no leader"),
        Some(l) => {
            let leading = l
                .since
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .map_or("?".into(), |d| format!("{:.1}s", d.as_secs_f64()));
            format!(
                "{name}: {} (term {}, {}, leading for {leading})",
                String::from_utf8_lossy(&l.value),
                l.fencing_token,
                l.owner.describe()
            )
        }
    }
}

/// One JSON object: the name, and the leader or `null`.
fn json(name: &Key, state: Option<&Leader>) -> String {
    let ms = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    let leader = state.map(|l| {
        serde_json::json!({
            "value": String::from_utf8_lossy(&l.value),
            "token": l.fencing_token,
            "pid": l.owner.pid,
            "host": l.owner.host,
            "since_ms": l.since.map(ms),
        })
    });
    serde_json::json!({ "name": name.as_str(), "leader": leader }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_name_the_leader_or_nobody() {
        let name = Key::from("web");
        assert_eq!(text(&name, None), "web: no leader");
        assert_eq!(json(&name, None), r#"{"leader":null,"name":"web"}"#);
    }
}
