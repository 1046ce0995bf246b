//! Saved catalogues: the table `mcp_catalogues`, one row per server name, holding what
//! discovery found last time (a [`Catalogue`] as JSON text) under the fingerprint of the
//! server's configuration and credentials ([`ResolvedServer::fingerprint`]). A session that
//! finds a saved catalogue for the current fingerprint advertises it at once instead of
//! waiting on the server. No secret is stored here.
//!
//! The database is SQLite (bundled) by default and PostgreSQL when the daemon's
//! `database_url` says `postgres://` or `postgresql://` and the binary was built with the
//! cargo feature `postgres`. The schema comes from the embedded migrations in `migrations/`
//! (portable SQL, run on open) and the queries are the same on both backends.
//!
//! The API is blocking (diesel is): actors call it through `tokio::task::spawn_blocking`,
//! actix `web::block` or a `SyncArbiter`, never on an actor's own thread.
//!
//! Limits: a catalogue whose JSON is over [`MAX_CATALOGUE_BYTES`] (8 MiB) is refused by
//! [`CatalogueStore::put`] with [`StoreError::TooLarge`]; the caller treats that server's
//! catalogue as bad configuration. A row whose JSON no longer parses (corrupt, or written by
//! an incompatible version) is an error from [`CatalogueStore::get`] and is skipped with a
//! warning by [`CatalogueStore::get_all`]; the next successful discovery overwrites it.
//!
//! SQLite details: every pooled connection sets `busy_timeout` *before* switching to WAL
//! (the other order gives "database is locked" under concurrency; and a connection that
//! loses the race to switch a fresh file, which SQLite refuses at once, waits for the
//! other's switch), then `synchronous = NORMAL`. Migrations run inside `BEGIN IMMEDIATE` so that two daemons
//! opening the same file at once do not both create the table (and not at all when none is
//! pending, so a daemon starts beside another process that holds the write lock). On
//! PostgreSQL they run in a transaction holding an advisory lock, for the same reason with
//! several replicas.
//!
//! Files: a new SQLite file is created with mode 0600 before SQLite opens it (SQLite gives
//! its `-wal` and `-shm` files the same mode); an existing file keeps its mode. The database
//! is only a cache, so a file that SQLite finds corrupt ("file is not a database",
//! "database disk image is malformed") when it is opened is moved aside to
//! `<file>.corrupt-<unix time>` (its `-wal` beside it) and a new one is created, with a
//! warning, instead of stopping the daemon.
//!
//! Availability: the database is on the path of every session open ([`get_all_shared`],
//! [`put`]), so a query waits at most [`SQLITE_QUERY_BUSY_TIMEOUT_MS`] (1 s) for a lock held
//! elsewhere (the migrations on open wait up to 10 s). A query that fails because the
//! database is locked or unreachable makes the store *unavailable* for
//! [`UNAVAILABLE_RETRY`] (30 s): that call answers [`StoreError::Unavailable`] (the caller
//! logs it: the one warning), and until the time is up nothing touches the database: reads
//! by [`get_all_shared`] answer "nothing saved" and [`put`] skips the save, both at once and
//! silently, while [`get`], [`get_all`] and [`delete`] answer
//! [`StoreError::StillUnavailable`]. A read that failed stops writes too; a write that failed
//! leaves reads alone (in WAL mode another process's write lock does not block them).
//!
//! [`get_all_shared`]: CatalogueStore::get_all_shared
//! [`put`]: CatalogueStore::put
//! [`get`]: CatalogueStore::get
//! [`get_all`]: CatalogueStore::get_all
//! [`delete`]: CatalogueStore::delete
//!
//! [`ResolvedServer::fingerprint`]: crate::store::settings::ResolvedServer::fingerprint

use crate::protocol::model::Catalogue;
use crate::store::schema::mcp_catalogues;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, PoolError};
use diesel::sqlite::SqliteConnection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[cfg(feature = "postgres")]
use diesel::pg::PgConnection;

/// The largest catalogue saved, measured as its serialized JSON. Discovery follows at most
/// 100 pages per list, so a real server stays far below it; a server that sends more is
/// refused rather than stored (and the preparation that found it fails, naming the server).
pub const MAX_CATALOGUE_BYTES: usize = crate::protocol::model::MAX_CATALOGUE_BYTES;

/// The embedded migrations (`migrations/` at the top of the repository).
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// How long opening the database (WAL switch, migrations) waits for another writer.
const SQLITE_BUSY_TIMEOUT_MS: u64 = 10_000;
/// How long a query waits for a lock held elsewhere before the store counts as unavailable.
pub const SQLITE_QUERY_BUSY_TIMEOUT_MS: u64 = 1_000;
/// How long the store stays unavailable (not tried) after a query found it locked or
/// unreachable.
pub const UNAVAILABLE_RETRY: Duration = Duration::from_secs(30);
/// The largest number of pooled connections (SQLite and PostgreSQL alike).
const POOL_MAX_SIZE: u32 = 8;
/// How long `get`, `put`... wait for a free pooled connection.
const POOL_CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Serializes the migrations of replicas sharing one PostgreSQL database ("albedo" in ASCII).
#[cfg(feature = "postgres")]
const PG_MIGRATION_LOCK: i64 = 0x616c_6265_646f;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "unsupported database URL {url:?}: expected a SQLite file path, sqlite://PATH, \
         postgres://... or postgresql://..."
    )]
    UnsupportedUrl { url: String },
    #[error(
        "database URL {url:?} names PostgreSQL, but this albedo-mcp was built without \
         PostgreSQL support (rebuild it with `--features postgres`)"
    )]
    PostgresNotBuilt { url: String },
    #[error("cannot create the directory {path} for the catalogue database: {source}")]
    CreateDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the catalogue database {path}: {source}")]
    CreateFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the catalogue database {path} is corrupt and cannot be moved aside: {source}")]
    MoveAside {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the catalogue database is unavailable for {op} ({source}); it is not tried again \
         for {retry_after_secs} s"
    )]
    Unavailable {
        op: &'static str,
        retry_after_secs: u64,
        #[source]
        source: Box<StoreError>,
    },
    #[error(
        "the catalogue database is unavailable for {op}; it is tried again in {retry_in_secs} s"
    )]
    StillUnavailable {
        op: &'static str,
        retry_in_secs: u64,
    },
    #[error("cannot open the catalogue database {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: diesel::ConnectionError,
    },
    #[error("cannot set up the catalogue database {url}: {source}")]
    Setup {
        url: String,
        #[source]
        source: diesel::result::Error,
    },
    #[error("cannot migrate the catalogue database {url}: {source}")]
    Migration {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot start the connection pool of the catalogue database {url}: {source}")]
    Pool {
        url: String,
        #[source]
        source: PoolError,
    },
    #[error("no connection to the catalogue database: {0}")]
    Connection(#[source] PoolError),
    #[error("catalogue database query failed: {0}")]
    Query(#[from] diesel::result::Error),
    #[error("cannot serialize the catalogue of server {server:?}: {source}")]
    Serialize {
        server: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "the catalogue of server {server:?} is {size} bytes of JSON, over the limit of {limit} \
         bytes; it is not saved"
    )]
    TooLarge {
        server: String,
        size: usize,
        limit: usize,
    },
    #[error("the saved catalogue of server {server:?} is corrupt: {source}")]
    Corrupt {
        server: String,
        #[source]
        source: serde_json::Error,
    },
}

/// A catalogue as saved: what discovery found, and the fingerprint it was found under.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedCatalogue {
    pub fingerprint: String,
    pub catalogue: Catalogue,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = mcp_catalogues)]
