//! The diesel schema of the daemon's database. Keep it in step with `migrations/`: every
//! type here must exist on SQLite and on PostgreSQL.

diesel::table! {
    /// One row per server name: its last discovered catalogue, as JSON text.
    mcp_catalogues (server) {
        server -> Text,
        fingerprint -> Text,
        catalogue -> Text,
        updated_at -> BigInt,
    }
}
