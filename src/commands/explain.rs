//! `explain`: why an invoice did or did not get a reminder, and when it
//! will get the next one. Everything is decided for one day, the database's
//! date in `schedule.timezone` (the tick's "today"), from what the source
//! and the reminders table hold now; it writes nothing.
//!
//! The facts are read by `db::explain`, the decision is pure (`decide`),
//! and the report's shape, JSON included, is `report`. [`explain_invoice`]
//! is public so that other modes (a customer's invoices) can call it.

mod decide;
mod gather;
mod report;
mod text;

use std::process::ExitCode;

use anyhow::Context as _;
use chrono::NaiveDate;

use super::{UsageError, db_failed, exit};
use crate::config::Settings;
use crate::db::{self, Db};
use crate::domain::InvoiceId;

pub use decide::{CustomerPlace, Facts, Rules, decide, instant};
use gather::explain_keys;
pub use report::{
    Explained, Occurrence, Reason, ReminderView, RowState, SourceView, Until, Unusable,
};

/// How many of a customer's invoices `--customer` explains at most.
const CUSTOMER_INVOICES: u32 = 1_000;

/// What to explain.
pub(super) enum Target {
    Invoice(String),
    Customer(String),
}

/// The rules the tick applies, from the settings.
pub fn rules(settings: &Settings) -> Rules<'_> {
    let r = &settings.reminders;
    Rules {
        stages: &r.stages,
        min_days_between: r.min_days_between,
        max_attempts: r.max_attempts,
    }
}

/// Explains invoice `id` on `today` (the database's date in
/// `schedule.timezone`): reads its source rows and reminder rows and
/// decides. Reads only.
pub async fn explain_invoice(
    db: &Db,
    settings: &Settings,
    today: NaiveDate,
    id: &InvoiceId,
) -> anyhow::Result<Explained> {
    let keys = std::slice::from_ref(id);
    let sources = read_sources(db, keys, today).await?;
    // Its customer, when its one source row names one.
    let customer = match sources.as_slice() {
        [one] => one.row.customer_id.clone(),
        _ => None,
    };
    let (mut explained, _) = explain_keys(db, settings, today, keys, sources, customer).await?;
    explained
        .pop()
        .ok_or_else(|| anyhow::anyhow!("explain read no answer for invoice {id}"))
}

/// Explains every invoice of `customer` in the source (at most `limit`,
/// in key order) on `today`, reading the customer once: a fixed number of
/// statements whatever its number of invoices.
pub async fn explain_customer(
    db: &Db,
    settings: &Settings,
    today: NaiveDate,
    customer: &str,
    limit: u32,
) -> anyhow::Result<CustomerExplained> {
    let sources = db::explain::customer_source_rows(db, customer, limit, today)
        .await
        .map_err(db_failed("failed to read the customer's invoices"))?;
    let mut keys: Vec<InvoiceId> = sources
        .iter()
        .filter_map(|s| s.row.invoice_id.clone())
        .collect();
    keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    keys.dedup();
    let (invoices, pauses) = explain_keys(
        db,
        settings,
        today,
        &keys,
        sources,
        Some(customer.to_owned()),
    )
    .await?;
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
    today: NaiveDate,
) -> anyhow::Result<Vec<db::explain::SourceFacts>> {
    db::explain::source_rows(db, keys, today)
        .await
        .map_err(db_failed("failed to read the invoice from source.relation"))
}

/// `explain --raw`: the archived bytes of the invoice's latest sent
/// reminder (`archive.store = "database"`), as sent. Exit 1 when there is
/// none in the archive.
async fn print_raw(db: &Db, explained: &Explained) -> anyhow::Result<ExitCode> {
    let latest = explained
        .reminders
        .iter()
        .rev()
        .find(|r| r.state == RowState::Sent)
        .and_then(|r| r.row.message_id.clone());
    let Some(message_id) = latest else {
        outln!("invoice {} has no sent reminder", explained.invoice_id);
        return Ok(ExitCode::from(exit::FAILURE));
    };
    match db::archive::archived_message(db, &message_id).await {
        Ok(Some(message)) => {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            out.write_all(&message.bytes)
                .and_then(|()| out.flush())
                .context("failed to print the archived message")?;
            Ok(ExitCode::SUCCESS)
        }
        Ok(None) => {
            outln!(
                "<{message_id}> is not in the archive (archive.store = \"none\", or older than archive.keep_days)"
            );
            Ok(ExitCode::from(exit::FAILURE))
        }
        Err(db::archive::ArchiveError::Database(e)) => {
            Err(db_failed("failed to read the message archive")(e))
        }
        Err(e) => Err(anyhow::Error::new(e)),
    }
}

pub(super) async fn explain(
    settings: &Settings,
    target: Target,
    json: bool,
    raw: bool,
) -> anyhow::Result<ExitCode> {
    let db = super::connect(settings).await?;
    super::check_source(&db).await?;
    let today = db::today(&db, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    match target {
        Target::Invoice(id) => {
            let id = InvoiceId::from(id.trim());
            let explained = explain_invoice(&db, settings, today, &id).await?;
            if raw {
                return print_raw(&db, &explained).await;
            }
            if json {
                let text = serde_json::to_string_pretty(&explained)
                    .context("failed to encode the explanation")?;
                outln!("{text}");
            } else {
                text::print_text(&explained)?;
            }
            Ok(exit_for(explained.is_known()))
        }
        Target::Customer(customer) => {
            let customer = customer.trim();
            check_customer_column(&db, settings).await?;
            let explained = explain_customer(&db, settings, today, customer, CUSTOMER_INVOICES)
                .await?
                .invoices;
            if json {
                let report = serde_json::json!({
                    "customer_id": customer,
                    "today": today,
                    "invoices": explained,
                });
                let text = serde_json::to_string_pretty(&report)
                    .context("failed to encode the explanation")?;
                outln!("{text}");
            } else {
                outln!(
                    "customer {customer}: {} in source.relation",
                    report::count(
                        i64::try_from(explained.len()).unwrap_or(i64::MAX),
                        "invoice"
                    )
                );
                for e in &explained {
                    outln!();
                    text::print_text(e)?;
                }
            }
            Ok(exit_for(!explained.is_empty()))
        }
    }
}

fn exit_for(known: bool) -> ExitCode {
    if known {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(exit::FAILURE)
    }
}

/// A usage error when the source has no `customer_id` column.
async fn check_customer_column(db: &Db, settings: &Settings) -> anyhow::Result<()> {
    let columns = db::source::columns(db)
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
