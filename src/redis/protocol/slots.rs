//! A Redis Cluster's hash slots, as the cluster computes them: which slot
//! a key is in, and a short hash tag that puts another key in that slot
//! (the epoch of a lock's slot, `epoch.rs`; the replicas of the slot's
//! master, `replicas.rs`).

use std::sync::LazyLock;

/// How many hash slots a cluster has.
pub(crate) const SLOTS: usize = 16384;

/// The hash slot of a Redis key: CRC16 (XMODEM) of its hash tag (the text
/// between the first `{` and the next `}`, if not empty), or of the whole
/// key, modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let hashed = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(hashed.as_bytes()) % 16384
}

/// The smallest number whose text hashes to the slot of the Redis key
/// `key`: as a hash tag `{<n>}` it puts another key in that slot.
pub(crate) fn slot_tag(key: &str) -> u32 {
    SLOT_TAGS[usize::from(slot(key))]
}

/// For each hash slot, the smallest number whose decimal text hashes to it
/// (found by trying 0, 1, 2, ... once, about 170,000 hashes).
static SLOT_TAGS: LazyLock<Vec<u32>> = LazyLock::new(|| {
    let mut tags = vec![u32::MAX; SLOTS];
    let mut left = tags.len();
    let mut n = 0u32;
    while left > 0 {
        let at = usize::from(slot(&n.to_string()));
        if tags[at] == u32::MAX {
            tags[at] = n;
            left -= 1;
        }
        n += 1;
    }
    tags
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // `CLUSTER KEYSLOT` on Redis 7: foo 12182, somekey 11058.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("somekey"), 11058);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("fairlock:{jobs}"), slot("jobs"));
        // An empty tag hashes the whole key.
        assert_eq!(
            slot("a{}b"),
            crc16::State::<crc16::XMODEM>::calculate(b"a{}b") % 16384
        );
    }

    #[test]
    fn a_slot_tag_hashes_to_the_keys_slot() {
        for key in [
            "p:{a}",
            "p:{jobs/export}",
            "p:{x}y}",
            "p:{ünïcode}",
            "plain",
        ] {
            let tagged = format!("p:_OWNERS_/epoch/{{{}}}", slot_tag(key));
            assert_eq!(slot(&tagged), slot(key), "{tagged} vs {key}");
        }
        assert!(SLOT_TAGS.iter().all(|t| *t != u32::MAX));
    }
}
