//! Which worker owns the session of an `(application, shard)` pair.

/// splitmix64 finaliser: a cheap, well-mixed bijection on `u64`.
#[inline]
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Worker owning `(application_id, shard_id)`: `splitmix64(app ^ rotl(shard, 32)) % workers`.
///
/// Stable across processes and releases (session ids and routing depend on
/// it: do not change). `workers == 0` is treated as 1.
#[inline]
pub fn worker_for(application_id: u64, shard_id: u32, workers: u32) -> u32 {
    let workers = u64::from(workers.max(1));
    let h = splitmix64(application_id ^ u64::from(shard_id).rotate_left(32));
    // The remainder is < workers <= u32::MAX, so the cast is lossless.
    (h % workers) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_vectors() {
        // splitmix64 reference: seed 0 -> first output 0xE220A8397B1DCDAF.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        let got: Vec<u32> = [
            (0u64, 0u32, 8u32),
            (175928847299117063, 0, 8),
            (175928847299117063, 1, 8),
            (175928847299117063, 2, 3),
            (613425648685547541, 15, 2),
            (613425648685547541, 1000, 64),
        ]
        .iter()
        .map(|&(a, s, w)| worker_for(a, s, w))
        .collect();
        assert_eq!(got, VECTORS);
    }

    const VECTORS: [u32; 6] = [7, 3, 7, 1, 1, 8];

    #[test]
    fn zero_workers_is_one() {
        assert_eq!(worker_for(123, 4, 0), 0);
        assert_eq!(worker_for(u64::MAX, u32::MAX, 1), 0);
    }

    #[test]
    fn balance() {
        for workers in [2u32, 3, 8] {
            let mut counts = vec![0u32; workers as usize];
            let mut total = 0u32;
            // 1000 snowflake-like application ids x 100 shards = 100k pairs.
            for app in 0..1000u64 {
                let app_id = 175928847299117063u64.wrapping_add(app.wrapping_mul(1_234_567) << 22);
                for shard in 0..100u32 {
                    counts[worker_for(app_id, shard, workers) as usize] += 1;
                    total += 1;
                }
            }
            assert_balanced(&counts, total);
        }
    }

    #[test]
    fn balance_one_big_application() {
        // One bot with the maximum number of shards.
        for workers in [2u32, 3, 8] {
            let mut counts = vec![0u32; workers as usize];
            for shard in 0..65_535u32 {
                counts[worker_for(613425648685547541, shard, workers) as usize] += 1;
            }
            assert_balanced(&counts, 65_535);
        }
    }

    fn assert_balanced(counts: &[u32], total: u32) {
        let fair = f64::from(total) / counts.len() as f64;
        for (w, &c) in counts.iter().enumerate() {
            let dev = (f64::from(c) - fair).abs() / fair;
            assert!(
                dev <= 0.05,
                "{} workers, worker {w}: {c} vs fair {fair}",
                counts.len()
            );
        }
    }
}
