//! Which scopes a sign-in asks for: a pending step-up, else the challenge's `scope`, else the
//! resource's `scopes_supported` (none at all: no `scope` parameter), plus `offline_access`
//! when the authorization server lists it in its `scopes_supported` (so that it may issue a
//! refresh token). A 403 `insufficient_scope` makes a step-up: the union of the scopes asked
//! for before and the ones challenged (2026-07-28; safe for 2025-11-25 too).
//!
//! Owns: those rules. Must not touch: I/O.

pub const OFFLINE_ACCESS: &str = "offline_access";

/// The scopes to ask for, in order, without repeats (empty: send no `scope`).
pub fn select(
    step_up: Option<&[String]>,
    challenged: Option<&[String]>,
    resource_scopes: Option<&[String]>,
    auth_server_scopes: Option<&[String]>,
) -> Vec<String> {
    let base: &[String] = step_up
        .filter(|s| !s.is_empty())
        .or(challenged.filter(|s| !s.is_empty()))
        .or(resource_scopes)
        .unwrap_or(&[]);
    let mut out = union(base, &[]);
    if auth_server_scopes.is_some_and(|a| a.iter().any(|s| s == OFFLINE_ACCESS))
        && !out.iter().any(|s| s == OFFLINE_ACCESS)
    {
        out.push(OFFLINE_ACCESS.to_owned());
    }
    out
}

/// `a` then what `b` adds, without repeats or empty entries.
pub fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(a.len() + b.len());
    for s in a.iter().chain(b) {
        if !s.is_empty() && !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}

/// The `scope` parameter: space-separated, `None` when there is none.
pub fn param(scopes: &[String]) -> Option<String> {
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

/// Scopes from a `scope` string.
pub fn split(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        split(s)
    }

    #[test]
    fn a_step_up_comes_first_then_the_challenge_then_the_resource() {
        let (up, ch, res) = (v("a b c"), v("b"), v("r1 r2"));
        assert_eq!(select(Some(&up), Some(&ch), Some(&res), None), v("a b c"));
        assert_eq!(select(None, Some(&ch), Some(&res), None), v("b"));
        assert_eq!(select(Some(&[]), Some(&ch), Some(&res), None), v("b"));
        assert_eq!(select(None, None, Some(&res), None), v("r1 r2"));
        assert_eq!(select(None, Some(&[]), Some(&res), None), v("r1 r2"));
        assert_eq!(select(None, None, None, None), Vec::<String>::new());
        assert_eq!(param(&select(None, None, None, None)), None);
    }

    #[test]
    fn offline_access_is_added_only_when_the_authorization_server_lists_it() {
        let res = v("mcp:basic");
        assert_eq!(
            select(None, None, Some(&res), Some(&v("mcp:basic offline_access"))),
            v("mcp:basic offline_access")
        );
        assert_eq!(
            select(None, None, Some(&res), Some(&v("mcp:basic mcp:read"))),
            v("mcp:basic")
        );
        assert_eq!(
            select(
                None,
                Some(&v("offline_access x")),
                None,
                Some(&v("offline_access"))
            ),
            v("offline_access x")
        );
    }

    #[test]
    fn a_step_up_is_the_union_of_asked_and_challenged() {
        assert_eq!(
            union(&v("mcp:basic"), &v("mcp:write")),
            v("mcp:basic mcp:write")
        );
        assert_eq!(union(&v("a b"), &v("b a c")), v("a b c"));
        assert_eq!(param(&v("a b")), Some("a b".to_owned()));
    }
}