struct Row {
    server: String,
    fingerprint: String,
    catalogue: String,
    updated_at: i64,
}

/// A row without its catalogue: enough to tell whether the decoded copy is current.
#[derive(Queryable, Selectable)]
#[diesel(table_name = mcp_catalogues)]
struct RowHead {
    server: String,
    fingerprint: String,
    updated_at: i64,
}

#[derive(Insertable)]
#[diesel(table_name = mcp_catalogues)]
struct NewRow<'a> {
    server: &'a str,
    fingerprint: &'a str,
    catalogue: &'a str,
    updated_at: i64,
}

impl Row {
    fn decode(self) -> Result<(String, SavedCatalogue), StoreError> {
        match serde_json::from_str::<Catalogue>(&self.catalogue) {
            Ok(catalogue) => Ok((
                self.server,
                SavedCatalogue {
                    fingerprint: self.fingerprint,
                    catalogue,
                },
            )),
            Err(source) => Err(StoreError::Corrupt {
                server: self.server,
                source,
            }),
        }
    }
}

#[derive(Clone)]
enum Backend {
    Sqlite(Pool<ConnectionManager<SqliteConnection>>),
    #[cfg(feature = "postgres")]
    Postgres(Pool<ConnectionManager<PgConnection>>),
}

/// Reads or writes, for the availability of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Read => "reading",
            Op::Write => "writing",
        }
    }
}

/// Until when reads and writes are not tried (see the module's "Availability").
#[derive(Default)]
struct Availability {
    read_until: Option<Instant>,
    write_until: Option<Instant>,
}

impl Availability {
    fn until(&mut self, op: Op) -> &mut Option<Instant> {
        match op {
            Op::Read => &mut self.read_until,
            Op::Write => &mut self.write_until,
        }
    }
}

impl StoreError {
    /// Whether the error says the database is locked elsewhere or cannot be reached, rather
    /// than something about this call.
    fn is_unavailable(&self) -> bool {
        use diesel::result::{DatabaseErrorKind, Error as DE};
        match self {
            StoreError::Connection(_) => true,
            StoreError::Query(DE::DatabaseError(kind, info)) => {
                matches!(
                    kind,
                    DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand
                ) || info.message().contains("locked")
                    || info.message().contains("busy")
            }
            _ => false,
        }
    }
}

/// The saved catalogues. Cheap to clone (the clones share one connection pool); `Send` and
/// `Sync`; every method blocks.
#[derive(Clone)]
pub struct CatalogueStore {
    backend: Backend,
    /// Shared by the clones: until when the database is not tried.
    availability: Arc<Mutex<Availability>>,
    retry: Duration,
    /// Catalogues already decoded, by server, with the row they came from (fingerprint,
    /// `updated_at`, text length): a session that opens from saved catalogues decodes only
    /// rows it has not seen. `put` and `delete` drop the entry they touch.
    decoded: Arc<Mutex<HashMap<String, Decoded>>>,
}

struct Decoded {
    fingerprint: String,
    /// The row's `updated_at` (milliseconds) when it was decoded or written.
    updated_at: i64,
    catalogue: Arc<Catalogue>,
}

impl std::fmt::Debug for CatalogueStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogueStore")
            .field("backend", &self.backend_name())
            .finish()
    }
}

/// Runs `$body` with `$conn` bound to a pooled connection of whichever backend the store
/// uses. The queries are written once and compiled for each backend.
macro_rules! with_conn {
    ($store:expr, |$conn:ident| $body:expr) => {
        match &$store.backend {
            Backend::Sqlite(pool) => {
                let mut pooled = pool.get().map_err(StoreError::Connection)?;
                let $conn: &mut SqliteConnection = &mut pooled;
                $body
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pool) => {
                let mut pooled = pool.get().map_err(StoreError::Connection)?;
                let $conn: &mut PgConnection = &mut pooled;
                $body
            }
        }
    };
}

/// What a `database_url` names.
#[derive(Debug, PartialEq)]
enum Target {
    SqliteFile(String),
    SqliteMemory,
    Postgres,
}

fn classify(url: &str) -> Result<Target, StoreError> {
    let unsupported = || StoreError::UnsupportedUrl { url: redact(url) };
    let trimmed = url.trim();
    if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        return Ok(Target::Postgres);
    }
    let path = if let Some(rest) = trimmed.strip_prefix("sqlite://") {
        rest
    } else if let Some(rest) = trimmed.strip_prefix("sqlite:") {
        rest
    } else if trimmed.contains("://") {
        return Err(unsupported());
    } else {
        trimmed
    };
    match path {
        "" => Err(unsupported()),
        ":memory:" => Ok(Target::SqliteMemory),
        p => Ok(Target::SqliteFile(p.to_owned())),
    }
}

/// The URL with any password replaced, for messages.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            if u.set_password(Some("***")).is_ok() {
                u.to_string()
            } else {
                "<database URL>".to_owned()
            }
        }
        _ => url.to_owned(),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The pragmas every SQLite connection gets. `busy_timeout` must come before WAL; pooled
/// connections then wait [`SQLITE_QUERY_BUSY_TIMEOUT_MS`] per query.
#[derive(Debug)]
struct SqlitePragmas {
    wal: bool,
}

impl SqlitePragmas {
    /// Sets up a connection; its queries then wait up to `busy_ms` for a lock.
    fn apply(
        &self,
        conn: &mut SqliteConnection,
        busy_ms: u64,
    ) -> Result<(), diesel::result::Error> {
        conn.batch_execute(&format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS};"))?;
        if self.wal {
            Self::switch_to_wal(conn)?;
            conn.batch_execute("PRAGMA synchronous = NORMAL;")?;
        }
        if busy_ms != SQLITE_BUSY_TIMEOUT_MS {
            conn.batch_execute(&format!("PRAGMA busy_timeout = {busy_ms};"))?;
        }
        Ok(())
    }

