//! The reopening schedule of a listening stream (the legacy GET stream and the modern
//! `subscriptions/listen`): after an attempt that heard something, the base wait (1 s); after
//! attempts that heard nothing, a wait doubling from the base with each of them (1, 2, 4 ...
//! s) up to the cap (60 s); the server's `retry`, when it set one, instead, floored at the
//! base (a server's `retry: 0` cannot make the client spin) and capped the same. After
//! `max_empty` (8) attempts in a row that heard nothing, it gives up.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    max_empty: u32,
    empty_in_row: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Self::BASE, Self::CAP, Self::MAX_EMPTY)
    }
}

impl Backoff {
    pub const BASE: Duration = Duration::from_secs(1);
    pub const CAP: Duration = Duration::from_secs(60);
    pub const MAX_EMPTY: u32 = 8;

    pub fn new(base: Duration, cap: Duration, max_empty: u32) -> Self {
        Backoff {
            base,
            cap,
            max_empty,
            empty_in_row: 0,
        }
    }

    /// Attempts in a row that heard nothing.
    pub fn empty_in_row(&self) -> u32 {
        self.empty_in_row
    }

    /// An attempt ended: the wait before the next one, or `None` to give up.
    pub fn next_wait(&mut self, heard: bool, server_retry: Option<Duration>) -> Option<Duration> {
        if heard {
            self.empty_in_row = 0;
        } else {
            self.empty_in_row = self.empty_in_row.saturating_add(1);
        }
        if self.empty_in_row >= self.max_empty {
            return None;
        }
        if let Some(r) = server_retry {
            return Some(r.max(self.base).min(self.cap));
        }
        let doublings = self.empty_in_row.saturating_sub(1).min(30);
        Some(self.base.saturating_mul(1u32 << doublings).min(self.cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_gives_up_on_the_eighth_silent_attempt() {
        let mut b = Backoff::default();
        let secs: Vec<_> = (0..8)
            .map(|_| b.next_wait(false, None).map(|d| d.as_secs()))
            .collect();
        assert_eq!(
            secs,
            vec![
                Some(1),
                Some(2),
                Some(4),
                Some(8),
                Some(16),
                Some(32),
                Some(60),
                None
            ]
        );
    }

    #[test]
    fn hearing_resets_and_retry_wins() {
        let mut b = Backoff::default();
        b.next_wait(false, None);
        b.next_wait(false, None);
        assert_eq!(b.next_wait(true, None), Some(Duration::from_secs(1)));
        assert_eq!(b.empty_in_row(), 0);
        assert_eq!(
            b.next_wait(false, Some(Duration::from_millis(1500))),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            b.next_wait(false, Some(Duration::from_secs(600))),
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn a_server_retry_below_the_base_is_floored_at_it() {
        let mut b = Backoff::default();
        for r in [0, 1, 999] {
            assert_eq!(
                b.next_wait(true, Some(Duration::from_millis(r))),
                Some(Backoff::BASE),
                "retry {r} ms"
            );
        }
    }
}
