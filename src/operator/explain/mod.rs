//! `explain`: why an invoice did or did not get a reminder, and when it
//! will get the next one. Everything is decided for one day, the database's
//! date in the customers' zone (the tick's "today"), from what the source
//! and the reminders table hold now, and at the database clock's instant
//! for the send window; it writes nothing.
//!
//! The facts are read by `db::explain`, the decision is pure (`decide`),
//! and the report's shape, JSON included, is `report`. The command line
//! (`commands::explain`) and the console (its invoice and customer pages)
//! print or render what [`explain_invoice`] and [`explain_customer`] answer.

mod decide;
mod gather;
pub mod late;
pub mod report;
mod window;

use chrono::NaiveDate;

use super::desk::Desk;
use super::{UsageError, db_failed};
use crate::config::Settings;
use crate::db::owing::OwingDay;
use crate::db::{self, Db};
use crate::domain::InvoiceId;

pub use decide::{CustomerPlace, Facts, Rules, decide, instant};
pub(crate) use gather::customer_statements;
use gather::explain_keys;
pub use report::{
    Explained, Occurrence, Reason, ReminderView, RowState, SourceView, Until, Unusable,
};

/// The rules the tick applies, from the settings.
pub fn rules(settings: &Settings) -> Rules<'_> {
    let r = &settings.reminders;
    Rules {
        stages: &r.stages,
        min_days_between: r.min_days_between,
        max_attempts: r.max_attempts,
        late_payment: &settings.late_payment,
    }
}

/// Explains invoice `id` today (the desk's day): reads its source rows
/// and reminder rows and decides. Reads only.
pub async fn explain_invoice(desk: &Desk, id: &InvoiceId) -> anyhow::Result<Explained> {
    let (db, settings, today) = parts(desk).await?;
    let now = now(desk).await?;
    let keys = std::slice::from_ref(id);
    let sources = read_sources(db, keys, &OwingDay::from_settings(settings, now, today)).await?;
    // Its customer, when its one source row names one, in their own day.
    let customer = match sources.as_slice() {
        [one] => one.row.customer_id.clone(),
        _ => None,
    };
    let mine = customers_own(settings, &sources);
    let settings = mine.as_ref().unwrap_or(settings);
    let today = local_today(settings, now);
    let sources = match mine {
        Some(_) => read_sources(db, keys, &OwingDay::from_settings(settings, now, today)).await?,
        None => sources,
    };
    let (mut explained, _) =
        explain_keys(db, settings, (now, today), keys, sources, customer).await?;
    let mut explained = explained
        .pop()
        .ok_or_else(|| anyhow::anyhow!("explain read no answer for invoice {id}"))?;
    window::apply(&mut explained, &settings.send_window(), now);
    Ok(explained)
}

/// Explains every invoice of `customer` in the source (at most `limit`,
/// in key order) today, reading the customer once: a fixed number of
/// statements whatever its number of invoices.
pub async fn explain_customer(
    desk: &Desk,
    customer: &str,
    limit: u32,
) -> anyhow::Result<CustomerExplained> {
    let (db, settings, today) = parts(desk).await?;
    let now = now(desk).await?;
    let owing = OwingDay::from_settings(settings, now, today);
    let mut sources = db::explain::customer_source_rows(db, customer, limit, &owing)
        .await
        .map_err(db_failed("failed to read the customer's invoices"))?;
    let mine = customers_own(settings, &sources);
    let settings = mine.as_ref().unwrap_or(settings);
    let today = local_today(settings, now);
    if mine.is_some() {
        let owing = OwingDay::from_settings(settings, now, today);
        sources = db::explain::customer_source_rows(db, customer, limit, &owing)
            .await
            .map_err(db_failed("failed to read the customer's invoices"))?;
    }
    let mut keys: Vec<InvoiceId> = sources
        .iter()
        .filter_map(|s| s.row.invoice_id.clone())
        .collect();
    keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    keys.dedup();
    let (mut invoices, pauses) = explain_keys(
        db,
        settings,
        (now, today),
        &keys,
        sources,
        Some(customer.to_owned()),
    )
    .await?;
    let window = settings.send_window();
    for e in &mut invoices {
        window::apply(e, &window, now);
    }
    Ok(CustomerExplained {
        invoices,
        pause: pauses
            .into_iter()
            .find(|p| p.invoice_id.is_none() && p.customer_id.as_deref() == Some(customer)),
    })
}

/// A customer explained: each of its invoices, and its own console pause.
#[derive(Debug, Clone)]
pub struct CustomerExplained {
    pub invoices: Vec<Explained>,
    pub pause: Option<db::pauses::ConsolePause>,
}

async fn read_sources(
    db: &Db,
    keys: &[InvoiceId],
    today: &OwingDay,
) -> anyhow::Result<Vec<db::explain::SourceFacts>> {
    db::explain::source_rows(db, keys, today)
        .await
        .map_err(db_failed("failed to read the invoice from source.relation"))
}

/// The settings as the customer of `sources` sees them (their zone and
/// calendar, from the first row that names them), if they differ.
fn customers_own(settings: &Settings, sources: &[db::explain::SourceFacts]) -> Option<Settings> {
    sources
        .iter()
        .find_map(|s| s.row.clone().into_parts().ok())
        .and_then(|(_, customer)| settings.for_customer(&customer))
}

/// The date at `now` in the zone of `settings`' customers.
fn local_today(settings: &Settings, now: chrono::DateTime<chrono::Utc>) -> NaiveDate {
    now.with_timezone(&settings.customer_timezone())
        .date_naive()
}

/// What every explanation reads with: the database, the settings, today.
async fn parts(desk: &Desk) -> anyhow::Result<(&Db, &Settings, NaiveDate)> {
    let today = desk
        .today()
        .await
        .map_err(db_failed("failed to read the database clock"))?;
    Ok((desk.db(), desk.settings(), today))
}

/// The database clock the desk's day was read with.
async fn now(desk: &Desk) -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    desk.now()
        .await
        .map_err(db_failed("failed to read the database clock"))
}

/// A usage error when the source has no `customer_id` column.
pub async fn check_customer_column(desk: &Desk) -> anyhow::Result<()> {
    let settings = desk.settings();
    let columns = db::source::columns(desk.db())
        .await
        .map_err(db_failed("failed to read the columns of source.relation"))?
        .unwrap_or_default();
    if !columns.iter().any(|c| c.name == "customer_id") {
        return Err(UsageError(format!(
            "explain --customer needs a customer_id column in source.relation ({}), which reminders.group_by = \"customer\" reads; explain --invoice ID works without it",
            settings.source.relation
        ))
        .into());
    }
    Ok(())
}
