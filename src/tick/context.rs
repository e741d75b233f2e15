//! Everything a tick needs, built once from [`Settings`]: the database pool
//! (and a connection of its own for each of the tick's busiest phases), the
//! lock backend, the templates, the mailer, the metrics, and the writes
//! waiting for the database to come back. Cheap to clone: a tick's phases
//! each hold a clone. Building it connects to nothing,
//! so a replica starts (and keeps scheduling) while its services are down;
//! it reads the template files, so a broken template stops start-up.

use std::sync::Arc;

use sqlx::PgPool;

use super::deferred::Deferred;
use crate::config::Settings;
use crate::db::Db;
use crate::lock::{LockBackend, LockError};
use crate::mail::{Mailer, TemplateError, Templates};
use crate::metrics::Metrics;

#[derive(Clone)]
pub struct Context {
    pub settings: Arc<Settings>,
    pub db: Db,
    /// One connection for each of the tick's busiest phases (claims, marks,
    /// results), so their statements are prepared once per process and
    /// never wait for the shared pool (see [`crate::db::PhaseDbs`]).
    pub phases: crate::db::PhaseDbs,
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
            &settings.late_payment,
            &settings.reminders.stages,
        )?);
        if settings.reminders.group_by.statements() {
            templates.check_statement()?;
        }
        let metrics = Metrics::default();
        let lock = LockBackend::from_settings(&settings, metrics.lock_renewals())?;
        let mailer = Mailer::new(&settings.smtp, metrics.smtp_duration());
        let db = Db::new(db, &settings);
        let phases = crate::db::PhaseDbs::new(&settings, &db);
        Ok(Self {
            settings: Arc::new(settings),
            db,
            phases,
            lock,
            templates,
            mailer,
            deferred: Deferred::default(),
            metrics,
        })
    }

    /// Closes every database connection of this context (the pool and the
    /// phases' own), waiting for them to end.
    pub async fn close_database(&self) {
        self.phases.close().await;
        self.db.pool().close().await;
    }
}
