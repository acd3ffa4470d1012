//! The long help texts: what `fairlock --help` and `fairlock lock --help`
//! show after the options.

/// What `fairlock --help` shows after the options.
pub const AFTER_HELP: &str = "\
DURATIONS: 500ms, 10s, 2m, 1h 30m, or plain seconds.

ENVIRONMENT:
    FAIRLOCK_ENDPOINTS, FAIRLOCK_PREFIX, FAIRLOCK_TTL,
    FAIRLOCK_CONNECT_TIMEOUT, FAIRLOCK_CACERT, FAIRLOCK_CERT, FAIRLOCK_CLIENT_KEY,
    FAIRLOCK_USER, FAIRLOCK_PASSWORD, FAIRLOCK_REPLICA_ACKS,
    FAIRLOCK_DATA_LOSS_WAIT: defaults for the options of the same name
    (FAIRLOCK_PASSWORD: the --user's password). RUST_LOG (e.g. fairlock=debug): log filter for -v output.

EXAMPLES:
    fairlock lock backups -- ./backup.sh --full
    fairlock lock accounts/17 accounts/42 -- ./transfer.sh
    fairlock --endpoints 10.0.0.1:2379,10.0.0.2:2379 lock -n --ttl 30s db-migrate -- make migrate
    fairlock lock --timeout 2m --conflict-exit-code 0 nightly -- ./report.sh
    fairlock status
    fairlock status backups --json
    fairlock status --watch
    fairlock elect scheduler -- ./scheduler --serve
    fairlock leader scheduler --watch
    fairlock --endpoints redis://127.0.0.1:6379 lock backups -- ./backup.sh
    fairlock demo --processes 3 --tasks 8 --svg ordering.svg
    fairlock completions bash > /etc/bash_completion.d/fairlock";

/// What `fairlock lock --help` shows after the options.
pub const LOCK_AFTER_HELP: &str = "\
CMD gets FAIRLOCK_KEY and FAIRLOCK_TOKEN (the fencing token) in its environment.
Several keys (`fairlock lock K1 K2 -- CMD`) are held all at once, or none
(not on Redlock); CMD also gets FAIRLOCK_KEYS and FAIRLOCK_TOKENS, one per line.

EXIT STATUS:
    CMD's own exit status (128+N when CMD was killed by signal N), or
      2   usage error
     69   etcd or Redis unreachable or failing, or TLS failed (untrusted or
          expired certificate, wrong server name, client certificate missing)
     77   authentication failed (wrong user or password) or permission denied
          (the user's etcd role or Redis ACL does not cover the prefix)
     75   the lock was held (--nonblock) or the wait timed out (--timeout);
          settable with --conflict-exit-code
     76   the lock was lost while CMD ran (no renewal for the TTL, the lease
          ended, or the lock key deleted or taken over: the message says
          which): CMD got SIGTERM (SIGKILL after --kill-after)
    127   CMD not found; 126 CMD not executable
    130, 143  fairlock got SIGINT or SIGTERM while waiting (queue entry removed)

EXAMPLES:
    fairlock lock backups -- ./backup.sh --full
    fairlock lock accounts/17 accounts/42 -- ./transfer.sh
    fairlock lock -n --ttl 30s db-migrate -- make migrate
    fairlock lock --timeout 2m --conflict-exit-code 0 nightly -- ./report.sh";