    /// Switching a fresh file to WAL needs an exclusive lock, and SQLite answers "database is
    /// locked" at once, without its busy handler, to a connection that would otherwise
    /// deadlock with another one switching the same file (several daemons starting together
    /// on a new home). The mode is kept in the file, so the loser only has to see that
    /// another connection switched it, or try again once that one is done.
    fn switch_to_wal(conn: &mut SqliteConnection) -> Result<(), diesel::result::Error> {
        #[derive(diesel::QueryableByName)]
        struct Mode {
            #[diesel(sql_type = diesel::sql_types::Text)]
            journal_mode: String,
        }
        let attempts = (SQLITE_BUSY_TIMEOUT_MS / 10).max(1);
        let mut tried = 0;
        loop {
            let err = match conn.batch_execute("PRAGMA journal_mode = WAL;") {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            let locked = matches!(
                &err,
                diesel::result::Error::DatabaseError(_, info) if info.message().contains("locked")
            );
            if !locked || tried >= attempts {
                return Err(err);
            }
            let switched = diesel::sql_query("PRAGMA journal_mode")
                .load::<Mode>(conn)
                .map(|m| m.iter().any(|m| m.journal_mode.eq_ignore_ascii_case("wal")))
                .unwrap_or(false);
            if switched {
                return Ok(());
            }
            tried += 1;
            // A blocking wait is what SQLite's own busy handler does here too.
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqlitePragmas {
    fn on_acquire(&self, conn: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        self.apply(conn, SQLITE_QUERY_BUSY_TIMEOUT_MS)
            .map_err(diesel::r2d2::Error::QueryError)
    }
}

impl CatalogueStore {
    /// Opens the catalogue database named by `database_url` and runs pending migrations.
    ///
    /// - a file path, `sqlite://PATH` or `sqlite:PATH`: bundled SQLite (the file and its
    ///   directory are created when missing); `:memory:` is a private in-memory database;
    /// - `postgres://...` or `postgresql://...`: PostgreSQL, when built with the cargo feature
    ///   `postgres` (otherwise [`StoreError::PostgresNotBuilt`]);
    /// - any other `scheme://`: [`StoreError::UnsupportedUrl`].
    pub fn open(database_url: &str) -> Result<Self, StoreError> {
        match classify(database_url)? {
            Target::SqliteFile(path) => Self::open_sqlite_file(&path),
            Target::SqliteMemory => Self::open_in_memory(),
            Target::Postgres => Self::open_postgres(database_url.trim()),
        }
    }

    /// A private in-memory SQLite database, for tests: one pooled connection that is never
    /// recycled, so the data lives as long as the store and its clones.
    pub fn open_in_memory() -> Result<Self, StoreError> {
        let url = ":memory:";
        let pool = Pool::builder()
            .max_size(1)
            .min_idle(Some(1))
            .idle_timeout(None)
            .max_lifetime(None)
            .connection_timeout(POOL_CONNECTION_TIMEOUT)
            .connection_customizer(Box::new(SqlitePragmas { wal: false }))
            .build(ConnectionManager::<SqliteConnection>::new(url))
            .map_err(|source| StoreError::Pool {
                url: url.to_owned(),
                source,
            })?;
        {
            let mut conn = pool.get().map_err(StoreError::Connection)?;
            migrate_sqlite(&mut conn, url)?;
        }
        Ok(CatalogueStore::new(Backend::Sqlite(pool)))
    }

    fn new(backend: Backend) -> CatalogueStore {
        CatalogueStore {
            backend,
            availability: Default::default(),
            retry: UNAVAILABLE_RETRY,
            decoded: Default::default(),
        }
    }

    fn open_sqlite_file(path: &str) -> Result<Self, StoreError> {
        // `file:` URIs go to SQLite as they are; a plain path gets its directory created,
        // and the file itself (mode 0600) when it is missing.
        if path.starts_with("file:") {
            return Self::open_sqlite_connections(path);
        }
        if let Some(dir) = Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: PathBuf::from(dir).display().to_string(),
                source,
            })?;
        }
        let create = || {
            crate::store::files::create_private_file(Path::new(path)).map_err(|source| {
                StoreError::CreateFile {
                    path: path.to_owned(),
                    source,
                }
            })
        };
        create()?;
        match Self::open_sqlite_connections(path) {
            Err(e) if is_corrupt(&e) => {
                let aside =
                    move_aside(Path::new(path)).map_err(|source| StoreError::MoveAside {
                        path: path.to_owned(),
                        source,
                    })?;
                tracing::warn!(
                    path,
                    moved_to = %aside.display(),
                    error = %e,
                    "the catalogue database is corrupt: it was moved aside and a new one \
                     created (servers are discovered again)"
                );
                create()?;
                Self::open_sqlite_connections(path)
            }
            r => r,
        }
    }

    fn open_sqlite_connections(path: &str) -> Result<Self, StoreError> {
        let pragmas = SqlitePragmas { wal: true };
        // One direct connection first: a bad path fails at once with SQLite's own message
        // (the pool would retry until its timeout), and the migrations run on it.
        {
            let mut conn =
                SqliteConnection::establish(path).map_err(|source| StoreError::Connect {
                    url: path.to_owned(),
                    source,
                })?;
            pragmas
                .apply(&mut conn, SQLITE_BUSY_TIMEOUT_MS)
                .map_err(|source| StoreError::Setup {
                    url: path.to_owned(),
                    source,
                })?;
            migrate_sqlite(&mut conn, path)?;
        }
        let pool = Pool::builder()
            .max_size(POOL_MAX_SIZE)
            .min_idle(Some(1))
            .connection_timeout(POOL_CONNECTION_TIMEOUT)
            .connection_customizer(Box::new(pragmas))
            .build(ConnectionManager::<SqliteConnection>::new(path))
            .map_err(|source| StoreError::Pool {
                url: path.to_owned(),
                source,
            })?;
        Ok(CatalogueStore::new(Backend::Sqlite(pool)))
    }

    #[cfg(not(feature = "postgres"))]
    fn open_postgres(url: &str) -> Result<Self, StoreError> {
        Err(StoreError::PostgresNotBuilt { url: redact(url) })
    }

    #[cfg(feature = "postgres")]
    fn open_postgres(url: &str) -> Result<Self, StoreError> {
        let shown = redact(url);
        {
            let mut conn = PgConnection::establish(url).map_err(|source| StoreError::Connect {
                url: shown.clone(),
                source,
            })?;
            conn.transaction(|conn| {
                diesel::sql_query(format!("SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK})"))
                    .execute(conn)?;
                conn.run_pending_migrations(MIGRATIONS)?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
            .map_err(|source| StoreError::Migration {
                url: shown.clone(),
                source,
            })?;
        }
        let pool = Pool::builder()
            .max_size(POOL_MAX_SIZE)
            .min_idle(Some(1))
            .connection_timeout(POOL_CONNECTION_TIMEOUT)
            .build(ConnectionManager::<PgConnection>::new(url))
            .map_err(|source| StoreError::Pool { url: shown, source })?;
        Ok(CatalogueStore::new(Backend::Postgres(pool)))
    }

    /// `"sqlite"` or `"postgres"`, for logs.
    pub fn backend_name(&self) -> &'static str {
        match &self.backend {
            Backend::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Runs `query` unless `op` is not to be tried now (`Ok(None)`); a failure that says the
    /// database is locked or unreachable makes `op` unavailable (a read: writes too) for
    /// the retry time and is answered as [`StoreError::Unavailable`].
    fn guarded<T>(
        &self,
        op: Op,
        query: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let lock = || self.availability.lock().unwrap_or_else(|p| p.into_inner());
        let was_down = {
            let mut a = lock();
            match *a.until(op) {
                Some(t) if Instant::now() < t => return Ok(None),
                Some(_) => true,
                None => false,
            }
        };
        match query() {
            Err(e) if e.is_unavailable() => {
                let until = Some(Instant::now() + self.retry);
                let mut a = lock();
                *a.until(op) = until;
                if op == Op::Read {
                    a.write_until = until;
                }
                Err(StoreError::Unavailable {
                    op: op.name(),
                    retry_after_secs: self.retry.as_secs(),
                    source: Box::new(e),
                })
            }
            r => {
                if was_down && r.is_ok() {
                    let mut a = lock();
                    if a.until(op).is_some_and(|t| Instant::now() >= t) {
                        *a.until(op) = None;
                        tracing::info!(
                            "the catalogue database is available again for {}",
                            op.name()
                        );
                    }
                }
                r.map(Some)
            }
        }
    }

    /// The error for a call made while `op` is not tried.
    fn still_unavailable(&self, op: Op) -> StoreError {
        let until = *self
            .availability
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .until(op);
        StoreError::StillUnavailable {
            op: op.name(),
            retry_in_secs: until
                .map(|t| t.saturating_duration_since(Instant::now()).as_secs() + 1)
                .unwrap_or(0),
        }
    }

    /// The same store, trying the database again `retry` after it found it unavailable.
    pub fn with_unavailable_retry(mut self, retry: Duration) -> CatalogueStore {
        self.retry = retry;
        self
    }

    /// The saved catalogue of `server`, if any. A row that no longer parses is
    /// [`StoreError::Corrupt`].
    pub fn get(&self, server: &str) -> Result<Option<SavedCatalogue>, StoreError> {
        let row: Option<Row> = self
            .guarded(Op::Read, || {
                Ok(with_conn!(self, |conn| mcp_catalogues::table
                    .find(server)
                    .select(Row::as_select())
                    .first(conn)
                    .optional()?))
            })?
            .ok_or_else(|| self.still_unavailable(Op::Read))?;
        match row {
            None => Ok(None),
            Some(row) => row.decode().map(|(_, saved)| Some(saved)),
        }
    }

    /// Every saved catalogue by server name. Corrupt rows are left out, each with a warning.
    pub fn get_all(&self) -> Result<HashMap<String, SavedCatalogue>, StoreError> {
        let rows: Vec<Row> = self
            .guarded(Op::Read, || {
                Ok(with_conn!(self, |conn| mcp_catalogues::table
                    .select(Row::as_select())
                    .load(conn)?))
            })?
            .ok_or_else(|| self.still_unavailable(Op::Read))?;
        let mut all = HashMap::with_capacity(rows.len());
        for row in rows {
            match row.decode() {
                Ok((server, saved)) => {
                    all.insert(server, saved);
                }
                Err(e) => tracing::warn!(error = %e, "skipping a saved catalogue"),
            }
        }
        Ok(all)
    }

    /// Every saved catalogue, shared, by server, with its fingerprint. A row already decoded
    /// by this store (same fingerprint, `updated_at` and length) is not decoded again:
    /// decoding 100 catalogues of 50 tools was a third of a warm session open.
    ///
    /// On the session-open path: while the store is unavailable it answers an empty map at
    /// once (as if nothing was saved).
    pub fn get_all_shared(&self) -> Result<HashMap<String, (String, Arc<Catalogue>)>, StoreError> {
        // First the rows' heads; the text only of the catalogues not decoded yet (or changed
        // since, by another daemon sharing the database): a warm open reads and decodes
        // nothing it already has.
        let Some(heads) = self.guarded(Op::Read, || {
            Ok::<Vec<RowHead>, StoreError>(with_conn!(self, |conn| mcp_catalogues::table
                .select(RowHead::as_select())
                .load(conn)?))
        })?
        else {
            tracing::debug!("the catalogue database is unavailable: nothing saved is used");
            return Ok(HashMap::new());
        };
        let mut all = HashMap::with_capacity(heads.len());
        let mut missing: Vec<String> = Vec::new();
        {
            let cache = self.decoded.lock().unwrap_or_else(|p| p.into_inner());
            for h in heads {
                match cache
                    .get(&h.server)
                    .filter(|d| d.fingerprint == h.fingerprint && d.updated_at == h.updated_at)
                {
                    Some(d) => {
                        all.insert(h.server, (h.fingerprint, d.catalogue.clone()));
                    }
                    None => missing.push(h.server),
                }
            }
        }
        let rows: Vec<Row> = if missing.is_empty() {
            Vec::new()
        } else {
            match self.guarded(Op::Read, || {
                Ok::<Vec<Row>, StoreError>(with_conn!(self, |conn| mcp_catalogues::table
                    .filter(mcp_catalogues::server.eq_any(&missing))
                    .select(Row::as_select())
                    .load(conn)?))
            })? {
                Some(rows) => rows,
                None => return Ok(HashMap::new()),
            }
        };
        let mut cache = self.decoded.lock().unwrap_or_else(|p| p.into_inner());
        for row in rows {
            match serde_json::from_str::<Catalogue>(&row.catalogue) {
                Ok(c) => {
                    let c = Arc::new(c);
                    cache.insert(
                        row.server.clone(),
                        Decoded {
                            fingerprint: row.fingerprint.clone(),
                            updated_at: row.updated_at,
                            catalogue: c.clone(),
                        },
                    );
                    all.insert(row.server, (row.fingerprint, c));
                }
                Err(e) => {
                    tracing::warn!(server = %row.server, error = %e, "skipping a saved catalogue");
                }
            }
        }
        cache.retain(|k, _| all.contains_key(k));
        Ok(all)
    }

    fn forget(&self, server: &str) {
        self.decoded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(server);
    }

    /// Saves `catalogue` as `server`'s, found under `fingerprint`, replacing what was saved.
    /// Refused with [`StoreError::TooLarge`] over [`MAX_CATALOGUE_BYTES`] (the previous row
    /// stays). On the session-open path: while the store is unavailable the save is skipped
    /// at once (`Ok`; the next discovery saves again).
    pub fn put(
        &self,
        server: &str,
        fingerprint: &str,
        catalogue: &Catalogue,
    ) -> Result<(), StoreError> {
        self.write(server, fingerprint, catalogue).map(|_| ())
    }

    /// [`put`](Self::put), keeping the catalogue as the decoded copy of the row it wrote: the
    /// next session open finds it without reading or decoding the row.
    pub fn put_shared(
        &self,
        server: &str,
        fingerprint: &str,
        catalogue: &Arc<Catalogue>,
    ) -> Result<(), StoreError> {
        if let Some(updated_at) = self.write(server, fingerprint, catalogue)? {
            self.decoded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(
                    server.to_owned(),
                    Decoded {
                        fingerprint: fingerprint.to_owned(),
                        updated_at,
                        catalogue: catalogue.clone(),
                    },
                );
        }
        Ok(())
    }

    /// Write the row; its `updated_at` when it was written (`None`: the store is unavailable).
    fn write(
        &self,
        server: &str,
        fingerprint: &str,
        catalogue: &Catalogue,
    ) -> Result<Option<i64>, StoreError> {
        self.forget(server);
        let json = serde_json::to_string(catalogue).map_err(|source| StoreError::Serialize {
            server: server.to_owned(),
            source,
        })?;
        if json.len() > MAX_CATALOGUE_BYTES {
            return Err(StoreError::TooLarge {
                server: server.to_owned(),
                size: json.len(),
                limit: MAX_CATALOGUE_BYTES,
            });
        }
        let row = NewRow {
            server,
            fingerprint,
            catalogue: &json,
            updated_at: now_ms(),
        };
        let saved = self.guarded(Op::Write, || {
            Ok(with_conn!(self, |conn| diesel::insert_into(
                mcp_catalogues::table
            )
            .values(&row)
            .on_conflict(mcp_catalogues::server)
            .do_update()
            .set((
                mcp_catalogues::fingerprint.eq(row.fingerprint),
                mcp_catalogues::catalogue.eq(row.catalogue),
                mcp_catalogues::updated_at.eq(row.updated_at),
            ))
            .execute(conn)?))
        })?;
        if saved.is_none() {
            tracing::debug!(server, "the catalogue database is unavailable: not saved");
        }
        Ok(saved.map(|_| row.updated_at))
    }

    /// Forgets `server`'s catalogue. Returns whether there was one.
    pub fn delete(&self, server: &str) -> Result<bool, StoreError> {
        self.forget(server);
        let n = self
            .guarded(Op::Write, || {
                Ok(with_conn!(self, |conn| diesel::delete(
                    mcp_catalogues::table.find(server)
                )
                .execute(conn)?))
            })?
            .ok_or_else(|| self.still_unavailable(Op::Write))?;
        Ok(n > 0)
    }
}

/// Whether opening failed because SQLite found the file corrupt.
fn is_corrupt(e: &StoreError) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if text.contains("file is not a database") || text.contains("disk image is malformed") {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Moves a corrupt database file to `<file>.corrupt-<unix time>` (`-1`, `-2`... when that is
/// taken), with its `-wal` beside it; its `-shm` (an index of the `-wal`) is removed.
fn move_aside(path: &Path) -> std::io::Result<PathBuf> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let with_suffix = |p: &Path, suffix: &str| {
        let mut s = p.as_os_str().to_owned();
        s.push(suffix);
        PathBuf::from(s)
    };
    let mut aside = with_suffix(path, &format!(".corrupt-{secs}"));
    let mut n = 0;
    while std::fs::symlink_metadata(&aside).is_ok() {
        n += 1;
        aside = with_suffix(path, &format!(".corrupt-{secs}-{n}"));
    }
    std::fs::rename(path, &aside)?;
    match std::fs::rename(with_suffix(path, "-wal"), with_suffix(&aside, "-wal")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    match std::fs::remove_file(with_suffix(path, "-shm")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok(aside)
}

fn migrate_sqlite(conn: &mut SqliteConnection, url: &str) -> Result<(), StoreError> {
    // Reading is enough when nothing is pending: no write lock is taken.
    if let Ok(false) = conn.has_pending_migration(MIGRATIONS) {
        return Ok(());
    }
    conn.immediate_transaction(|conn| {
        conn.run_pending_migrations(MIGRATIONS)?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    })
    .map_err(|source| StoreError::Migration {
        url: url.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::settings::{parse_mcp, resolve, Credentials};
    use serde_json::json;

    fn catalogue(tool: &str) -> Catalogue {
        Catalogue {
            tools: vec![json!({
                "name": tool,
                "description": "a tool",
                "inputSchema": {"type": "object", "$defs": {"x": {"type": "string"}},
                                "additionalProperties": false}
            })],
            resources: vec![json!({"uri": "file:///a", "name": "a"})],
            resource_templates: vec![],
            prompts: vec![json!({"name": "p"})],
            capabilities: json!({"tools": {"listChanged": true}, "resources": {}}),
            server_info: Some(json!({"name": "srv", "version": "1"})),
            instructions: Some("use it".to_owned()),
        }
    }

    /// Writes raw SQL through the store's own pool (tests only).
    fn raw(store: &CatalogueStore, sql: &str) {
        let done: Result<(), StoreError> = (|| {
            with_conn!(store, |conn| conn.batch_execute(sql)?);
            Ok(())
        })();
        done.expect("raw SQL");
    }

    #[test]
    fn is_clone_send_sync() {
        fn store<T: Clone + Send + Sync + 'static>() {}
        fn error<T: std::error::Error + Send + Sync + 'static>() {}
        store::<CatalogueStore>();
        error::<StoreError>();
    }

    #[test]
    fn round_trip_and_missing() {
        let store = CatalogueStore::open_in_memory().unwrap();
        assert_eq!(store.backend_name(), "sqlite");
        assert_eq!(store.get("docs").unwrap(), None);
        store.put("docs", "fp1", &catalogue("search")).unwrap();
        let saved = store.get("docs").unwrap().unwrap();
        assert_eq!(saved.fingerprint, "fp1");
        assert_eq!(saved.catalogue, catalogue("search"));
        // Schemas survive as sent.
        assert_eq!(
            saved.catalogue.tools[0]["inputSchema"]["additionalProperties"],
            json!(false)
        );
        assert!(store.delete("docs").unwrap());
        assert!(!store.delete("docs").unwrap());
        assert_eq!(store.get("docs").unwrap(), None);
    }

    #[test]
    fn upsert_replaces() {
        let store = CatalogueStore::open_in_memory().unwrap();
        store.put("docs", "fp1", &catalogue("one")).unwrap();
        store.put("other", "fpx", &catalogue("x")).unwrap();
        store.put("docs", "fp2", &catalogue("two")).unwrap();
        let saved = store.get("docs").unwrap().unwrap();
        assert_eq!(saved.fingerprint, "fp2");
        assert_eq!(saved.catalogue, catalogue("two"));
        let all = store.get_all().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all["docs"].fingerprint, "fp2");
        assert_eq!(all["other"].catalogue, catalogue("x"));
    }

    #[test]
    fn fingerprints_follow_configuration_and_secrets() {
        let v = json!({"servers": {"docs": {"type": "stdio", "command": "docs-mcp",
                                            "env": {"T": {"env": "DOCS_T"}}}}});
        let settings = parse_mcp(Some(&v)).unwrap();
        let with = |secret: &'static str| {
            resolve(
                &settings.servers[0],
                &move |k: &str| (k == "DOCS_T").then(|| secret.to_owned()),
                &Credentials::default(),
            )
            .unwrap()
        };
        let first = with("s3cret");
        let store = CatalogueStore::open_in_memory().unwrap();
        store
            .put("docs", &first.fingerprint, &catalogue("search"))
            .unwrap();
        let saved = store.get("docs").unwrap().unwrap();
        assert_eq!(saved.fingerprint, first.fingerprint);
        assert_eq!(
            with("s3cret").fingerprint,
            saved.fingerprint,
            "same configuration"
        );
        assert_ne!(
            with("rotated").fingerprint,
            saved.fingerprint,
            "a new secret is a new fingerprint"
        );
        // No secret value is stored.
        let mut all = String::new();
        for (server, s) in store.get_all().unwrap() {
            all += &format!("{server} {} {:?}", s.fingerprint, s.catalogue);
        }
        assert!(!all.contains("s3cret"));
    }

    #[test]
    fn survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/albedo.db");
        let path = path.to_str().unwrap();
        {
            let store = CatalogueStore::open(path).unwrap();
            store.put("docs", "fp1", &catalogue("search")).unwrap();
            store.put("gone", "fpg", &catalogue("x")).unwrap();
            assert!(store.delete("gone").unwrap());
        }
        // The same file through the URL form; migrations are not run twice.
        let store = CatalogueStore::open(&format!("sqlite://{path}")).unwrap();
        let saved = store.get("docs").unwrap().unwrap();
        assert_eq!(saved.fingerprint, "fp1");
        assert_eq!(saved.catalogue, catalogue("search"));
        assert_eq!(store.get("gone").unwrap(), None);
        assert_eq!(store.get_all().unwrap().len(), 1);
        // WAL is on.
        #[derive(QueryableByName)]
        struct Mode {
            #[diesel(sql_type = diesel::sql_types::Text)]
            journal_mode: String,
        }
        let mode: Vec<Mode> = (|| {
            Ok::<_, StoreError>(with_conn!(store, |conn| diesel::sql_query(
                "PRAGMA journal_mode"
            )
            .load::<Mode>(conn)?))
        })()
        .unwrap();
        let mode: Vec<String> = mode.into_iter().map(|m| m.journal_mode).collect();
        assert_eq!(mode, ["wal"]);
    }

    #[test]
    fn concurrent_puts_from_threads_and_two_stores() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("albedo.db");
        let path = path.to_str().unwrap().to_owned();
        // Two stores on one file stand for two daemons (or a daemon and its restart).
        let a = CatalogueStore::open(&path).unwrap();
        let b = CatalogueStore::open(&path).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let store = if t % 2 == 0 { a.clone() } else { b.clone() };
                std::thread::spawn(move || {
                    for i in 0..40 {
                        let cat = catalogue(&format!("t{t}-{i}"));
                        store.put(&format!("s{t}"), &format!("fp{i}"), &cat)?;
                        store.put("shared", &format!("fp{t}-{i}"), &cat)?;
                        store.get("shared")?;
                        if i % 10 == 0 {
                            store.get_all()?;
                        }
                    }
                    Ok::<_, StoreError>(())
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        let all = a.get_all().unwrap();
        assert_eq!(all.len(), 9);
        for t in 0..8 {
            assert_eq!(all[&format!("s{t}")].fingerprint, "fp39");
        }
        assert_eq!(b.get_all().unwrap(), all);
    }

    #[test]
    fn daemons_opening_a_fresh_file_at_once_migrate_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("albedo.db");
        let path = path.to_str().unwrap().to_owned();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let (path, barrier) = (path.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let store = CatalogueStore::open(&path)?;
                    store.put(&format!("s{t}"), "fp", &catalogue("x"))?;
                    Ok::<_, StoreError>(())
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        let store = CatalogueStore::open(&path).unwrap();
        assert_eq!(store.get_all().unwrap().len(), 6);
    }

    #[test]
    fn a_catalogue_over_the_limit_is_refused() {
        let store = CatalogueStore::open_in_memory().unwrap();
        store.put("big", "fp1", &catalogue("small")).unwrap();
        let mut big = catalogue("huge");
        big.tools[0]["description"] = json!("x".repeat(MAX_CATALOGUE_BYTES));
        let err = store.put("big", "fp2", &big).unwrap_err();
        assert!(
            matches!(err, StoreError::TooLarge { ref server, size, limit }
                if server == "big" && size > limit && limit == MAX_CATALOGUE_BYTES),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("\"big\"") && msg.contains(&MAX_CATALOGUE_BYTES.to_string()),
            "{msg}"
        );
        // The previous catalogue stays.
        assert_eq!(store.get("big").unwrap().unwrap().fingerprint, "fp1");
        // Just under the limit is fine.
        let base = serde_json::to_string(&catalogue("")).unwrap().len();
        let mut edge = catalogue("");
        edge.tools[0]["name"] = json!("y".repeat(MAX_CATALOGUE_BYTES - base));
        assert_eq!(
            serde_json::to_string(&edge).unwrap().len(),
            MAX_CATALOGUE_BYTES
        );
        store.put("edge", "fp", &edge).unwrap();
        assert_eq!(store.get("edge").unwrap().unwrap().catalogue, edge);
    }

    #[test]
    fn a_corrupt_row_is_an_error_for_get_and_skipped_by_get_all() {
        let store = CatalogueStore::open_in_memory().unwrap();
        store.put("good", "fp1", &catalogue("a")).unwrap();
        store.put("bad", "fp2", &catalogue("b")).unwrap();
        raw(
            &store,
            "UPDATE mcp_catalogues SET catalogue = '{\"tools\": [' WHERE server = 'bad'",
        );
        let err = store.get("bad").unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt { ref server, .. } if server == "bad"),
            "{err:?}"
        );
        assert!(std::error::Error::source(&err).is_some(), "cause kept");
        assert!(err.to_string().contains("\"bad\""), "{err}");
        let all = store.get_all().unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["good"]);
        // A wrong shape is corrupt too, and the next put repairs the row.
        raw(
            &store,
            "UPDATE mcp_catalogues SET catalogue = '{\"tools\": 7}' WHERE server = 'bad'",
        );
        assert!(matches!(store.get("bad"), Err(StoreError::Corrupt { .. })));
        store.put("bad", "fp3", &catalogue("b")).unwrap();
        assert_eq!(store.get("bad").unwrap().unwrap().fingerprint, "fp3");
    }

    #[test]
    fn urls() {
        assert_eq!(
            classify("/x/albedo.db").unwrap(),
            Target::SqliteFile("/x/albedo.db".into())
        );
        assert_eq!(
            classify("sqlite:///x/a.db").unwrap(),
            Target::SqliteFile("/x/a.db".into())
        );
        assert_eq!(
            classify("sqlite://rel.db").unwrap(),
            Target::SqliteFile("rel.db".into())
        );
        assert_eq!(classify("sqlite::memory:").unwrap(), Target::SqliteMemory);
        assert_eq!(classify("postgres://h/db").unwrap(), Target::Postgres);
        assert_eq!(classify("postgresql://h/db").unwrap(), Target::Postgres);
        for bad in ["", "sqlite://", "mysql://u@h/db", "http://x"] {
            assert!(
                matches!(classify(bad), Err(StoreError::UnsupportedUrl { .. })),
                "{bad}"
            );
        }
        let err = CatalogueStore::open("mysql://u:pw@h/db").unwrap_err();
        assert!(
            err.to_string().contains("mysql") && !err.to_string().contains("pw"),
            "{err}"
        );
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn postgres_without_the_feature_is_a_clear_error() {
        let err = CatalogueStore::open("postgres://albedo:hunter2@127.0.0.1:1/albedo").unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, StoreError::PostgresNotBuilt { .. }),
            "{err:?}"
        );
        assert!(msg.contains("--features postgres"), "{msg}");
        assert!(!msg.contains("hunter2"), "password redacted: {msg}");
    }

    #[test]
    fn new_database_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("home/albedo.db");
        let store = CatalogueStore::open(path.to_str().unwrap()).unwrap();
        store.put("docs", "fp", &catalogue("a")).unwrap();
        for suffix in ["", "-wal", "-shm"] {
            let f = dir.path().join(format!("home/albedo.db{suffix}"));
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
    }

    #[test]
    fn a_corrupt_file_is_moved_aside_and_recreated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("albedo.db");
        std::fs::write(&path, vec![b'z'; 4096]).unwrap();
        let store = CatalogueStore::open(path.to_str().unwrap()).unwrap();
        assert_eq!(store.get_all().unwrap().len(), 0);
        store.put("docs", "fp", &catalogue("a")).unwrap();
        let aside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("albedo.db.corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(
            std::fs::read(dir.path().join(&aside[0])).unwrap(),
            vec![b'z'; 4096],
            "the corrupt file is kept as it was"
        );
        // A second corrupt file in the same second gets a name of its own.
        drop(store);
        for f in ["albedo.db", "albedo.db-wal", "albedo.db-shm"] {
            let _ = std::fs::remove_file(dir.path().join(f));
        }
        std::fs::write(&path, b"not a database either").unwrap();
        CatalogueStore::open(path.to_str().unwrap()).unwrap();
        let count = std::fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("albedo.db.corrupt-")
            })
            .count();
        assert_eq!(count, 2);
        // Something that is not a file at all is still an error.
        let folder = dir.path().join("folder.db");
        std::fs::create_dir(&folder).unwrap();
        let err = CatalogueStore::open(folder.to_str().unwrap()).unwrap_err();
        assert!(err.to_string().contains("folder.db"), "{err}");
        assert!(std::error::Error::source(&err).is_some());
    }

