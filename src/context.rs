//! Everything a tick needs, built once from [`Settings`]: the database pool,
//! the lock backend, the templates, the mailer, the metrics, and the writes
//! waiting for the database to come back. Building it connects to nothing,
//! so a replica starts (and keeps scheduling) while its services are down;
//! it reads the template files, so a broken template stops start-up.

use std::sync::Arc;

use sqlx::PgPool;

use crate::config::Settings;
use crate::db::Db;
use crate::lock::{LockBackend, LockError};
use crate::mail::{Mailer, TemplateError, Templates};
use crate::metrics::Metrics;
use crate::tick::deferred::Deferred;

pub struct Context {
    pub settings: Settings,
    pub db: Db,
    pub lock: LockBackend,
    pub templates: Arc<Templates>,
    pub mailer: Mailer,
    /// Results a tick could not write because the database was away.
    pub deferred: Deferred,
    pub metrics: Metrics,
}

/// Why a context could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("failed to set up the lock backend: {0}")]
    Lock(#[from] LockError),
    /// A configuration problem: `main` exits 2.
    #[error(transparent)]
    Templates(#[from] TemplateError),
}

impl Context {
    /// Builds the lock client, loads the templates and builds the mailer;
    /// connects to nothing. Must be called inside a tokio runtime.
    pub fn new(settings: Settings, db: PgPool) -> Result<Self, SetupError> {
        let templates = Arc::new(Templates::load(
            &settings.templates,
            &settings.company,
            &settings.reminders.stages,
        )?);
        let metrics = Metrics::default();
        let lock = LockBackend::from_settings(&settings, metrics.lock_renewals())?;
        let mailer = Mailer::new(&settings.smtp, metrics.smtp_duration());
        let db = Db::new(db, &settings);
        Ok(Self {
            settings,
            db,
            lock,
            templates,
            mailer,
            deferred: Deferred::default(),
            metrics,
        })
    }
}
