-- Saved catalogues: one row per configured server, holding what discovery found last time
-- (a JSON `Catalogue`) under the fingerprint of the configuration and credentials it was
-- discovered with. No secret is stored: resolved secret values enter the fingerprint only
-- through a hash. `updated_at` is unix time in milliseconds.
-- Portable SQL: the same statements run on SQLite and PostgreSQL.
CREATE TABLE mcp_catalogues (
    server      TEXT   NOT NULL PRIMARY KEY,
    fingerprint TEXT   NOT NULL,
    catalogue   TEXT   NOT NULL,
    updated_at  BIGINT NOT NULL
);
