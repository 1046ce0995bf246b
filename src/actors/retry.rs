//! The Retry actor (one per session): probes the servers that were left out of the session,
//! only when the session shows activity (a submit or the end of a turn), never on a timer of
//! its own: first `retryMs` after the session prepared, then at doubling intervals capped at
//! twenty times `retryMs`. Servers found up are handed to the Composition, which lets them
//! join after the end of the next turn.

use super::runtime::{Prepared, Probe, Runtime, ServerState};
use actix::prelude::*;
use std::time::Duration;
use tokio::time::Instant;

/// The probe schedule, driven by the clock only when activity asks.
#[derive(Debug, Clone)]
pub struct RetrySchedule {
    retry: Duration,
    interval: Duration,
    next_due: Instant,
}

impl RetrySchedule {
    pub const CAP_FACTOR: u32 = 20;

    pub fn new(retry: Duration, prepared_at: Instant) -> Self {
        RetrySchedule {
            retry,
            interval: retry,
            next_due: prepared_at + retry,
        }
    }

    /// Activity at `now`: whether a probe is due. A probe moves the next one a doubled
    /// interval further, capped at twenty times `retryMs`.
    pub fn on_activity(&mut self, now: Instant) -> bool {
        if now < self.next_due {
            return false;
        }
        self.interval = (self.interval * 2).min(self.retry * Self::CAP_FACTOR);
        self.next_due = now + self.interval;
        true
    }

    pub fn next_due(&self) -> Instant {
        self.next_due
    }
}

/// Told to the composition: these servers answered a probe.
#[derive(Message)]
#[rtype(result = "()")]
pub struct ServersJoined(pub Prepared);

pub struct Retry {
    runtime: Addr<Runtime>,
    owner: Recipient<ServersJoined>,
    schedule: Option<RetrySchedule>,
    missing: Vec<String>,
    probing: bool,
    pub probes: u64,
}

impl Retry {
    pub fn new(runtime: Addr<Runtime>, owner: Recipient<ServersJoined>) -> Self {
        Retry {
            runtime,
            owner,
            schedule: None,
            missing: Vec::new(),
            probing: false,
            probes: 0,
        }
    }
}

impl Actor for Retry {
    type Context = Context<Self>;
}

/// A composition was installed: these servers are missing; the schedule restarts.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Missing {
    pub servers: Vec<String>,
    pub retry_ms: u64,
}

impl Handler<Missing> for Retry {
    type Result = ();

    fn handle(&mut self, msg: Missing, _ctx: &mut Self::Context) {
        self.missing = msg.servers;
        self.schedule = Some(RetrySchedule::new(
            Duration::from_millis(msg.retry_ms),
            Instant::now(),
        ));
    }
}

/// The session showed activity. Answers whether a probe started.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct Poke;

impl Handler<Poke> for Retry {
    type Result = bool;

    fn handle(&mut self, _: Poke, ctx: &mut Self::Context) -> bool {
        if self.missing.is_empty() || self.probing {
            return false;
        }
        let Some(schedule) = &mut self.schedule else {
            return false;
        };
        if !schedule.on_activity(Instant::now()) {
            return false;
        }
        self.probing = true;
        self.probes += 1;
        let servers = self.missing.clone();
        let runtime = self.runtime.clone();
        ctx.spawn(
            async move { runtime.send(Probe { servers }).await }
                .into_actor(self)
                .map(|r, act, _ctx| {
                    act.probing = false;
                    let Ok(Ok(mut prepared)) = r else { return };
                    prepared
                        .servers
                        .retain(|s| s.state == ServerState::Connected && s.conn.is_some());
                    if prepared.servers.is_empty() {
                        return;
                    }
                    act.missing
                        .retain(|m| !prepared.servers.iter().any(|s| &s.config.name == m));
                    act.owner.do_send(ServersJoined(prepared));
                }),
        );
        true
    }
}

/// How many probes ran (for tests and the session view).
#[derive(Message)]
#[rtype(result = "u64")]
pub struct ProbeCount;

impl Handler<ProbeCount> for Retry {
    type Result = u64;

    fn handle(&mut self, _: ProbeCount, _ctx: &mut Self::Context) -> u64 {
        self.probes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn probes_follow_activity_doubling_up_to_the_cap() {
        let retry = Duration::from_millis(1000);
        let mut s = RetrySchedule::new(retry, Instant::now());
        // Activity before retryMs: no probe.
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!s.on_activity(Instant::now()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(s.on_activity(Instant::now()));
        // The next one is 2x later, then 4x, 8x, 16x, then capped at 20x.
        let mut gaps = Vec::new();
        for _ in 0..7 {
            let due = s.next_due();
            let gap = due - Instant::now();
            gaps.push(gap.as_millis() as u64);
            tokio::time::advance(gap - Duration::from_millis(1)).await;
            assert!(!s.on_activity(Instant::now()));
            tokio::time::advance(Duration::from_millis(1)).await;
            assert!(s.on_activity(Instant::now()));
        }
        assert_eq!(gaps, vec![2000, 4000, 8000, 16000, 20000, 20000, 20000]);
    }

    #[tokio::test(start_paused = true)]
    async fn no_activity_no_probe() {
        let mut s = RetrySchedule::new(Duration::from_millis(10), Instant::now());
        // Hours pass without activity: the schedule never fires by itself; the first
        // activity afterwards probes once, and the next needs its own activity.
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(s.on_activity(Instant::now()));
        assert!(!s.on_activity(Instant::now()));
    }
}
