//! The listening GET stream (2025-11-25 era, "Listening for Messages from the Server"): at
//! most one per connection, reopened on `protocol::backoff` (the server's `retry`, or a wait
//! doubling from the base up to the cap) with `Last-Event-ID`, given up after attempts in a
//! row that heard nothing; a refusal closes it for the connection's life.
//!
//! Owns: the listener task and its schedule (`run_listen_schedule`, testable with paused
//! time). Must not touch: request streams and their resumption.

use super::driver::Ctx;
use super::stream::{open_get, read_stream, GetOpen, StreamEnd};
use super::{HttpOptions, ListenState};
use crate::protocol::backoff::Backoff as ListenBackoff;
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The listening stream's schedule with this transport's options.
fn listen_backoff(o: &HttpOptions) -> ListenBackoff {
    ListenBackoff::new(o.listen_base_wait, o.listen_max_wait, o.listen_max_empty)
}

/// How one attempt of the listening stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAttempt {
    /// The stream was open (or could not be opened) and is gone; `heard` says whether it
    /// brought any event; `retry` is the last `retry` the server set.
    Dropped {
        heard: bool,
        retry: Option<Duration>,
    },
    /// A refusal: closed for the connection's life.
    Refused(u16),
    /// The session is gone.
    SessionEnded(u16),
}

/// How the listening stream ended for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenEnd {
    Refused(u16),
    SessionEnded(u16),
    GaveUp,
}

/// Run the listening stream's attempts with the reopening schedule until it ends for good
/// (or the task is aborted). `attempt` opens one stream and reads it to its end. Separate
/// from the HTTP code so the schedule can be tested with paused time.
pub async fn run_listen_schedule<F, Fut>(
    mut backoff: ListenBackoff,
    mut attempt: F,
    mut on_wait: impl FnMut(Duration),
) -> ListenEnd
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ListenAttempt>,
{
    loop {
        match attempt().await {
            ListenAttempt::Refused(s) => return ListenEnd::Refused(s),
            ListenAttempt::SessionEnded(s) => return ListenEnd::SessionEnded(s),
            ListenAttempt::Dropped { heard, retry } => match backoff.next_wait(heard, retry) {
                Some(wait) => {
                    on_wait(wait);
                    tokio::time::sleep(wait).await;
                }
                None => return ListenEnd::GaveUp,
            },
        }
    }
}

pub(super) fn start_listener(ctx: &Arc<Ctx>) {
    if ctx.shared.closed.load(Ordering::Acquire) {
        return;
    }
    if !ctx.legacy() {
        tracing::debug!("no listening stream outside a 2025-11-25-era session");
        return;
    }
    if super::driver::lock(&ctx.listener).is_some() {
        return; // one per connection, for its life
    }
    ctx.shared.set_listen(ListenState::Opening);
    let c = ctx.clone();
    let h = tokio::task::spawn_local(async move {
        let state = Rc::new(RefCell::new((None::<String>, None::<Duration>)));
        let backoff = listen_backoff(&c.opts);
        let c2 = c.clone();
        let end = run_listen_schedule(
            backoff,
            || listen_attempt(c2.clone(), state.clone()),
            |wait| {
                c.shared.set_listen(ListenState::Waiting);
                tracing::debug!(
                    wait_ms = wait.as_millis() as u64,
                    "listening stream dropped; reopening"
                );
            },
        )
        .await;
        match end {
            ListenEnd::Refused(s) => {
                tracing::debug!(status = s, "the server offers no listening stream");
                c.shared.set_listen(ListenState::Refused(s));
            }
            ListenEnd::SessionEnded(s) => c.end_session(s),
            ListenEnd::GaveUp => {
                tracing::warn!(
                    attempts = c.opts.listen_max_empty,
                    "the listening stream heard nothing in a row of attempts; given up"
                );
                c.shared.set_listen(ListenState::GaveUp);
            }
        }
    });
    *super::driver::lock(&ctx.listener) = Some(h);
}

