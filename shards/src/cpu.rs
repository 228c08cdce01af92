//! CPU cores available to the process and pinning of worker threads.

/// Ids of the cores this process may run on (its affinity mask), ascending.
/// Empty if they cannot be determined.
pub fn available_cores() -> Vec<usize> {
    let mut ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Pins the calling thread to `core`; `false` if the OS refused.
pub fn pin_current_thread(core: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: core })
}

/// Core for each of `workers` workers: worker `i` gets `available_cores()[i % n]`.
/// Empty if the available cores cannot be determined (run unpinned then).
pub fn worker_cores(workers: usize) -> Vec<usize> {
    worker_cores_from(&available_cores(), workers)
}

/// [`worker_cores`] over an explicit core list.
pub fn worker_cores_from(cores: &[usize], workers: usize) -> Vec<usize> {
    if cores.is_empty() {
        return Vec::new();
    }
    (0..workers).map(|i| cores[i % cores.len()]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin() {
        assert_eq!(worker_cores_from(&[2, 3], 5), vec![2, 3, 2, 3, 2]);
        assert_eq!(worker_cores_from(&[0, 1, 2, 3], 2), vec![0, 1]);
        assert!(worker_cores_from(&[], 4).is_empty());
        assert!(worker_cores_from(&[0], 0).is_empty());
    }

    #[test]
    fn available_and_pin() {
        let cores = available_cores();
        assert!(!cores.is_empty(), "sched_getaffinity should work on Linux");
        assert_eq!(worker_cores(cores.len() * 2).len(), cores.len() * 2);
        // Pin a scratch thread so the test harness thread is left alone.
        let core = *cores.last().unwrap();
        let pinned = std::thread::spawn(move || pin_current_thread(core))
            .join()
            .unwrap();
        assert!(pinned);
    }
}
