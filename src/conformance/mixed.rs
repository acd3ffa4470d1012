//! The checks of one key used by `lock` and by readers: `lock` is the
//! write lock of a key that has readers, and a read lock of a key held as
//! a mutex waits for it.

use super::Backend;
use super::common::{assert_err, patient, refused, spawn};
use crate::{Error, Key, LockGuard};

/// `lock` and `try_lock` of a key held by a reader are that key's write
/// lock: `try_lock` answers `None`, `lock` waits until the reader leaves
/// and then holds the key alone, with a greater token; a reader then
/// waits for it. (Its place in the line is taken when it joins the line,
/// after its mutex attempt was refused: a reader arriving meanwhile may
/// come first.) Nothing is left behind.
///
/// # Panics
/// When `lock` is refused or granted beside a reader.
pub async fn lock_is_the_write_lock_of_a_read_key(b: &impl Backend) {
    if !b.supports_shared() {
        return;
    }
    let key = Key::from("mixed");
    for fair in [true, false] {
        let (reader, writer, late) = (b.locker(true), b.locker(fair), b.locker(true));
        let read = reader.read_lock(&patient(), &key).await.expect("read lock");
        let held = refused(writer.try_lock(&key)).await;
        assert!(held, "try_lock granted beside a reader");
        let write = lock_after_reader(b, &writer, &key, read).await;
        assert!(
            refused(late.try_read_lock(&key)).await,
            "a reader beside the lock"
        );
        write.unlock().await.expect("unlock");
        b.wait_clean().await;
    }
    b.finish().await;
}

/// A read lock (or write lock) of a key held as a mutex waits for it:
/// `try_read_lock` and `try_write_lock` answer `None`, `read_lock` returns
/// once the mutex is free and nobody waits for it, with a greater token;
/// a `lock` after that waits behind the reader as the key's write lock.
/// A semaphore of a mutex's key is still refused. Nothing is left behind.
///
/// # Panics
/// When a read lock is refused or granted beside the mutex.
pub async fn read_lock_waits_for_the_mutex(b: &impl Backend) {
    if !b.supports_shared() {
        return;
    }
    let key = Key::from("mixed");
    let (holder, reader, writer) = (b.locker(true), b.locker(true), b.locker(false));
    let mutex = holder.lock(&patient(), &key).await.expect("lock");
    assert!(refused(reader.try_read_lock(&key)).await, "try_read_lock");
    assert!(refused(reader.try_write_lock(&key)).await, "try_write_lock");
    let sem = reader.try_acquire_permits(&key, 1, 2).await;
    assert_err!(
        sem,
        Error::InvalidKey { .. },
        "a semaphore of a mutex's key"
    );
    let reading = spawn(&reader, &key, |reader, key| async move {
        reader.read_lock(&patient(), &key).await
    });
    let first = mutex.fencing_token();
    mutex.unlock().await.expect("unlock");
    let read = reading.await.expect("join").expect("read after the mutex");
    assert!(read.fencing_token() > first, "the reader's token must grow");
    let write = lock_after_reader(b, &writer, &key, read).await;
    write.unlock().await.expect("unlock");
    b.wait_clean().await;
    b.finish().await;
}

/// `writer`'s `lock` of `key` waits (in line with `read`) until `read` is
/// unlocked, then is granted with a greater token.
async fn lock_after_reader(
    b: &impl Backend,
    writer: &std::sync::Arc<dyn crate::Locker>,
    key: &Key,
    read: LockGuard,
) -> LockGuard {
    let writing = spawn(writer, key, |writer, key| async move {
        writer.lock(&patient(), &key).await
    });
    b.wait_queued(key, 2).await;
    assert!(!writing.is_finished(), "lock granted beside a reader");
    let first = read.fencing_token();
    read.unlock().await.expect("unlock");
    let write = writing.await.expect("join").expect("lock");
    assert!(
        write.fencing_token() > first,
        "the writer's token must grow"
    );
    write
}
