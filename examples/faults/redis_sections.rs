//! The Redis workers' [`Resource`] for the shared and election workloads
//! (`sections.rs`). Redis has no compare on the lock's own keys that a
//! write elsewhere could run under, so, as for the mutex
//! (`redis_worker.rs`), the resource fences: a script on the resource
//! server keeps, per lock key, the highest token of an exclusive section
//! (write lock, leadership) that wrote and the highest token of any
//! section that wrote, and refuses
//! - an exclusive section's write below the highest token of any write
//!   (a section granted after it wrote: it was not alone),
//! - a read section's write below the highest exclusive one's (a writer
//!   granted after it wrote),
//!
//! both answered `lost`. A permit's write is not fenced: at most `LIMIT`
//! holders may write at once, and a token order cannot tell a permit
//! over the limit from one whose elders released, so the permit checker
//! excuses no permit over the limit on Redis (`shared_check::permits`).
//! Applied writes are appended, in order, to a list per lock key
//! ([`data_key`]), which the checkers read as etcd's history is read.

use std::time::Duration;

use fairlock::LockGuard;
use redis::aio::MultiplexedConnection;

use crate::sections::Resource;
use crate::workload::Section;

/// `KEYS`: the list, the exclusive fence, the fence of any write;
/// `ARGV`: token, `x` (exclusive), `s` (shared) or `n` (not fenced), the
/// value. Returns -1 when refused, else the list's length.
const FENCED_PUT: &str = r"
local t = tonumber(ARGV[1])
local x = tonumber(redis.call('GET', KEYS[2]) or '0')
local any = tonumber(redis.call('GET', KEYS[3]) or '0')
if ARGV[2] == 'x' and t < any then return -1 end
if ARGV[2] == 's' and t < x then return -1 end
if ARGV[2] == 'x' then redis.call('SET', KEYS[2], ARGV[1]) end
if t > any then redis.call('SET', KEYS[3], ARGV[1]) end
return redis.call('RPUSH', KEYS[1], ARGV[3])
";

/// The list of the writes applied under `kind`'s lock key, beside the
/// mutex's counter `counter` on the resource server.
pub fn data_key(counter: &str, kind: Section) -> String {
    format!("{counter}:{}", kind.lock_key())
}

pub struct RedisResource {
    pub conn: MultiplexedConnection,
    pub counter: String,
    pub request_timeout: Duration,
    pub script: redis::Script,
}

impl RedisResource {
    pub fn new(conn: MultiplexedConnection, counter: &str, request_timeout: Duration) -> Self {
        RedisResource {
            conn,
            counter: counter.to_string(),
            request_timeout,
            script: redis::Script::new(FENCED_PUT),
        }
    }
}

impl Resource for RedisResource {
    async fn acq_fields(&self) -> String {
        String::new()
    }

    async fn write(&self, guard: &LockGuard, kind: Section, value: String) -> String {
        let list = data_key(&self.counter, kind);
        let mode = match kind {
            Section::Write | Section::Leader => "x",
            Section::Read => "s",
            Section::Permit => "n",
        };
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(list.as_str())
            .key(format!("{list}:fence:x"))
            .key(format!("{list}:fence:any"))
            .arg(guard.fencing_token())
            .arg(mode)
            .arg(value);
        let mut conn = self.conn.clone();
        let call = invocation.invoke_async::<i64>(&mut conn);
        match tokio::time::timeout(self.request_timeout, call).await {
            Ok(Ok(n)) if n >= 0 => "ok".to_string(),
            Ok(Ok(_)) => "lost".to_string(),
            Ok(Err(e)) => format!("err {e}"),
            Err(_) => "err no answer".to_string(),
        }
    }

    async fn after_loss(&self, _: &LockGuard, _: Section, _: u64, _: &mut u64) -> String {
        String::new()
    }
}