    /// `ALBEDO_TEST_POSTGRES_URL`, or `None` (the test is skipped with a note). With
    /// `ALBEDO_TEST_REQUIRE_POSTGRES=1` (`.ci/run`, `tests/run-all.sh` once it started
    /// PostgreSQL) a missing URL fails the test instead.
    #[cfg(feature = "postgres")]
    fn postgres_url() -> Option<String> {
        match std::env::var("ALBEDO_TEST_POSTGRES_URL") {
            Ok(url) if !url.is_empty() => Some(url),
            _ if std::env::var("ALBEDO_TEST_REQUIRE_POSTGRES").as_deref() == Ok("1") => {
                panic!("ALBEDO_TEST_REQUIRE_POSTGRES=1 but ALBEDO_TEST_POSTGRES_URL is not set")
            }
            _ => {
                eprintln!(
                    "note: ALBEDO_TEST_POSTGRES_URL is not set; skipping the PostgreSQL test \
                     (start one with `bash tests/peers/postgres.sh`)"
                );
                None
            }
        }
    }

    /// Another process holds the write lock (`BEGIN EXCLUSIVE`): a save gives up after a
    /// short wait once, and the saves after it do not wait at all until the store is tried
    /// again; reads go on (WAL), and a daemon can still start.
    #[test]
    fn a_database_locked_from_outside_costs_one_short_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("albedo.db");
        let path = path.to_str().unwrap();
        let store = CatalogueStore::open(path)
            .unwrap()
            .with_unavailable_retry(Duration::from_secs(3));
        store.put("docs", "fp1", &catalogue("a")).unwrap();
        let mut outside = SqliteConnection::establish(path).unwrap();
        outside.batch_execute("BEGIN EXCLUSIVE;").unwrap();
        let t0 = Instant::now();
        let first = store.put("docs", "fp2", &catalogue("b"));
        let first_wait = t0.elapsed();
        assert!(
            first_wait < Duration::from_millis(2500),
            "the first save waited {first_wait:?} ({first:?})"
        );
        let err = first.unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable { op: "writing", .. }),
            "{err:?}"
        );
        assert!(std::error::Error::source(&err).is_some(), "cause kept");
        let msg = err.to_string();
        assert!(msg.contains("locked") && msg.contains("3 s"), "{msg}");
        let t1 = Instant::now();
        for i in 0..5 {
            store.put(&format!("s{i}"), "fp", &catalogue("c")).unwrap();
        }
        let rest = t1.elapsed();
        assert!(
            rest < Duration::from_millis(200),
            "later saves waited {rest:?}"
        );
        assert!(matches!(
            store.delete("docs"),
            Err(StoreError::StillUnavailable { op: "writing", .. })
        ));
        // Reads still answer, with what was saved before the lock.
        let t2 = Instant::now();
        let all = store.get_all_shared().unwrap();
        assert!(t2.elapsed() < Duration::from_millis(500));
        assert_eq!(all["docs"].0, "fp1");
        assert_eq!(store.get("docs").unwrap().unwrap().fingerprint, "fp1");
        // Another daemon starting now opens the store (no migration is pending).
        let t3 = Instant::now();
        let other = CatalogueStore::open(path).unwrap();
        assert!(
            t3.elapsed() < Duration::from_millis(2500),
            "{:?}",
            t3.elapsed()
        );
        assert_eq!(other.get("docs").unwrap().unwrap().fingerprint, "fp1");
        // Once the lock is gone and the retry time is up, saves work again.
        outside.batch_execute("COMMIT;").unwrap();
        store.put("docs", "fp3", &catalogue("d")).unwrap();
        assert_eq!(
            store.get("docs").unwrap().unwrap().fingerprint,
            "fp1",
            "skipped"
        );
        std::thread::sleep(Duration::from_millis(3100));
        store.put("docs", "fp4", &catalogue("e")).unwrap();
        assert_eq!(store.get("docs").unwrap().unwrap().fingerprint, "fp4");
    }

    /// Without WAL (rollback journal), another process's exclusive lock blocks reads too:
    /// one read waits the short timeout, then reads answer "nothing saved" and saves are
    /// skipped, at once.
    #[test]
    fn a_read_that_finds_the_database_locked_stops_reads_and_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rollback.db");
        let path = path.to_str().unwrap();
        let pool = Pool::builder()
            .max_size(2)
            .connection_customizer(Box::new(SqlitePragmas { wal: false }))
            .build(ConnectionManager::<SqliteConnection>::new(path))
            .unwrap();
        migrate_sqlite(&mut pool.get().unwrap(), path).unwrap();
        let store = CatalogueStore::new(Backend::Sqlite(pool));
        store.put("docs", "fp1", &catalogue("a")).unwrap();
        let mut outside = SqliteConnection::establish(path).unwrap();
        outside
            .batch_execute("BEGIN EXCLUSIVE; UPDATE mcp_catalogues SET fingerprint = 'x' WHERE 0;")
            .unwrap();
        let t0 = Instant::now();
        let err = store.get_all_shared().unwrap_err();
        assert!(
            t0.elapsed() < Duration::from_millis(2500),
            "{:?}",
            t0.elapsed()
        );
        assert!(
            matches!(err, StoreError::Unavailable { op: "reading", .. }),
            "{err:?}"
        );
        let t1 = Instant::now();
        assert!(store.get_all_shared().unwrap().is_empty());
        store.put("docs", "fp2", &catalogue("b")).unwrap();
        assert!(matches!(
            store.get_all(),
            Err(StoreError::StillUnavailable { op: "reading", .. })
        ));
        assert!(
            t1.elapsed() < Duration::from_millis(200),
            "{:?}",
            t1.elapsed()
        );
        outside.batch_execute("COMMIT;").unwrap();
    }

    /// The same checks on PostgreSQL: `ALBEDO_TEST_POSTGRES_URL=$(bash tests/peers/postgres.sh)
    /// cargo test --features postgres --lib store::catalogue`.
    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_round_trip() {
        let Some(url) = postgres_url() else { return };
        let store = CatalogueStore::open(&url).unwrap();
        assert_eq!(store.backend_name(), "postgres");
        // Opening again (a second replica) finds the migrations done.
        let other = CatalogueStore::open(&url).unwrap();
        // Several test runs may share the database: names unique to this run.
        let run = format!("t{}x{}", std::process::id(), now_ms());
        let name = |s: &str| format!("{run}-{s}");
        assert_eq!(store.get(&name("docs")).unwrap(), None);
        store.put(&name("docs"), "fp1", &catalogue("one")).unwrap();
        store.put(&name("docs"), "fp2", &catalogue("two")).unwrap();
        let saved = other.get(&name("docs")).unwrap().unwrap();
        assert_eq!(saved.fingerprint, "fp2");
        assert_eq!(saved.catalogue, catalogue("two"));
        // Concurrent upserts through both pools.
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let store = if t % 2 == 0 {
                    store.clone()
                } else {
                    other.clone()
                };
                let shared = name("shared");
                let own = name(&format!("s{t}"));
                std::thread::spawn(move || {
                    for i in 0..20 {
                        store.put(&own, &format!("fp{i}"), &catalogue("x"))?;
                        store.put(&shared, &format!("fp{t}"), &catalogue("y"))?;
                    }
                    Ok::<_, StoreError>(())
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        // Corrupt row: an error for get, skipped by get_all.
        store.put(&name("bad"), "fp", &catalogue("b")).unwrap();
        raw(
            &store,
            &format!(
                "UPDATE mcp_catalogues SET catalogue = 'not json' WHERE server = '{}'",
                name("bad")
            ),
        );
        assert!(matches!(
            store.get(&name("bad")),
            Err(StoreError::Corrupt { .. })
        ));
        let mine: HashMap<_, _> = store
            .get_all()
            .unwrap()
            .into_iter()
            .filter(|(k, _)| k.starts_with(&run))
            .collect();
        assert_eq!(mine.len(), 8, "{:?}", mine.keys());
        assert_eq!(mine[&name("s3")].fingerprint, "fp19");
        let mut big = catalogue("huge");
        big.tools[0]["description"] = json!("x".repeat(MAX_CATALOGUE_BYTES));
        assert!(matches!(
            store.put(&name("big"), "fp", &big),
            Err(StoreError::TooLarge { .. })
        ));
        for k in mine.keys().chain([&name("bad")]) {
            assert!(store.delete(k).unwrap());
        }
        assert_eq!(store.get(&name("docs")).unwrap(), None);
    }

    /// Replicas starting together on an empty database: the advisory lock makes one of them
    /// migrate and the others wait (without it, `CREATE TABLE` races and all but one fail).
    /// Each run gets its own schema, through libpq's `options` in the URL.
    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_replicas_migrate_a_fresh_database_once() {
        let Some(url) = postgres_url() else { return };
        let schema = format!("albedo_t{}x{}", std::process::id(), now_ms());
        let admin = CatalogueStore::open(&url).unwrap();
        raw(&admin, &format!("CREATE SCHEMA {schema}"));
        let sep = if url.contains('?') { '&' } else { '?' };
        let scoped = format!("{url}{sep}options=-csearch_path%3D{schema}");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (scoped, barrier) = (scoped.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let store = CatalogueStore::open(&scoped)?;
                    store.put(&format!("s{t}"), "fp", &catalogue("x"))?;
                    Ok::<_, StoreError>(())
                })
            })
            .collect();
        let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let count = CatalogueStore::open(&scoped)
            .and_then(|s| s.get_all())
            .map(|all| all.len());
        raw(&admin, &format!("DROP SCHEMA {schema} CASCADE"));
        for r in results {
            r.unwrap();
        }
        assert_eq!(count.unwrap(), 4);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_unreachable_is_a_clear_error() {
        let err = CatalogueStore::open("postgres://albedo:hunter2@127.0.0.1:1/albedo").unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::Connect { .. }), "{err:?}");
        assert!(!msg.contains("hunter2"), "password redacted: {msg}");
    }
}
