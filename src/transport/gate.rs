//! How many requests a server may make of the client, per connection: every transport asks
//! [`RequestLimiter::admit`] before it hands a server request to the client core (which
//! answers it). Up to 100 a second are let through, with a burst of 200 (a token bucket);
//! those over it are dropped without an answer and counted; a flood far over it (more than
//! 1,000 dropped at once, refilled at 1,000 a second: sustained, over 11 times the limit)
//! closes the connection. Time is tokio's, so the buckets can be tested with paused time.
//!
//! Owns: the buckets. Must not touch: I/O; the transports decide what dropping and closing
//! mean for them.

use tokio::time::Instant;

/// Server requests let through per second on one connection.
pub const SERVER_REQUESTS_PER_S: u32 = 100;
/// ... and at once.
pub const SERVER_REQUEST_BURST: u32 = 200;
/// Requests over the limit that may be dropped per second, and at once, before the
/// connection is closed.
pub const FLOOD_DROPS_PER_S: u32 = 1000;

/// A token bucket: `burst` tokens at most, refilled at `rate` a second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate_per_s: u32, burst: u32, now: Instant) -> TokenBucket {
        TokenBucket {
            rate: f64::from(rate_per_s),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: now,
        }
    }

    /// Take one token if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What to do with one request from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Hand it to the client core (it is answered).
    Deliver,
    /// Over the limit: drop it without an answer, and count it.
    Drop,
    /// Far over the limit: close the connection.
    Flood,
}

/// The two buckets of one connection.
#[derive(Debug, Clone)]
pub struct RequestLimiter {
    answered: TokenBucket,
    dropped: TokenBucket,
}

impl Default for RequestLimiter {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl RequestLimiter {
    pub fn new(now: Instant) -> RequestLimiter {
        RequestLimiter {
            answered: TokenBucket::new(SERVER_REQUESTS_PER_S, SERVER_REQUEST_BURST, now),
            dropped: TokenBucket::new(FLOOD_DROPS_PER_S, FLOOD_DROPS_PER_S, now),
        }
    }

    /// One request arrived now.
    pub fn admit(&mut self) -> Admit {
        self.admit_at(Instant::now())
    }

    pub fn admit_at(&mut self, now: Instant) -> Admit {
        if self.answered.take(now) {
            Admit::Deliver
        } else if self.dropped.take(now) {
            Admit::Drop
        } else {
            Admit::Flood
        }
    }

    /// Why a flood closes the connection, for its error.
    pub fn flood_reason() -> String {
        format!(
            "the server sent requests far over the limit of {SERVER_REQUESTS_PER_S} a second \
             (burst {SERVER_REQUEST_BURST}): more than {FLOOD_DROPS_PER_S} dropped in a second"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn run(l: &mut RequestLimiter, n: usize) -> (usize, usize, usize) {
        let (mut d, mut x, mut f) = (0, 0, 0);
        for _ in 0..n {
            match l.admit() {
                Admit::Deliver => d += 1,
                Admit::Drop => x += 1,
                Admit::Flood => f += 1,
            }
        }
        (d, x, f)
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_200_then_100_a_second() {
        let mut l = RequestLimiter::default();
        assert_eq!(run(&mut l, 250), (200, 50, 0));
        tokio::time::advance(Duration::from_millis(500)).await;
        // 50 tokens back for each bucket.
        assert_eq!(run(&mut l, 60), (50, 10, 0));
        // Steady at 100 a second: every request answered.
        for _ in 0..50 {
            tokio::time::advance(Duration::from_millis(10)).await;
            assert_eq!(l.admit(), Admit::Deliver);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_far_over_the_limit_is_told_apart() {
        let mut l = RequestLimiter::default();
        // 200 answered, 1,000 dropped, then the flood.
        assert_eq!(run(&mut l, 1201), (200, 1000, 1));
        // Twice the limit for a minute is dropped, never a flood.
        let mut l = RequestLimiter::default();
        let mut floods = 0;
        for _ in 0..60 * 200 {
            tokio::time::advance(Duration::from_millis(5)).await;
            floods += usize::from(l.admit() == Admit::Flood);
        }
        assert_eq!(floods, 0);
    }
}
