//! The operator's desk: the one door through which the command line and
//! the console reach the database. A face (a command, a console request)
//! builds one desk, asks it questions and has it make changes, and formats
//! what it answers; only the desk, through the rest of `operator`, touches
//! `db`. A desk holds the database, the settings and today (the database's
//! date in the customers' zone, `send_window.timezone` or else
//! `schedule.timezone`), read once, at the first question that
//! needs it, so a page or a command decides everything for one day.
//!
//! Its methods live beside their questions, one `impl Desk` in each file
//! of `operator` (`audit`, `overview`, `archive`, `explain`, ...).

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Utc};
use tokio::sync::OnceCell;

use crate::config::Settings;
use crate::db::owing::OwingDay;
use crate::db::{self, Db};

/// The database, the settings and today, for one command or request.
pub struct Desk {
    db: Db,
    settings: Arc<Settings>,
    /// The database clock and its date in the customers' zone.
    clock: OnceCell<(DateTime<Utc>, NaiveDate)>,
}

impl Desk {
    pub fn new(db: Db, settings: Arc<Settings>) -> Self {
        Self {
            db,
            settings,
            clock: OnceCell::new(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The database, for the rest of `operator`.
    pub(crate) fn db(&self) -> &Db {
        &self.db
    }

    /// Today: the database's date in the customers' zone, read once.
    pub async fn today(&self) -> Result<NaiveDate, sqlx::Error> {
        self.clock().await.map(|(_, today)| today)
    }

    /// The database clock, read once with [`Desk::today`].
    pub async fn now(&self) -> Result<DateTime<Utc>, sqlx::Error> {
        self.clock().await.map(|(now, _)| now)
    }

    async fn clock(&self) -> Result<(DateTime<Utc>, NaiveDate), sqlx::Error> {
        // Which optional columns the source has decides what every read of
        // it selects (a customer's zone and calendar, a regime): learnt
        // before the first read of the day. A source that fails the check
        // is reported by the commands that check it; reads go on without.
        if !self.db.names().source_checked()
            && let Err(e) = db::source::check(&self.db).await
        {
            tracing::debug!(error = %e, "source.relation could not be checked");
        }
        self.clock
            .get_or_try_init(|| db::clock(&self.db, self.settings.customer_timezone()))
            .await
            .copied()
    }

    /// One sentence per regime whose late-payment stages wait today: the
    /// rates file has no rate for today's half-year (none when no stage
    /// claims late payment).
    pub async fn rates_out_of_date(&self) -> Result<Vec<String>, sqlx::Error> {
        let settings = &self.settings;
        if settings.reminders.stages.late_payment_keys().is_empty() {
            return Ok(Vec::new());
        }
        let today = self.today().await?;
        let late = &settings.late_payment;
        Ok(crate::domain::Regime::ALL
            .into_iter()
            .filter_map(|regime| {
                let law = late.law(regime)?;
                let missing = crate::late_payment::missing_today(&law, &late.rates, today)?;
                let whose = if regime == late.regime {
                    "late_payment.regime"
                } else {
                    "rows whose late_payment_regime is"
                };
                Some(format!(
                    "rates_out_of_date: {missing}; late-payment stages wait for {whose} {regime} until late_payment.rates_file has it"
                ))
            })
            .collect())
    }

    /// Checks `source.relation` against the source contract: a relation
    /// that does not satisfy it is a configuration error (exit 2, a 4xx)
    /// naming it.
    pub async fn check_source(&self) -> anyhow::Result<()> {
        db::source::check(&self.db).await.map_err(|e| match e {
            e @ db::source::SourceError::Contract(_) => super::UsageError(e.to_string()).into(),
            db::source::SourceError::Database(e) => {
                anyhow::Error::new(e).context("failed to check source.relation")
            }
        })
    }

    /// Today with the rules that decide what is owed on it.
    pub async fn owing_day(&self) -> Result<OwingDay, sqlx::Error> {
        let (now, today) = self.clock().await?;
        Ok(OwingDay::from_settings(&self.settings, now, today))
    }
}
