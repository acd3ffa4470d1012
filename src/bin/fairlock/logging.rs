//! Tracing output on stderr, turned on by `-v`/`-vv` or `RUST_LOG`.
//!
//! Without either, no subscriber is installed: the library's events then
//! cost a branch each, and stderr carries only the command's own messages.

use tracing_subscriber::EnvFilter;

/// Installs a stderr subscriber if asked for: `RUST_LOG` (e.g.
/// `fairlock=debug`) when set, else `-v` for fairlock's debug events and
/// `-vv` for the client libraries' too.
pub fn init(verbose: u8) {
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|s| !s.trim().is_empty());
    let filter = match (from_env, verbose) {
        (Some(spec), _) => spec,
        (None, 0) => return,
        (None, 1) => "warn,fairlock=debug".to_owned(),
        (None, _) => "debug".to_owned(),
    };
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("fairlock: ignoring RUST_LOG={filter:?}: {e}");
        EnvFilter::new("warn")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true)
        .try_init();
}
