//! Everything a tick needs, built once from [`Settings`]: the database pool,
//! the lock backend, the mailer, and the writes waiting for the database to
//! come back. Building it connects to nothing, so a replica starts (and
//! keeps scheduling) while its services are down.

use sqlx::PgPool;

use crate::config::Settings;
use crate::lock::{LockBackend, LockError};
use crate::mail::Mailer;
use crate::metrics::Metrics;
use crate::tick::deferred::Deferred;

pub struct Context {
    pub settings: Settings,
    pub db: PgPool,
    pub lock: LockBackend,
    pub mailer: Mailer,
    /// Results a tick could not write because the database was away.
    pub deferred: Deferred,
    pub metrics: Metrics,
}

impl Context {
    /// Builds the lock client and the mailer; connects to nothing. Must be
    /// called inside a tokio runtime.
    pub fn new(settings: Settings, db: PgPool) -> Result<Self, LockError> {
        let metrics = Metrics::default();
        let lock = LockBackend::from_settings(&settings, metrics.lock_renewals())?;
        let mailer = Mailer::new(&settings.smtp, metrics.smtp_duration());
        Ok(Self {
            settings,
            db,
            lock,
            mailer,
            deferred: Deferred::default(),
            metrics,
        })
    }
}
