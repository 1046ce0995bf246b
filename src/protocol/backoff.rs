//! The reopening schedule of a listening stream (the legacy GET stream and the modern
//! `subscriptions/listen`): after the server's `retry` when it set one, else after a wait that
//! doubles from one second up to a minute with each attempt that heard nothing; given up
//! after eight such attempts in a row. An attempt that heard something resets the count.

use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct Backoff {
    silent: u32,
}

impl Backoff {
    pub const FIRST: Duration = Duration::from_secs(1);
    pub const MAX: Duration = Duration::from_secs(60);
    pub const MAX_SILENT_ATTEMPTS: u32 = 8;

    pub fn new() -> Self {
        Backoff { silent: 0 }
    }

    /// How long to wait before the next attempt, or `None` to give up.
    pub fn after_attempt(&mut self, heard: bool, retry: Option<Duration>) -> Option<Duration> {
        if heard {
            self.silent = 0;
            return Some(retry.unwrap_or(Self::FIRST));
        }
        self.silent += 1;
        if self.silent > Self::MAX_SILENT_ATTEMPTS {
            return None;
        }
        if let Some(r) = retry {
            return Some(r);
        }
        let doubled = Self::FIRST.saturating_mul(1 << (self.silent - 1).min(16));
        Some(doubled.min(Self::MAX))
    }

    pub fn silent_attempts(&self) -> u32 {
        self.silent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_gives_up_after_eight() {
        let mut b = Backoff::new();
        let waits: Vec<_> = (0..9).map(|_| b.after_attempt(false, None)).collect();
        let secs: Vec<_> = waits.iter().map(|w| w.map(|d| d.as_secs())).collect();
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
                Some(60),
                None
            ]
        );
    }

    #[test]
    fn hearing_resets_and_retry_wins() {
        let mut b = Backoff::new();
        b.after_attempt(false, None);
        b.after_attempt(false, None);
        assert_eq!(b.after_attempt(true, None), Some(Duration::from_secs(1)));
        assert_eq!(b.silent_attempts(), 0);
        assert_eq!(
            b.after_attempt(false, Some(Duration::from_millis(300))),
            Some(Duration::from_millis(300))
        );
    }
}
