//! The hash maps on the call path: std's `HashMap` and `HashSet` with foldhash's hasher
//! instead of SipHash-1-3. Still seeded at random per map (`foldhash::fast::RandomState`), so a
//! server cannot pick tool names that collide on purpose; some 20-40 instructions a short key
//! instead of 150-250 (callgrind, `albedo-mcp-bench --only instructions`).
//!
//! Owns: the two type names. Must not touch: anything else; a map off the call path keeps
//! std's default.

/// A `HashMap` with foldhash's randomly seeded hasher; make one with `FastMap::default()`.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A `HashSet` with foldhash's randomly seeded hasher; make one with `FastSet::default()`.
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
