//! The two eras of the protocol and the version strings albedo speaks.

use serde::Serialize;

/// The modern revision: no handshake, per-request `_meta`.
pub const MODERN: &str = "2026-07-28";
/// The version offered in `initialize`.
pub const LEGACY_LATEST: &str = "2025-11-25";
/// Versions accepted back from `initialize`.
pub const LEGACY_ACCEPTED: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Era {
    /// 2026-07-28 and later: stateless requests carrying `_meta`.
    Modern,
    /// 2025-11-25 back to 2024-11-05: the `initialize` handshake.
    Legacy,
}

/// A negotiated protocol version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProtocolVersion {
    pub era: Era,
    pub version: String,
}

impl ProtocolVersion {
    pub fn modern() -> Self {
        ProtocolVersion {
            era: Era::Modern,
            version: MODERN.to_owned(),
        }
    }
    pub fn legacy(v: &str) -> Self {
        ProtocolVersion {
            era: Era::Legacy,
            version: v.to_owned(),
        }
    }
}

/// Whether `initialize` may be answered with this version.
pub fn legacy_accepted(v: &str) -> bool {
    LEGACY_ACCEPTED.contains(&v)
}

/// What a list of versions a server names (in a `DiscoverResult` or a `-32022` error) means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// It names 2026-07-28: speak the modern era.
    Modern,
    /// It names only versions albedo opens with `initialize`.
    LegacyOnly,
    /// It names nothing albedo speaks.
    Nothing(Vec<String>),
}

pub fn classify_named(versions: &[String]) -> Named {
    if versions.iter().any(|v| v == MODERN) {
        Named::Modern
    } else if versions.iter().any(|v| legacy_accepted(v)) {
        Named::LegacyOnly
    } else {
        Named::Nothing(versions.to_vec())
    }
}
