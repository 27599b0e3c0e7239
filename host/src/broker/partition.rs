//! Kafka's default partitioner for keyed records: `murmur2(key) & 0x7fffffff % partitions`, as
//! the Java client (and librdkafka's `murmur2_random`) computes it, so outboxd puts a key in the
//! same partition as the other producers of a topic do.

/// The partition of a record with `key` in a topic of `partitions` partitions (at least 1).
pub fn kafka_partition(key: &[u8], partitions: i32) -> i32 {
    let positive = murmur2(key) & 0x7fff_ffff;
    positive % partitions.max(1)
}

/// Kafka's `Utils.murmur2` (MurmurHash2, seed `0x9747b28c`), as a signed 32-bit value.
fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Kafka's own UtilsTest vectors.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn partitions_are_in_range_and_stable() {
        for key in [&b""[..], b"room-1", b"room-2", b"\xff\xfe"] {
            let p = kafka_partition(key, 6);
            assert!((0..6).contains(&p));
            assert_eq!(p, kafka_partition(key, 6));
        }
        assert_eq!(kafka_partition(b"room-1", 1), 0);
    }
}
