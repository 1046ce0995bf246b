//! The agent fleet's schedule, one loop for every way the fleet is made: through the API and
//! at the HTTP floor (`scale.rs`, the load generator), and through albedo's client and the
//! rmcp client alone (`client.rs`, and `benches/rmcp-client`, which includes this file with
//! `#[path]`, each in its own process; the TypeScript client, `benches/ts-client.mjs`, runs
//! the same schedule written in JavaScript, with these constants sent in its job). Every
//! session calls once per period, to its targets in turn, the sessions spread over the first
//! period (tokio's timer rounds each start to its millisecond, so with 200 sessions some 20 call
//! at once each millisecond). A call that takes longer than the period delays that session's
//! next one: ticks are skipped, not bunched.
//!
//! Owns: when each call starts and what is kept of it (its latency, a failure, the window of a
//! slow call). Must not touch: how a call is made, or the records.

use crate::measure;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Each session of the fleet calls once per this many ms...
pub const PERIOD_MS: u64 = 10;
/// ...and its calls are counted in windows of this many ms (by when a call started)...
pub const WINDOW_MS: u64 = 100;
/// ...where a call over this many µs is slow.
pub const SLOW_US: u32 = 5_000;

/// One fleet's schedule.
pub struct Fleet {
    /// Each session calls once per `period`...
    pub period: Duration,
    /// ...for this long.
    pub duration: Duration,
    /// The windows (by when a call started) that a slow call is counted in...
    pub window_ms: u64,
    /// ...and what makes a call slow.
    pub slow_us: u32,
}

/// What a fleet gave: every call's latency (µs, any order), the failures, and how many
/// windows had a slow call (a tail spread over the run, or bursts).
pub struct FleetRun {
    pub lat: Vec<u32>,
    pub errors: u64,
    pub slow_windows: usize,
}

impl Fleet {
    /// The bench's fleet (one call per session every `PERIOD_MS`, slow past `SLOW_US`,
    /// counted in windows of `WINDOW_MS`), for `duration`.
    pub fn new(duration: Duration) -> Fleet {
        Fleet {
            period: Duration::from_millis(PERIOD_MS),
            duration,
            window_ms: WINDOW_MS,
            slow_us: SLOW_US,
        }
    }

    /// The fleet over `conns` in `sessions` groups of one size (the last may be shorter), each
    /// call `call(conn)` to the group's connections in turn: its record (`measure::record`,
    /// with this process's CPU) and how many windows had a slow call.
    pub async fn over<C>(
        &self,
        conns: &[C],
        sessions: usize,
        who: &str,
        call: impl AsyncFn(&C) -> Result<(), String>,
    ) -> (serde_json::Value, usize) {
        let per = (conns.len() / sessions.max(1)).max(1);
        let groups: Vec<&[C]> = conns.chunks(per).collect();
        let cpu0 = measure::cpu_us();
        let began = Instant::now();
        let run = self
            .run(groups, who, async |group, i| {
                call(&group[i % group.len()]).await
            })
            .await;
        let elapsed = began.elapsed().as_secs_f64();
        let cpu = measure::cpu_us().saturating_sub(cpu0);
        let record = measure::record(sessions, run.lat, 0, run.errors, elapsed, cpu);
        (record, run.slow_windows)
    }

    /// A `many` job's load and then its fleet (`measure::Many`), as each Rust client runs
    /// them over its connections `conns`: the load's record (its one level, `run` as
    /// `measure::levels` takes it), this process's memory after it (KiB), and the fleet's
    /// record with its slow windows ([`Fleet::over`], each call `call(conn)`).
    pub async fn load_then_fleet<C, F, Fut>(
        plan: &measure::Many,
        conns: &[C],
        who: &str,
        run: F,
        call: impl AsyncFn(&C) -> Result<(), String>,
    ) -> (
        Option<serde_json::Value>,
        u64,
        Option<(serde_json::Value, usize)>,
    )
    where
        F: FnMut(usize, Option<Instant>, Option<u64>) -> Fut,
        Fut: std::future::Future<Output = measure::LevelRun>,
    {
        let load = match &plan.load {
            Some(l) => measure::levels(l, run).await.pop(),
            None => None,
        };
        let rss_busy = measure::rss_kib();
        let fleet = match plan.fleet {
            Some((sessions, duration)) => {
                Some(Fleet::new(duration).over(conns, sessions, who, call).await)
            }
            None => None,
        };
        (load, rss_busy, fleet)
    }

    /// Run the fleet: `call(session, i)` makes session's `i`-th call, `Err` with what to say of
    /// the first failure (named by `who`).
    pub async fn run<S>(
        &self,
        sessions: Vec<S>,
        who: &str,
        call: impl AsyncFn(&mut S, usize) -> Result<(), String>,
    ) -> FleetRun {
        let began = Instant::now();
        let until = began + self.duration;
        let n = sessions.len().max(1) as u32;
        let call = &call;
        let runs = sessions
            .into_iter()
            .enumerate()
            .map(|(k, mut session)| async move {
                let start = tokio::time::Instant::now() + self.period * k as u32 / n;
                let mut tick = tokio::time::interval_at(start, self.period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let (mut lat, mut errors, mut slow) = (Vec::new(), 0u64, Vec::new());
                for i in 0.. {
                    tick.tick().await;
                    if Instant::now() >= until {
                        break;
                    }
                    let t = Instant::now();
                    match call(&mut session, i).await {
                        Ok(()) => {
                            let l = measure::micros(t);
                            lat.push(l);
                            if l > self.slow_us {
                                let at = t.saturating_duration_since(began).as_millis() as u64;
                                slow.push(at / self.window_ms.max(1));
                            }
                        }
                        Err(e) => {
                            if errors == 0 {
                                eprintln!("{who}: a fleet call failed: {e}");
                            }
                            errors += 1;
                        }
                    }
                }
                (lat, errors, slow)
            });
        let mut run = FleetRun {
            lat: Vec::new(),
            errors: 0,
            slow_windows: 0,
        };
        let mut slow = BTreeSet::new();
        for (l, e, s) in futures_util::future::join_all(runs).await {
            run.lat.extend(l);
            run.errors += e;
            slow.extend(s);
        }
        run.slow_windows = slow.len();
        run
    }
}
