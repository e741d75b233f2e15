//! `GET /invoices/{id}` and, in customer mode, `GET /customers/{id}`: the
//! `explain` answer (`operator::explain`, the command's own code), the
//! amount as the mails write it, the reminder history, and the latest
//! archived message (its text part escaped, its HTML part in the frame
//! `messages` serves). An unknown id answers 404.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use minijinja::context;

use super::App;
use super::failure::{Failure, Page, failed};
use super::messages;
use super::pages::{self, render};
use super::session::Signed;
use crate::config::GroupBy;
use crate::domain::{Hours, InvoiceId};
use crate::operator::archive::Archived;
use crate::operator::desk::Desk;
use crate::operator::explain::{
    CustomerExplained, Explained, SourceView, explain_customer, explain_invoice,
};

/// How many invoices a customer's page lists at most.
const CUSTOMER_INVOICES: u32 = 200;

/// One reminder row as the history shows it.
#[derive(Debug, serde::Serialize)]
struct HistoryRow {
    step: String,
    status: String,
    attempts: i32,
    claimed: String,
    started: Option<String>,
    sent: Option<String>,
    message_id: Option<String>,
    outcome: Option<String>,
}

/// `explain --customer` for `customer` today, its invoices read at once.
async fn explain_whole_customer(desk: &Desk, customer: &str) -> anyhow::Result<CustomerExplained> {
    explain_customer(desk, customer, CUSTOMER_INVOICES).await
}

/// `explain` for `id` today, as the command answers it.
pub(super) async fn explain(desk: &Desk, id: &InvoiceId) -> anyhow::Result<Explained> {
    explain_invoice(desk, id).await
}

/// `GET /invoices/{id}`.
pub async fn invoice(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
) -> Page {
    invoice_page(&app, &signed, &id, StatusCode::OK, None).await
}

/// The invoice page, with `notice` (a refused form's message) and `status`.
pub(super) async fn invoice_page(
    app: &App,
    signed: &Signed,
    id: &str,
    status: StatusCode,
    notice: Option<&str>,
) -> Page {
    let key = InvoiceId::from(id);
    let desk = app.desk();
    let explained = explain(&desk, &key)
        .await
        .map_err(failed("explain the invoice"))?;
    if !explained.is_known() {
        return Err(Failure::NotFound(format!("Invoice {id}")));
    }
    let history: Vec<HistoryRow> = explained
        .reminders
        .iter()
        .map(|r| HistoryRow {
            step: r.row.step.to_string(),
            status: r.row.status.clone(),
            attempts: r.row.attempts,
            claimed: pages::when(app, r.row.claimed_at),
            started: r.row.started_at.map(|t| pages::when(app, t)),
            sent: r.row.sent_at.map(|t| pages::when(app, t)),
            message_id: r.row.message_id.clone(),
            outcome: r
                .row
                .smtp_reply
                .clone()
                .or_else(|| r.row.last_error.clone()),
        })
        .collect();
    let latest = explained
        .reminders
        .iter()
        .rev()
        .filter(|r| r.row.status == "sent")
        .find_map(|r| r.row.message_id.clone());
    let (message, archive_note) = match latest {
        None => (None, None),
        Some(message_id) => match desk
            .archived(&message_id)
            .await
            .map_err(failed("read the message archive"))?
        {
            Archived::Kept(m) => (Some(messages::shown(app, &m)), None),
            Archived::NotKept(sentence) => (None, Some(format!("{sentence}."))),
            Archived::Damaged(why) => (None, Some(why)),
        },
    };
    let pause = explained.console_pause.clone();
    let hold = explained.payment_hold.clone();
    let source = explained.source.clone();
    let amount = source.as_ref().and_then(|s| amount_text(app, s));
    let customer_mode = app.settings.reminders.group_by == GroupBy::Customer;
    Ok(render(
        app,
        Some(signed),
        status,
        "invoice.html",
        context! {
            title => format!("Invoice {id}"),
            id,
            notice,
            reason => explained.reason.label(),
            reason_detail => explained.reason_detail,
            next_step => explained.next_step.map(|s| s.to_string()),
            next_date => explained.next_date.map(|d| d.to_string()),
            late_payment => explained.late_payment_working,
            source,
            amount,
            pause_own => pause.as_ref().is_some_and(|p| p.invoice_id.is_some()),
            pause_customer => pause.as_ref().and_then(|p| p.customer_id.clone()),
            pause_by => pause.as_ref().map(|p| p.paused_by.clone()),
            pause_at => pause.as_ref().map(|p| pages::when(app, p.paused_at)),
            pause_reason => pause.map(|p| p.reason),
            hold_at => hold.as_ref().map(|h| pages::when(app, h.event_at)),
            hold_until => hold.as_ref().and_then(|h| h.expires_at).map(|t| pages::when(app, t)),
            hold,
            customer_mode,
            history,
            message,
            archive_note,
        },
    ))
}

