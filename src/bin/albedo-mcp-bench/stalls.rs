//! The machine itself (`machine_stalls`): how often this VM stops a vCPU, read in the same
//! run as the figures it explains. One thread per core, each pinned to its core, reads the
//! monotonic clock in a tight loop; a gap between two reads is time that thread did not run.
//! It runs at the start of the run, before any server, and at the start of `scale`, before
//! the agent fleet, when nothing of the bench's is running: a gap is then time the hypervisor
//! held the vCPU or the kernel ran something else there. The machine's steal time over the
//! same seconds (/proc/stat) says how much of it the hypervisor owns up to. A stop of some
//! milliseconds holds every call queued on that core, which a p99 of 5 ms cannot absorb.
//!
//! Owns: the probe and its records. Must not touch: the summary (summary.rs reads the
//! records into the fleet target's detail).

use super::*;

/// The gaps one pinned thread saw.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Gaps {
    pub(crate) over_1ms: u64,
    pub(crate) over_3ms: u64,
    pub(crate) lost_us: u64,
    pub(crate) max_us: u64,
}

impl Gaps {
    /// Counts one gap between two clock reads.
    pub(crate) fn note(&mut self, gap: Duration) {
        let us = gap.as_micros().min(u64::MAX as u128) as u64;
        self.max_us = self.max_us.max(us);
        if us > 1_000 {
            self.over_1ms += 1;
            self.lost_us += us;
        }
        if us > 3_000 {
            self.over_3ms += 1;
        }
    }
}

/// Pins the calling thread to `cpu`; false where the system refuses.
fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it for any cpu
    // under CPU_SETSIZE (checked), and sched_setaffinity reads exactly its size.
    unsafe {
        if cpu >= libc::CPU_SETSIZE as usize {
            return false;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Reads the clock on `cpu` for `length` and counts the gaps.
fn watch(cpu: usize, length: Duration) -> Option<Gaps> {
    if !pin(cpu) {
        return None;
    }
    let mut gaps = Gaps::default();
    let start = Instant::now();
    let mut last = start;
    loop {
        let now = Instant::now();
        gaps.note(now - last);
        last = now;
        if now - start >= length {
            return Some(gaps);
        }
    }
}

impl Bench {
    /// Every core watched at once for `length`; a record per core, `when` saying where in
    /// the run.
    pub(crate) fn machine_stalls(&mut self, when: &str, length: Duration) {
        let steal0 = procs::steal_ms();
        let threads: Vec<_> = (0..cores().max(1))
            .map(|cpu| std::thread::spawn(move || (cpu, watch(cpu, length))))
            .collect();
        let joined: Vec<_> = threads.into_iter().filter_map(|t| t.join().ok()).collect();
        // What the hypervisor itself says it took meanwhile, all cores together.
        let steal = procs::steal_ms_since(steal0);
        if let Some(ms) = steal {
            println!("machine ({when}): {ms:.0} ms of steal time over the cores");
        }
        for (cpu, gaps) in joined {
            let Some(g) = gaps else {
                self.note(format!("machine_stalls: cannot pin a thread to cpu {cpu}"));
                continue;
            };
            println!(
                "machine ({when}) cpu{cpu}: {} gaps over 1 ms ({:.1} ms lost), {} over 3 ms, \
                 the longest {:.2} ms in {:.0} s",
                g.over_1ms,
                g.lost_us as f64 / 1000.0,
                g.over_3ms,
                g.max_us as f64 / 1000.0,
                length.as_secs_f64()
            );
            self.records.push(json!({
                "scenario": STALLS_SCENARIO,
                "client": "probe",
                "when": when,
                "cpu": cpu,
                "seconds": length.as_secs_f64(),
                "gaps_over_1ms": g.over_1ms,
                "gaps_over_3ms": g.over_3ms,
                "lost_ms": g.lost_us as f64 / 1000.0,
                "max_gap_ms": g.max_us as f64 / 1000.0,
                "machine_steal_ms": steal,
            }));
        }
    }

    /// The probe's length: a second in the quick run, five in a full one.
    pub(crate) fn stalls_length(&self) -> Duration {
        Duration::from_secs(if self.opts.quick { 1 } else { 5 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_counted_by_their_length() {
        let mut g = Gaps::default();
        for us in [10, 999, 1_001, 2_500, 3_001, 12_000] {
            g.note(Duration::from_micros(us));
        }
        assert_eq!(
            g,
            Gaps {
                over_1ms: 4,
                over_3ms: 2,
                lost_us: 1_001 + 2_500 + 3_001 + 12_000,
                max_us: 12_000
            }
        );
    }
}