async fn listen_attempt(
    ctx: Arc<Ctx>,
    state: Rc<RefCell<(Option<String>, Option<Duration>)>>,
) -> ListenAttempt {
    let last = state.borrow().0.clone();
    match open_get(&ctx, last.as_deref()).await {
        GetOpen::Failed(e) => {
            tracing::debug!(error = %e, "the listening stream could not open");
            ListenAttempt::Dropped {
                heard: false,
                retry: state.borrow().1,
            }
        }
        GetOpen::Refused(r) if r.session_ended => ListenAttempt::SessionEnded(r.status),
        GetOpen::Refused(r) => ListenAttempt::Refused(r.status),
        GetOpen::Stream(mut resp) => {
            ctx.shared.set_listen(ListenState::Open);
            ctx.shared
                .stats
                .listen_opens
                .fetch_add(1, Ordering::Relaxed);
            let (mut last_id, mut retry) = state.borrow().clone();
            let r = read_stream(&ctx, &mut resp, None, &mut last_id, &mut retry).await;
            *state.borrow_mut() = (last_id, retry);
            let heard = match r {
                Ok(StreamEnd::Over { broke, heard, .. }) => {
                    if let Some(e) = broke {
                        tracing::debug!(error = %e, "the listening stream broke");
                    }
                    heard
                }
                // Nothing is awaited on this stream, so it never answers or fails.
                Ok(StreamEnd::Answered) | Err(_) => true,
            };
            ListenAttempt::Dropped { heard, retry }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    fn secs(s: &[u64]) -> Vec<Duration> {
        s.iter().map(|&x| Duration::from_secs(x)).collect()
    }

    #[test]
    fn backoff_doubles_from_one_second_to_a_minute_and_gives_up_after_eight() {
        let mut b = listen_backoff(&HttpOptions::default());
        let waits: Vec<_> = (0..7).map(|_| b.next_wait(false, None).unwrap()).collect();
        assert_eq!(waits, secs(&[1, 2, 4, 8, 16, 32, 60]));
        assert_eq!(
            b.next_wait(false, None),
            None,
            "the eighth empty attempt gives up"
        );
    }

    #[test]
    fn backoff_resets_when_an_attempt_hears_something() {
        let mut b = listen_backoff(&HttpOptions::default());
        for _ in 0..7 {
            assert!(b.next_wait(false, None).is_some());
        }
        assert_eq!(b.next_wait(true, None), Some(Duration::from_secs(1)));
        assert_eq!(b.empty_in_row(), 0);
        for _ in 0..7 {
            assert!(b.next_wait(false, None).is_some());
        }
        assert_eq!(b.next_wait(false, None), None);
    }

    #[test]
    fn backoff_follows_the_server_retry_capped() {
        let mut b = listen_backoff(&HttpOptions::default());
        let r = Some(Duration::from_millis(2500));
        assert_eq!(b.next_wait(true, r), r);
        assert_eq!(b.next_wait(false, r), r);
        assert_eq!(
            b.next_wait(false, Some(Duration::from_secs(3600))),
            Some(Duration::from_secs(60))
        );
    }

    /// Runs the schedule with a fake attempt; returns when each attempt started (virtual
    /// seconds since the start) and how it ended.
    async fn run_fake(script: Vec<ListenAttempt>) -> (Vec<f64>, ListenEnd) {
        let start = tokio::time::Instant::now();
        let times = Rc::new(RefCell::new(Vec::new()));
        let script = Rc::new(RefCell::new(VecDeque::from(script)));
        let t = times.clone();
        let end = run_listen_schedule(
            listen_backoff(&HttpOptions::default()),
            move || {
                t.borrow_mut().push(start.elapsed().as_secs_f64());
                let next = script.borrow_mut().pop_front();
                async move { next.unwrap_or(ListenAttempt::Refused(405)) }
            },
            |_| {},
        )
        .await;
        let t = times.borrow().clone();
        (t, end)
    }

    fn dropped(heard: bool) -> ListenAttempt {
        ListenAttempt::Dropped { heard, retry: None }
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_with_paused_time_gives_up_after_eight_silent_attempts() {
        let (times, end) = run_fake(vec![dropped(false); 20]).await;
        assert_eq!(end, ListenEnd::GaveUp);
        assert_eq!(times, vec![0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 123.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_with_paused_time_keeps_a_talking_stream() {
        // Heard, seven silent, heard, seven silent, then a refusal: never gives up.
        let mut script = vec![dropped(true)];
        script.extend(vec![dropped(false); 7]);
        script.push(dropped(true));
        script.extend(vec![dropped(false); 7]);
        let (times, end) = run_fake(script).await;
        assert_eq!(end, ListenEnd::Refused(405));
        assert_eq!(times.len(), 17);
        // After a heard stream: 1 s; then 1, 2, 4 ... 60.
        assert_eq!(&times[..4], &[0.0, 1.0, 2.0, 4.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_with_paused_time_uses_the_server_retry() {
        let r = Some(Duration::from_millis(1500));
        let script = vec![
            ListenAttempt::Dropped {
                heard: true,
                retry: r,
            },
            ListenAttempt::Dropped {
                heard: false,
                retry: r,
            },
            ListenAttempt::SessionEnded(404),
        ];
        let (times, end) = run_fake(script).await;
        assert_eq!(end, ListenEnd::SessionEnded(404));
        assert_eq!(times, vec![0.0, 1.5, 3.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn schedule_with_paused_time_floors_a_server_retry_of_0_at_one_second() {
        // A stream that talks and drops at once, with `retry: 0`, again and again: reopened
        // once a second, never in a tight loop.
        let script = vec![
            ListenAttempt::Dropped {
                heard: true,
                retry: Some(Duration::ZERO),
            };
            6
        ];
        let (times, end) = run_fake(script).await;
        assert_eq!(end, ListenEnd::Refused(405));
        assert_eq!(times, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    }
}
