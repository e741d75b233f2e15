//! `explain`: why an invoice did or did not get a reminder, and when it
//! will get the next one. Everything is decided for one day, the database's
//! date in `schedule.timezone` (the tick's "today"), from what the source
//! and the reminders table hold now; it writes nothing.
//!
//! The facts are read by `db::explain`, the decision is pure (`decide`),
//! and the report's shape, JSON included, is `report`. [`explain_invoice`]
//! is public so that other modes (a customer's invoices) can call it.

mod decide;
mod report;
mod text;

use std::process::ExitCode;

use anyhow::Context as _;
use chrono::NaiveDate;

use super::{UsageError, db_failed, exit};
use crate::config::Settings;
use crate::db::customers::Retries;
use crate::db::owing::Today;
use crate::db::reminders::Backoff;
use crate::db::{self, Db};
use crate::domain::InvoiceId;

pub use decide::{CustomerPlace, Facts, Rules, decide, instant};
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
    let r = &settings.reminders;
    let tz = settings.schedule.timezone.name();
    let sources = db::explain::source_rows(db, id, today)
        .await
        .map_err(db_failed("failed to read the invoice from source.relation"))?;
    let backoff = Backoff {
        first: r.retry_backoff,
        max: r.retry_backoff_max,
    };
    let reminders = db::explain::reminder_rows(db, id, tz, backoff)
        .await
        .map_err(db_failed("failed to read the invoice's reminders"))?;
    // The recipients of its one source row, against the suppression list.
    let recipients: Vec<String> = match sources.as_slice() {
        [one] => one
            .row
            .customer_email
            .as_deref()
            .and_then(|cell| crate::domain::Recipients::parse(cell).ok())
            .map(|r| r.addresses().iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let suppressed = match recipients.is_empty() {
        true => Vec::new(),
        false => db::suppressions::find(db, &recipients)
            .await
            .map_err(db_failed("failed to read the suppression list"))?,
    };
    let all_suppressed = !recipients.is_empty()
        && recipients
            .iter()
            .all(|a| suppressed.iter().any(|s| s.address.eq_ignore_ascii_case(a)));
    let (customer_last, customer_place) = match (settings.reminders.group_by, sources.as_slice()) {
        (crate::config::GroupBy::Customer, [one]) => match &one.row.customer_id {
            Some(customer) => (
                db::explain::customer_last_reminder(db, customer, id, tz)
                    .await
                    .map_err(db_failed("failed to read the customer's reminders"))?,
                Some(customer_place(db, settings, today, customer, id).await?),
            ),
            None => (None, None),
        },
        _ => (None, None),
    };
    let customer = sources
        .first()
        .filter(|_| sources.len() == 1)
        .and_then(|s| s.row.customer_id.clone());
    let console_pause = db::pauses::find(db, id, customer.as_deref())
        .await
        .map_err(db_failed("failed to read the console's pauses"))?;
    let facts = Facts {
        invoice_id: id.clone(),
        today,
        timezone: tz.to_owned(),
        sources,
        reminders,
        suppressed,
        all_suppressed,
        customer_last,
        customer_place,
        console_pause,
    };
    Ok(decide(facts, rules(settings)))
}

/// Customer mode: where invoice `id` stands in what `customer` gets from
/// the next ticks, chosen by the tick's own rule (`tick::statements`) from
/// the rows the tick would read.
async fn customer_place(
    db: &Db,
    settings: &Settings,
    today: NaiveDate,
    customer: &str,
    id: &InvoiceId,
) -> anyhow::Result<CustomerPlace> {
    let (rows, suppressed) = db::customers::fetch_whole_customer(
        db,
        &Today::from_settings(settings, today),
        &Retries::from_settings(&settings.reminders, 0),
        customer,
        settings.reminders.batch_size,
    )
    .await
    .map_err(db_failed("failed to read the customer's invoices"))?;
    let per_mail = usize::try_from(settings.reminders.max_invoices_per_mail).unwrap_or(usize::MAX);
    let chosen = crate::tick::statements(rows, per_mail, &suppressed, today, &mut |_| {});
    if chosen.waiting.iter().any(|c| c == customer) {
        return Ok(CustomerPlace::WaitsForRetry);
    }
    for statement in &chosen.statements {
        if statement.letter.iter().any(|p| p.key == *id) {
            return Ok(CustomerPlace::Next);
        }
        if let Some(at) = statement.later.iter().position(|k| k == id) {
            return Ok(CustomerPlace::Later {
                ahead: statement.letter.len().saturating_add(at),
                per_mail,
            });
        }
    }
    Ok(CustomerPlace::Elsewhere)
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
            let invoices = customer_invoices(&db, settings, customer).await?;
            let mut explained = Vec::with_capacity(invoices.len());
            for id in &invoices {
                explained.push(explain_invoice(&db, settings, today, id).await?);
            }
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

/// The keys of `customer`'s invoices; a usage error when the source has
/// no `customer_id` column.
async fn customer_invoices(
    db: &Db,
    settings: &Settings,
    customer: &str,
) -> anyhow::Result<Vec<InvoiceId>> {
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
    db::explain::customer_invoices(db, customer, CUSTOMER_INVOICES)
        .await
        .map_err(db_failed("failed to read the customer's invoices"))
}
