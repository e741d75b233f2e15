//! The two lock backends, seen from a test: how to make someone else hold
//! the lock, take it away from its holder, or ask who holds it. Lets every
//! lock test and fault scenario run for both backends from one body.

use invoice_reminder::db;
use invoice_reminder::lock::advisory_lock_id;
use redis::AsyncCommands;
use secrecy::ExposeSecret;
use sqlx::{Connection, PgConnection};

use super::World;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Redis,
    Postgres,
}

/// Someone else holding the lock until this is dropped.
pub enum ForeignHolder {
    Redis,
    /// The session that holds the advisory lock.
    Postgres(PgConnection),
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Postgres => "postgres",
        }
    }

    /// Selects this backend for replicas built from `world` from now on.
    pub fn configure(self, world: &mut World) {
        world.set("lock.backend", self.name());
    }

    async fn redis(world: &World) -> redis::aio::MultiplexedConnection {
        let url = world.settings().redis.url.expose_secret().to_owned();
        redis::Client::open(url)
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to Redis")
    }

    async fn pg(world: &World) -> PgConnection {
        PgConnection::connect(&world.db.url)
            .await
            .expect("connect to PostgreSQL")
    }

    fn lock_id(world: &World) -> i64 {
        advisory_lock_id(&world.settings().lock.key)
    }

    /// Another party takes the (free) lock and keeps it.
    pub async fn hold_elsewhere(self, world: &World) -> ForeignHolder {
        match self {
            Self::Redis => {
                let _: () = Self::redis(world)
                    .await
                    .set_ex(world.settings().lock.key, "someone-else", 60)
                    .await
                    .expect("SET lock key");
                ForeignHolder::Redis
            }
            Self::Postgres => {
                let mut conn = Self::pg(world).await;
                sqlx::query("SELECT pg_advisory_lock($1)")
                    .bind(Self::lock_id(world))
                    .execute(&mut conn)
                    .await
                    .expect("take the advisory lock");
                ForeignHolder::Postgres(conn)
            }
        }
    }

    /// The lock disappears from under its holder: Redis deletes the key
    /// (as a restart would), PostgreSQL terminates the holding session.
    pub async fn break_lock(self, world: &World) {
        match self {
            Self::Redis => {
                let _: () = Self::redis(world)
                    .await
                    .del(world.settings().lock.key)
                    .await
                    .expect("DEL");
            }
            Self::Postgres => {
                let mut conn = Self::pg(world).await;
                if let Some((pid, _)) = db::locks::advisory_holder(&mut conn, Self::lock_id(world))
                    .await
                    .expect("read pg_locks")
                {
                    sqlx::query("SELECT pg_terminate_backend($1)")
                        .bind(pid)
                        .execute(&mut conn)
                        .await
                        .expect("terminate the holder's session");
                }
            }
        }
    }

    /// Someone else now holds the lock its holder believes it has.
    pub async fn steal(self, world: &World) -> ForeignHolder {
        match self {
            Self::Redis => {
                let _: () = Self::redis(world)
                    .await
                    .set(world.settings().lock.key, "thief")
                    .await
                    .expect("SET lock key");
                ForeignHolder::Redis
            }
            Self::Postgres => {
                self.break_lock(world).await;
                self.hold_elsewhere(world).await
            }
        }
    }

    pub async fn is_held(self, world: &World) -> bool {
        match self {
            Self::Redis => Self::redis(world)
                .await
                .exists(world.settings().lock.key)
                .await
                .expect("EXISTS"),
            Self::Postgres => {
                db::locks::advisory_holder(&mut Self::pg(world).await, Self::lock_id(world))
                    .await
                    .expect("read pg_locks")
                    .is_some()
            }
        }
    }

    /// True if the thief from [`Backend::steal`] still holds the lock.
    pub async fn thief_holds(self, world: &World) -> bool {
        match self {
            Self::Redis => {
                let value: Option<String> = Self::redis(world)
                    .await
                    .get(world.settings().lock.key)
                    .await
                    .expect("GET");
                value.as_deref() == Some("thief")
            }
            Self::Postgres => self.is_held(world).await,
        }
    }

    /// The replica_id of whoever holds the lock now.
    pub async fn holder_replica(self, world: &World) -> Option<String> {
        match self {
            Self::Redis => {
                let token: Option<String> = Self::redis(world)
                    .await
                    .get(world.settings().lock.key)
                    .await
                    .ok()?;
                let token = uuid::Uuid::parse_str(&token?).ok()?;
                db::runs::run_by_token(&world.database(), token)
                    .await
                    .ok()?
                    .map(|r| r.replica_id)
            }
            Self::Postgres => {
                let (_, app) =
                    db::locks::advisory_holder(&mut Self::pg(world).await, Self::lock_id(world))
                        .await
                        .ok()??;
                app.strip_prefix("invoice-reminder/").map(str::to_owned)
            }
        }
    }
}

/// Generates `mod <test> { redis, postgres }` running `<test>(Backend)` once
/// per backend: one body, both backends.
#[macro_export]
macro_rules! for_each_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use $crate::common::Backend;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(Backend::Redis).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(Backend::Postgres).await
            }
        }
    )*};
}

/// Like [`for_each_backend!`], plus a third run, `redis_user_view`, reading
/// invoices through a view of the user's own (`Source::UserView`), for the
/// scenarios that must hold whatever the source is.
#[macro_export]
macro_rules! for_each_backend_and_source {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use $crate::common::Backend;
            use $crate::harness::Source;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(Backend::Redis, Source::Demo).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$name(Backend::Postgres, Source::Demo).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis_user_view() {
                super::$name(Backend::Redis, Source::UserView).await
            }
        }
    )*};
}
