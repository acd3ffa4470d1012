//! The auto-trait bounds of the public API, asserted at compile time: the
//! futures of the `Locker` methods are `Send` (so a lock can be taken inside
//! `tokio::spawn`), `LockGuard` is `Send + Sync + 'static` (it can be moved
//! into a task or shared behind an `Arc`), `Arc<dyn Locker>` is `Send +
//! Sync`, and `Error` is `Send + Sync + 'static` (it fits in a boxed error
//! crossing threads).
//!
//! A bound that stops holding is a compile error in this file, naming the
//! type and the missing bound; the functions below are never called.
#![allow(dead_code)]

use std::sync::Arc;

use fairlock::{Context, Error, Key, LockGuard, Locker};

fn send<T: Send>(_: &T) {}
fn send_sync<T: Send + Sync>() {}
fn send_sync_static<T: Send + Sync + 'static>() {}

/// The futures of every `Locker` method, through the trait object.
fn dyn_locker_futures_are_send(locker: &dyn Locker, ctx: &Context, key: &Key, guard: LockGuard) {
    send(&locker.lock(ctx, key));
    send(&locker.try_lock(key));
    send(&locker.unlock(guard));
}

/// The same through a generic `L: Locker`, as a backend's own type is used.
fn locker_futures_are_send<L: Locker>(locker: &L, ctx: &Context, key: &Key, guard: LockGuard) {
    send(&locker.lock(ctx, key));
    send(&locker.try_lock(key));
    send(&locker.unlock(guard));
}

/// The guard's own async methods.
fn guard_futures_are_send(guard: LockGuard, watched: &LockGuard) {
    send(&watched.lost());
    send(&guard.unlock());
}

fn types_are_send_sync() {
    send_sync_static::<LockGuard>();
    send_sync::<Arc<dyn Locker>>();
    send_sync_static::<Error>();
}

/// Each backend's locker type with the generic check above.
fn backends_are_lockers(
    memory: &fairlock::memory::MemoryLocker,
    #[cfg(feature = "etcd")] etcd: &fairlock::etcd::EtcdLocker,
    #[cfg(feature = "redis")] redis: &fairlock::redis::RedisLocker,
    ctx: &Context,
    key: &Key,
    guards: [LockGuard; 3],
) {
    let [a, _b, _c] = guards;
    locker_futures_are_send(memory, ctx, key, a);
    #[cfg(feature = "etcd")]
    locker_futures_are_send(etcd, ctx, key, _b);
    #[cfg(feature = "redis")]
    locker_futures_are_send(redis, ctx, key, _c);
    send_sync_static::<fairlock::memory::MemoryLocker>();
    #[cfg(feature = "etcd")]
    send_sync_static::<fairlock::etcd::EtcdLocker>();
    #[cfg(feature = "redis")]
    send_sync_static::<fairlock::redis::RedisLocker>();
}

/// The bounds above are checked when this file compiles; this test only
/// makes the file show up in a test run.
#[test]
fn bounds_hold() {
    let _: fn() = types_are_send_sync;
}

/// Leader election: the `Elector` futures (through the trait object and on
/// each backend's type), the leadership's own, and its types: a campaign
/// can run inside `tokio::spawn`, a `Leadership` and a `LeaderWatch` can
/// move into a task.
fn election_futures_are_send(
    elector: &dyn fairlock::Elector,
    memory: &fairlock::memory::MemoryElector,
    #[cfg(feature = "etcd")] etcd: &fairlock::etcd::EtcdElector,
    (ctx, key): (&Context, &Key),
    (leadership, watched): (fairlock::Leadership, &fairlock::Leadership),
    watch: &mut fairlock::LeaderWatch,
) {
    use fairlock::Elector;
    send(&elector.campaign(ctx, key, b"v"));
    send(&elector.leader(key));
    send(&elector.observe(key));
    send(&memory.campaign(ctx, key, b"v"));
    #[cfg(feature = "etcd")]
    send(&etcd.campaign(ctx, key, b"v"));
    send(&watched.lost());
    send(&watched.proclaim(b"v"));
    send(&watch.next());
    send(&leadership.resign());
    send_sync_static::<fairlock::Leadership>();
    send_sync_static::<fairlock::LeaderWatch>();
    send_sync_static::<fairlock::Leader>();
    send_sync::<Arc<dyn fairlock::Elector>>();
}