/// One invoice of a customer's page.
#[derive(Debug, serde::Serialize)]
struct CustomerInvoice {
    id: String,
    number: Option<String>,
    /// As its mails write it.
    amount: Option<String>,
    reason: &'static str,
    reason_detail: String,
}

/// `GET /customers/{id}` (customer mode; 404 otherwise).
pub async fn customer(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
) -> Page {
    customer_page(&app, &signed, &id, StatusCode::OK, None).await
}

/// The customer page, with `notice` and `status`.
pub(super) async fn customer_page(
    app: &App,
    signed: &Signed,
    id: &str,
    status: StatusCode,
    notice: Option<&str>,
) -> Page {
    if app.settings.reminders.group_by != GroupBy::Customer {
        return Err(Failure::NotFound(format!("Customer {id}")));
    }
    let explained = explain_whole_customer(&app.desk(), id)
        .await
        .map_err(failed("explain the customer's invoices"))?;
    if explained.invoices.is_empty() {
        return Err(Failure::NotFound(format!("Customer {id}")));
    }
    let pause = explained.pause;
    // The customer's send window: the zone its day and hours are read in
    // (its own, else the window's), and the calendar whose holidays stay
    // closed.
    let window = app.settings.send_window();
    let (timezone, calendar) = explained.invoices.first().map_or_else(
        || {
            (
                window.timezone.name().to_owned(),
                window.open.holidays().map(|h| h.name().to_owned()),
            )
        },
        |e| (e.timezone.clone(), e.calendar.clone()),
    );
    let invoices: Vec<CustomerInvoice> = explained
        .invoices
        .into_iter()
        .map(|e| CustomerInvoice {
            id: e.invoice_id.to_string(),
            amount: e.source.as_ref().and_then(|s| amount_text(app, s)),
            number: e.source.and_then(|s| s.invoice_number),
            reason: e.reason.label(),
            reason_detail: e.reason_detail,
        })
        .collect();
    Ok(render(
        app,
        Some(signed),
        status,
        "customer.html",
        context! {
            timezone,
            calendar,
            window_days => window.open.days().to_string(),
            window_hours => if window.hours == Hours::ALL_DAY { "all day".to_owned() } else { window.hours.to_string() },
            title => format!("Customer {id}"),
            id,
            notice,
            invoices,
            paused => pause.is_some(),
            pause_by => pause.as_ref().map(|p| p.paused_by.clone()),
            pause_at => pause.as_ref().map(|p| pages::when(app, p.paused_at)),
            pause_reason => pause.map(|p| p.reason),
        },
    ))
}

/// The invoice's amount as its mails write it (the customer's locale, else
/// `templates.default_locale`); None when the row has no usable amount.
fn amount_text(app: &App, source: &SourceView) -> Option<String> {
    use crate::domain::{Currency, Money};
    let currency = Currency::parse(source.currency.as_deref()?).ok()?;
    let money = match (&source.amount, source.amount_minor) {
        (Some(major), _) => Money::from_major(major, currency).ok()?,
        (None, Some(minor)) => Money::from_minor(minor, currency),
        (None, None) => return None,
    };
    let locale = source
        .locale
        .as_deref()
        .unwrap_or(&app.settings.templates.default_locale);
    app.formats
        .money(money.minor(), money.currency().as_str(), locale)
        .ok()
}
