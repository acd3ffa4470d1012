//! The `fairlock` command: run a command under a distributed lock, see who
//! holds what, watch the ordering demo.
//!
//! - `args.rs`: the command line (clap), with in `args/` the options of
//!   `fairlock lock` (`lock_args.rs`), the command lines of `elect` and
//!   `leader` (`election_args.rs`) and the long help texts (`help.rs`,
//!   which document the exit codes).
//! - `logging.rs`: `-v`/`RUST_LOG` tracing output on stderr.
//! - `backend.rs`: etcd or Redis, by the endpoints' scheme, behind one face.
//! - `child.rs`: running the command while a lock or leadership is held
//!   (signals passed on, SIGTERM on loss, the exit code).
//! - `lock.rs`: `fairlock lock`; `elect.rs`: `fairlock elect`, the same
//!   for a leader; `leader.rs`: `fairlock leader`.
//! - `status.rs`: `fairlock status`, with in `status/` `status --watch`
//!   (`watch.rs`) and the text both show for holders' ages and the queue
//!   (`view.rs`).
//! - `exit.rs`: the exit codes, and how an error is reported on stderr.
//! - `demo.rs`: `fairlock demo`, with in `demo/` its workers, judge and
//!   table, and `svg.rs` drawing its timeline.

mod args;
mod backend;
mod child;
mod demo;
mod elect;
mod exit;
mod leader;
mod lock;
mod logging;
mod status;

use std::process::ExitCode;

use fairlock::BackendConfig;

use args::{Command, Global};

fn main() -> ExitCode {
    let cli = match args::parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(args::report(&e)),
    };
    let global = cli.global;
    logging::init(global.verbose);
    let code = match cli.command {
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = args::Cli::command();
            clap_complete::generate(shell, &mut command, "fairlock", &mut std::io::stdout());
            0
        }
        Command::Lock(a) => with_config(&global, |config| lock::run(config, a)),
        Command::Status(a) => with_config(&global, |config| status::run(config, a)),
        Command::Elect(a) if a.listen => {
            with_config(&global, |config| leader::run(config, a.listening()))
        }
        Command::Elect(a) => with_config(&global, |config| elect::run(config, a)),
        Command::Leader(a) => with_config(&global, |config| leader::run(config, a)),
        Command::Demo(a) => with_config(&global, |config| demo::run(config, a)),
    };
    ExitCode::from(code)
}

/// Builds the backend configuration (environment, then flags; the
/// endpoints' scheme picks etcd or Redis), checks it, and runs `f` on a
/// fresh runtime.
fn with_config<F, Fut>(global: &Global, f: F) -> u8
where
    F: FnOnce(BackendConfig) -> Fut,
    Fut: std::future::Future<Output = u8>,
{
    let config = match config(global) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("fairlock: {e}");
            return exit::USAGE;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fairlock: cannot start the async runtime: {e}");
            return exit::UNAVAILABLE;
        }
    };
    let code = rt.block_on(f(config));
    // Background releases and lease revokes get a moment; none may hold the
    // process open.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    code
}

fn config(global: &Global) -> fairlock::Result<BackendConfig> {
    // --endpoints replaces FAIRLOCK_ENDPOINTS; the rest of the environment
    // still applies.
    let endpoints = global.endpoints.clone().unwrap_or_else(|| {
        std::env::var("FAIRLOCK_ENDPOINTS")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| fairlock::etcd::DEFAULT_ENDPOINT.to_string())
    });
    let mut config = BackendConfig::from_endpoints(endpoints.split(','))?;
    if let Ok(prefix) = std::env::var("FAIRLOCK_PREFIX") {
        config = config.with_prefix(prefix);
    }
    if let Ok(ttl) = std::env::var("FAIRLOCK_TTL") {
        let ttl = fairlock::parse_duration(&ttl)
            .map_err(|e| fairlock::Error::InvalidConfig(format!("FAIRLOCK_TTL={ttl:?}: {e}")))?;
        config = config.with_ttl(ttl);
    }
    if let Some(prefix) = &global.prefix {
        config = config.with_prefix(prefix.clone());
    }
    // Flags replace their FAIRLOCK_* variables one by one.
    let mut access = fairlock::Access::from_env();
    let path = |flag: &Option<String>| flag.as_ref().map(std::path::PathBuf::from);
    access.cacert = path(&global.cacert).or(access.cacert);
    access.cert = path(&global.cert).or(access.cert);
    access.key = path(&global.client_key).or(access.key);
    access.user = global.user.clone().or(access.user);
    config = config.with_access(access)?;
    if let Some(ttl) = global.ttl {
        config = config.with_ttl(ttl);
    }
    if let Some(timeout) = global.connect_timeout {
        config = config.with_connect_timeout(timeout);
    }
    if let Some(layout) = global.layout {
        config = config.with_layout(layout)?;
    }
    if let BackendConfig::Redis(mut redis) = config {
        if let Some(acks) = global.replica_acks {
            redis = redis.with_replica_acks(acks);
        }
        if let Some(wait) = global.data_loss_wait {
            redis = redis.with_data_loss_wait(wait);
        }
        config = BackendConfig::Redis(redis);
    }
    config.validate()?;
    Ok(config)
}
