//! Resumption (2025-11-25 era, "Resumability and Redelivery"): a request's SSE stream that
//! ends or breaks before its response is resumed with a GET carrying `Last-Event-ID`, after
//! the stream's `retry` (or the default, at most the cap), until the response arrives or
//! resumptions in a row bring nothing new. A stream without event ids, or a modern one, is
//! lost (outcome unknown).
//!
//! Owns: `resume_wait`, `read_request_stream`. Must not touch: the listening stream, the POST.

use super::driver::Ctx;
use super::stream::{drain, open_get, read_stream, GetOpen, StreamEnd};
use crate::protocol::jsonrpc::RequestId;
use crate::transport::TransportError;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The wait before a resumption GET: the stream's `retry`, else the default, at most the cap.
/// The server's `retry` is floored at the default (250 ms), so that `retry: 0` cannot make
/// the client resume in a tight loop.
pub fn resume_wait(retry: Option<Duration>, default: Duration, cap: Duration) -> Duration {
    retry.map_or(default, |r| r.max(default)).min(cap)
}

/// Read a request's SSE stream, and resume it (2025-11-25 era) until its response arrives.
pub(super) async fn read_request_stream(
    ctx: &Arc<Ctx>,
    id: &RequestId,
    mut resp: awc::ClientResponse,
) -> Result<(), TransportError> {
    let mut last_id: Option<String> = None;
    let mut retry: Option<Duration> = None;
    let mut empty_in_row = 0u32;
    let mut resumed = false;
    loop {
        let end = read_stream(ctx, &mut resp, Some(id), &mut last_id, &mut retry).await?;
        let (broke, progress) = match end {
            StreamEnd::Answered => {
                drain(&mut resp).await;
                return Ok(());
            }
            StreamEnd::Over {
                broke, progress, ..
            } => (broke, progress),
        };
        let how = match &broke {
            Some(e) => format!("the stream broke before the answer ({e})"),
            None => "the stream ended before the answer".to_owned(),
        };
        if !ctx.legacy() {
            return Err(TransportError::Lost(how));
        }
        let Some(last) = last_id.clone() else {
            return Err(TransportError::Lost(format!(
                "{how}, and it carried no event id to resume from"
            )));
        };
        if resumed {
            if progress {
                empty_in_row = 0;
            } else {
                empty_in_row += 1;
            }
        }
        // Open the resumed stream, counting attempts that fail to open as empty ones.
        resp = loop {
            if empty_in_row >= ctx.opts.resume_max_empty {
                return Err(TransportError::Lost(format!(
                    "{how}; {empty_in_row} resumptions in a row brought nothing new"
                )));
            }
            let wait = resume_wait(
                retry,
                ctx.opts.resume_default_wait,
                ctx.opts.resume_max_wait,
            );
            tokio::time::sleep(wait).await;
            ctx.shared.stats.resumptions.fetch_add(1, Ordering::Relaxed);
            resumed = true;
            match open_get(ctx, Some(&last)).await {
                GetOpen::Stream(r) => break r,
                GetOpen::Failed(e) => {
                    tracing::debug!(error = %e, "a resumption could not open");
                    empty_in_row += 1;
                }
                GetOpen::Refused(r) if r.session_ended => {
                    ctx.end_session(r.status);
                    return Err(TransportError::Lost(format!(
                        "{how}, and the session ended while resuming (HTTP {})",
                        r.status
                    )));
                }
                GetOpen::Refused(r) => {
                    return Err(TransportError::Lost(format!(
                        "{how}, and the server refused to resume it (HTTP {}: {})",
                        r.status, r.detail
                    )));
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::http::HttpOptions;

    #[test]
    fn resume_wait_defaults_and_caps() {
        let d = HttpOptions::default();
        let w = |r| resume_wait(r, d.resume_default_wait, d.resume_max_wait);
        assert_eq!(w(None), Duration::from_millis(250));
        assert_eq!(
            w(Some(Duration::from_millis(700))),
            Duration::from_millis(700)
        );
        assert_eq!(w(Some(Duration::from_secs(45))), Duration::from_secs(30));
        assert_eq!(
            w(Some(Duration::from_millis(u64::MAX))),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn a_server_retry_under_250_ms_is_floored() {
        let d = HttpOptions::default();
        let w = |ms| {
            resume_wait(
                Some(Duration::from_millis(ms)),
                d.resume_default_wait,
                d.resume_max_wait,
            )
        };
        for ms in [0, 1, 249] {
            assert_eq!(w(ms), Duration::from_millis(250), "retry {ms} ms");
        }
        assert_eq!(w(251), Duration::from_millis(251));
    }

    /// Resumptions paced by `resume_wait` on paused time: with `retry: 0`, twenty of them take
    /// at least five (virtual) seconds, not none.
    #[tokio::test(start_paused = true)]
    async fn resumptions_after_retry_0_on_paused_time_are_250_ms_apart() {
        let d = HttpOptions::default();
        let start = tokio::time::Instant::now();
        let mut at = Vec::new();
        for _ in 0..20 {
            tokio::time::sleep(resume_wait(
                Some(Duration::ZERO),
                d.resume_default_wait,
                d.resume_max_wait,
            ))
            .await;
            at.push(start.elapsed());
        }
        assert_eq!(at[0], Duration::from_millis(250));
        assert_eq!(at[19], Duration::from_secs(5));
    }
}
