//! What `explain` reads for any number of invoices, each kind once for
//! all of them (their reminders, the suppression list, the console's
//! pauses, the payment holds, the customer's statements in customer
//! mode), and the facts each invoice is decided from.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};

use super::{CustomerPlace, Explained, Facts, decide, rules};
use crate::config::Settings;
use crate::db::customers::Retries;
use crate::db::owing::OwingDay;
use crate::db::reminders::Backoff;
use crate::db::{self, Db};
use crate::domain::InvoiceId;
use crate::operator::db_failed;

/// The invoices `keys` (of `customer`, if known) explained from their
/// `sources`: their reminders, the suppression list, the console's pauses
/// (returned too) and, in customer mode, the customer's statements, each
/// read once for all of them.
pub(super) async fn explain_keys(
    db: &Db,
    settings: &Settings,
    (now, today): (DateTime<Utc>, NaiveDate),
    keys: &[InvoiceId],
    sources: Vec<db::explain::SourceFacts>,
    customer: Option<String>,
) -> anyhow::Result<(Vec<Explained>, Vec<db::pauses::ConsolePause>)> {
    let r = &settings.reminders;
    let tz = settings.customer_timezone().name();
    let backoff = Backoff {
        first: r.retry_backoff,
        max: r.retry_backoff_max,
    };
    let reminders = db::explain::reminder_rows(db, keys, tz, backoff)
        .await
        .map_err(db_failed("failed to read the invoice's reminders"))?;
    // The recipients of each key's one source row, against the list.
    let recipients_of = |sources: &[db::explain::SourceFacts]| -> Vec<String> {
        match sources {
            [one] => one
                .row
                .customer_email
                .as_deref()
                .and_then(|cell| crate::domain::Recipients::parse(cell).ok())
                .map(|r| r.addresses().iter().map(ToString::to_string).collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    };
    // Each key's source rows and reminders, sorted out once.
    let mut sources_of: HashMap<InvoiceId, Vec<db::explain::SourceFacts>> = HashMap::new();
    for row in sources {
        if let Some(id) = row.row.invoice_id.clone() {
            sources_of.entry(id).or_default().push(row);
        }
    }
    let mut reminders_of: HashMap<InvoiceId, Vec<db::explain::ReminderFacts>> = HashMap::new();
    for row in reminders {
        reminders_of
            .entry(row.invoice_id.clone())
            .or_default()
            .push(row);
    }
    let recipients: Vec<Vec<String>> = keys
        .iter()
        .map(|id| recipients_of(sources_of.get(id).map_or(&[], Vec::as_slice)))
        .collect();
    let mut everyone: Vec<String> = recipients.iter().flatten().cloned().collect();
    everyone.sort();
    everyone.dedup();
    let suppressed = match everyone.is_empty() {
        true => Vec::new(),
        false => db::suppressions::find(db, &everyone)
            .await
            .map_err(db_failed("failed to read the suppression list"))?,
    };
    let customer_mode = settings.reminders.group_by == crate::config::GroupBy::Customer;
    let (days, chosen) = match (customer_mode, customer.as_deref()) {
        (true, Some(customer)) => (
            db::explain::customer_reminder_days(db, customer, tz)
                .await
                .map_err(db_failed("failed to read the customer's reminders"))?,
            Some(
                customer_statements(db, settings, (now, today), customer, &mut |_| {})
                    .await?
                    .0,
            ),
        ),
        _ => (Vec::new(), None),
    };
    let (pauses, holds) = db::payments::with_pauses(db, keys, customer.as_deref())
        .await
        .map_err(db_failed(
            "failed to read the console's pauses and the payment holds",
        ))?;
    let mut holds_of: HashMap<String, Vec<db::payments::PaymentHold>> = HashMap::new();
    for hold in holds {
        holds_of
            .entry(hold.invoice_id.clone())
            .or_default()
            .push(hold);
    }
    let mut explained = Vec::with_capacity(keys.len());
    for (id, recipients) in keys.iter().zip(recipients) {
        let sources = sources_of.remove(id).unwrap_or_default();
        let suppressed: Vec<_> = suppressed
            .iter()
            .filter(|s| recipients.iter().any(|a| s.address.eq_ignore_ascii_case(a)))
            .cloned()
            .collect();
        let all_suppressed = !recipients.is_empty()
            && recipients
                .iter()
                .all(|a| suppressed.iter().any(|s| s.address.eq_ignore_ascii_case(a)));
        let own_customer = match sources.as_slice() {
            [one] => one.row.customer_id.clone(),
            _ => None,
        };
        let (customer_last, customer_place) =
            match (&chosen, customer.as_deref(), own_customer.as_deref()) {
                (Some(chosen), Some(customer), Some(own)) if own == customer => (
                    days.iter()
                        .filter(|(invoice, _)| invoice != id)
                        .map(|(_, day)| *day)
                        .max(),
                    Some(place_of(chosen, customer, id, settings)),
                ),
                _ => (None, None),
            };
        let console_pause = own_customer
            .as_ref()
            .map_or_else(
                || {
                    pauses
                        .iter()
                        .find(|p| p.invoice_id.as_deref() == Some(id.as_str()))
                },
                |_| db::pauses::pausing(&pauses, id),
            )
            .cloned();
        let facts = Facts {
            invoice_id: id.clone(),
            today,
            timezone: tz.to_owned(),
            sources,
            reminders: reminders_of.remove(id).unwrap_or_default(),
            suppressed,
            all_suppressed,
            customer_last,
            customer_place,
            console_pause,
            payment_holds: holds_of.remove(id.as_str()).unwrap_or_default(),
        };
        explained.push(decide(facts, rules(settings)));
    }
    Ok((explained, pauses))
}

/// Customer mode: what `customer` gets from the next ticks, chosen by the
/// tick's own rule (`tick::statements`) from the rows the tick would read;
/// `left_out` hears each row a source problem keeps out.
pub(crate) async fn customer_statements(
    db: &Db,
    settings: &Settings,
    (now, today): (DateTime<Utc>, NaiveDate),
    customer: &str,
    left_out: &mut (dyn FnMut(crate::domain::SourceProblem) + Send),
) -> anyhow::Result<(crate::tick::Chosen, Vec<db::customers::CustomerRow>)> {
    let (rows, suppressed) = db::customers::fetch_whole_customer(
        db,
        &OwingDay::from_settings(settings, now, today),
        &Retries::from_settings(&settings.reminders, 0),
        customer,
        settings.reminders.batch_size,
    )
    .await
    .map_err(db_failed("failed to read the customer's invoices"))?;
    let per_mail = settings.reminders.max_invoices_per_mail.get();
    let chosen = crate::tick::statements(rows.clone(), per_mail, &suppressed, today, &mut |p| {
        left_out(p)
    });
    Ok((chosen, rows))
}

/// Customer mode: where invoice `id` stands in what `customer` gets from
/// the next ticks (`chosen`, [`customer_statements`]).
fn place_of(
    chosen: &crate::tick::Chosen,
    customer: &str,
    id: &InvoiceId,
    settings: &Settings,
) -> CustomerPlace {
    if chosen.waiting.iter().any(|c| c == customer) {
        return CustomerPlace::WaitsForRetry;
    }
    let per_mail = settings.reminders.max_invoices_per_mail.get();
    for statement in &chosen.statements {
        if statement.letter.iter().any(|p| p.key == *id) {
            return CustomerPlace::Next;
        }
        if let Some(at) = statement.later.iter().position(|k| k == id) {
            return CustomerPlace::Later {
                ahead: statement.letter.len().saturating_add(at),
                per_mail,
            };
        }
    }
    CustomerPlace::Elsewhere
}
