//! The hot lane: `POST /sessions/{id}/tools/{name}/call`, recognised by its path and run
//! without actix-web's router, right after the trust check lets the request in.
//!
//! The router matches a route with dynamic segments by a regular expression, with captures,
//! and reaches the handler through three boxed services: some 4,500 instructions and three
//! allocations per call, a fifth of what the daemon adds to a call. The lane does what those
//! steps do for this one route and in the same order (the body read with the call's limit
//! and refused as the extractor refuses it, then [`tools::call_at`]), so its answers are
//! the route's. A path whose id or name holds a `%`, or any other request, goes on to the
//! router, where the same call route decodes it.
//!
//! Owns: recognising the call path and running the call from it. Must not touch: the trust
//! check (done before), any other route.

use super::body;
use super::tools::{self, CallBody};
use super::{AppState, BodyLimits};
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{web, ResponseError};
use std::ops::Range;

/// Where the session id and tool name are in a call's path, as the router's pattern
/// `/sessions/{id}/tools/{name}/call` captures them (each segment `[^/]+`), when neither
/// holds a `%` (which the router's path decodes).
pub(super) fn call_spans(path: &str) -> Option<(Range<usize>, Range<usize>)> {
    const SESSIONS: &str = "/sessions/";
    const TOOLS: &str = "/tools/";
    let id_end = SESSIONS.len() + path.strip_prefix(SESSIONS)?.find('/')?;
    let name_len = path[id_end..]
        .strip_prefix(TOOLS)?
        .strip_suffix("/call")?
        .len();
    let name_start = id_end + TOOLS.len();
    let (id, name) = (SESSIONS.len()..id_end, name_start..name_start + name_len);
    let plain = |r: &Range<usize>| {
        !r.is_empty()
            && !path.as_bytes()[r.clone()]
                .iter()
                .any(|&b| b == b'/' || b == b'%')
    };
    (plain(&id) && plain(&name)).then_some((id, name))
}

/// A request the trust check let in: a tool call runs here; anything else goes to `next`,
/// the router.
pub(super) async fn route<B: MessageBody + 'static>(
    req: ServiceRequest,
    next: Next<B>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let lane = (req.method() == Method::POST)
        .then(|| {
            let spans = call_spans(req.match_info().unprocessed())?;
            Some((req.app_data::<web::Data<AppState>>()?.clone(), spans))
        })
        .flatten();
    let Some((state, (id, name))) = lane else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    let (http, mut payload) = req.into_parts();
    let answer = async {
        // The call route's body limit, which its resource's `BodyLimit` gives the router.
        let limit = http
            .app_data::<BodyLimits>()
            .map_or(body::DEFAULT_CALL_BODY_LIMIT, |l| l.call);
        let call: CallBody = body::optional(&http, &mut payload, limit).await?;
        let path = http.match_info().unprocessed();
        tools::call_at(&state, &path[id], &path[name], call).await
    }
    .await;
    let res = match answer {
        Ok(res) => res,
        Err(e) => e.error_response(),
    };
    Ok(ServiceResponse::new(http, res.map_into_boxed_body()))
}

#[cfg(test)]
mod tests {
    use super::call_spans;

    fn call_parts(path: &str) -> Option<(&str, &str)> {
        call_spans(path).map(|(id, name)| (&path[id], &path[name]))
    }

    #[test]
    fn the_lane_takes_the_paths_the_router_pattern_takes_and_no_other() {
        assert_eq!(
            call_parts("/sessions/s1-ab/tools/mcp__fs__read/call"),
            Some(("s1-ab", "mcp__fs__read"))
        );
        for path in [
            "/sessions/s1/tools/a%2Fb/call",
            "/sessions/s%31/tools/t/call",
            "/sessions//tools/t/call",
            "/sessions/s1/tools//call",
            "/sessions/s1/tools/a/b/call",
            "/sessions/s1/tools/t/call/",
            "/sessions/s1/tools/t",
            "/sessions/s1/tools/call",
            "/sessions/s1",
            "/sessions/s1/x/tools/t/call",
            "/session/s1/tools/t/call",
        ] {
            assert_eq!(call_parts(path), None, "{path}");
        }
    }
}
