//! The check that `lock` is the write lock of a key that has readers.

use super::{Backend, patient};
use crate::Key;

/// `lock` and `try_lock` of a key held by a reader are that key's write
/// lock: `try_lock` answers `None`, `lock` waits in the key's line behind
/// the reader, and a reader arriving after it waits for it (fair order;
/// the writer is not starved); once the first reader leaves, the writer
/// holds the key alone, with a greater token, and the waiting reader gets
/// it after the writer. Nothing is left behind.
///
/// # Panics
/// When `lock` is refused, granted beside a reader, or overtaken.
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
        let reading = {
            let (late, key) = (std::sync::Arc::clone(&late), key.clone());
            tokio::spawn(async move { late.read_lock(&patient(), &key).await })
        };
        b.wait_queued(&key, 3).await;
        assert!(!writing.is_finished(), "lock granted beside a reader");
        assert!(!reading.is_finished(), "a reader overtook a waiting writer");
        let first = read.fencing_token();
        read.unlock().await.expect("unlock");
        let write = writing.await.expect("join").expect("lock");
        assert!(
            write.fencing_token() > first,
            "the writer's token must grow"
        );
        assert!(
            !reading.is_finished(),
            "a reader was granted beside the writer"
        );
        let second = write.fencing_token();
        write.unlock().await.expect("unlock");
        let read = reading.await.expect("join").expect("read lock");
        assert!(read.fencing_token() > second);
        read.unlock().await.expect("unlock");
        b.wait_clean().await;
    }
    b.finish().await;
}
