//! The checks of one key used by `lock` and by readers: `lock` is the
//! write lock of a key that has readers, and a read lock of a key held as
//! a mutex waits for it.

use super::{Backend, patient};
use crate::Key;

/// `lock` and `try_lock` of a key held by a reader are that key's write
/// lock: `try_lock` answers `None`, `lock` waits until the reader leaves
/// and then holds the key alone, with a greater token; a reader then
/// waits for it. (Its place in the line is taken when it joins the line,
/// after its mutex attempt was refused: a reader arriving meanwhile may
/// come first.) Nothing is left behind.
///
/// # Panics
/// When `lock` is refused or granted beside a reader.
///
/// # Examples
/// ```
/// # async fn example(backend: &impl fairlock::conformance::Backend) {
/// fairlock::conformance::lock_is_the_write_lock_of_a_read_key(backend).await;
/// # }
/// ```
pub async fn lock_is_the_write_lock_of_a_read_key(b: &impl Backend) {
    if !b.supports_shared() {
        return;
    }
    let key = Key::from("mixed");
    for fair in [true, false] {
        let (reader, writer, late) = (b.locker(true), b.locker(fair), b.locker(true));
        let read = reader.read_lock(&patient(), &key).await.expect("read lock");
        let refused = writer.try_lock(&key).await.expect("try_lock of a read key");
        assert!(refused.is_none(), "try_lock granted beside a reader");
        let writing = {
            let (writer, key) = (std::sync::Arc::clone(&writer), key.clone());
            tokio::spawn(async move { writer.lock(&patient(), &key).await })
        };
        b.wait_queued(&key, 2).await;
        assert!(!writing.is_finished(), "lock granted beside a reader");
        let first = read.fencing_token();
        read.unlock().await.expect("unlock");
        let write = writing.await.expect("join").expect("lock");
        assert!(
            write.fencing_token() > first,
            "the writer's token must grow"
        );
        assert!(
            late.try_read_lock(&key)
                .await
                .expect("try_read_lock")
                .is_none()
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
///
/// # Examples
/// ```
/// # async fn example(backend: &impl fairlock::conformance::Backend) {
/// fairlock::conformance::read_lock_waits_for_the_mutex(backend).await;
/// # }
/// ```
pub async fn read_lock_waits_for_the_mutex(b: &impl Backend) {
    if !b.supports_shared() {
        return;
    }
    let key = Key::from("mixed");
    let (holder, reader, writer) = (b.locker(true), b.locker(true), b.locker(false));
    let mutex = holder.lock(&patient(), &key).await.expect("lock");
    assert!(
        reader
            .try_read_lock(&key)
            .await
            .expect("try_read_lock")
            .is_none()
    );
    assert!(
        reader
            .try_write_lock(&key)
            .await
            .expect("try_write_lock")
            .is_none()
    );
    let refused = reader.try_acquire_permits(&key, 1, 2).await.map(drop);
    assert!(
        matches!(refused, Err(crate::Error::InvalidKey { .. })),
        "a semaphore of a mutex's key: {refused:?}"
    );
    let reading = {
        let (reader, key) = (std::sync::Arc::clone(&reader), key.clone());
        tokio::spawn(async move { reader.read_lock(&patient(), &key).await })
    };
    let first = mutex.fencing_token();
    mutex.unlock().await.expect("unlock");
    let read = reading
        .await
        .expect("join")
        .expect("read lock after the mutex");
    assert!(read.fencing_token() > first, "the reader's token must grow");
    let writing = {
        let (writer, key) = (std::sync::Arc::clone(&writer), key.clone());
        tokio::spawn(async move { writer.lock(&patient(), &key).await })
    };
    b.wait_queued(&key, 2).await;
    assert!(!writing.is_finished(), "lock granted beside a reader");
    let second = read.fencing_token();
    read.unlock().await.expect("unlock");
    let write = writing.await.expect("join").expect("lock");
    assert!(write.fencing_token() > second);
    write.unlock().await.expect("unlock");
    b.wait_clean().await;
    b.finish().await;
}
