//! `GET /invoices/{id}` and, in customer mode, `GET /customers/{id}`: the
//! `explain` answer (made by `commands::explain::explain_invoice`, the
//! command's own code), the reminder history, and the latest archived
//! message: its text part escaped, its HTML part in a sandboxed frame
//! served by `GET /invoices/{id}/messages/{message_id}` under a CSP of its
//! own (no script, nothing fetched, framed by the console only), and the
//! raw bytes as `.eml` from `.../raw`. A message is served only for a
//! Message-ID of that invoice's reminders. An unknown id answers 404.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use minijinja::context;

use super::App;
use super::pages::{self, render};
use super::session::Signed;
use crate::commands::explain::{Explained, explain_customer, explain_invoice};
use crate::config::GroupBy;
use crate::db;
use crate::db::archive::ArchivedMessage;
use crate::domain::InvoiceId;

/// The archived message's own policy: sandboxed (no script, no forms, an
/// opaque origin), nothing fetched but inline styles and `data:` images,
/// and framed only by the console.
pub const MESSAGE_CSP: &str =
    "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'";

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

/// The archived message as the page shows it.
#[derive(Debug, serde::Serialize)]
struct Message {
    message_id: String,
    sha256: String,
    archived: String,
    text: Option<String>,
    has_html: bool,
}

/// `explain --customer` for `customer` today, its invoices read at once.
async fn explain_whole_customer(
    app: &App,
    customer: &str,
) -> anyhow::Result<crate::commands::explain::CustomerExplained> {
    let today = db::today(&app.db, app.settings.schedule.timezone).await?;
    explain_customer(&app.db, &app.settings, today, customer, CUSTOMER_INVOICES).await
}

/// `explain` for `id` today, as the command answers it.
pub(super) async fn explain(app: &App, id: &InvoiceId) -> anyhow::Result<Explained> {
    let today = db::today(&app.db, app.settings.schedule.timezone).await?;
    explain_invoice(&app.db, &app.settings, today, id).await
}

fn failed(app: &App, doing: &str, e: &anyhow::Error) -> Response {
    let e: &(dyn std::error::Error + 'static) = e.as_ref();
    pages::failed(app, doing, e)
}

/// A 404 page naming what was asked for (escaped by the template).
pub(super) fn not_found(app: &App, signed: &Signed, what: String) -> Response {
    render(
        app,
        Some(signed),
        StatusCode::NOT_FOUND,
        "message.html",
        context! { title => "Not found", message => format!("{what} is not in the billing source and has no reminders.") },
    )
}

/// `GET /invoices/{id}`.
pub async fn invoice(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
) -> Response {
    invoice_page(&app, &signed, &id, StatusCode::OK, None).await
}

/// The invoice page, with `notice` (a refused form's message) and `status`.
pub(super) async fn invoice_page(
    app: &App,
    signed: &Signed,
    id: &str,
    status: StatusCode,
    notice: Option<&str>,
) -> Response {
    let key = InvoiceId::from(id);
    let explained = match explain(app, &key).await {
        Ok(e) => e,
        Err(e) => return failed(app, "explain the invoice", &e),
    };
    if !explained.is_known() {
        return not_found(app, signed, format!("Invoice {id}"));
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
        Some(message_id) => match db::archive::archived_message(&app.db, &message_id).await {
            Ok(Some(m)) => (Some(shown(app, &m)), None),
            Ok(None) => (
                None,
                Some(format!(
                    "<{message_id}> is not in the archive (archive.store = \"none\", or older than archive.keep_days)."
                )),
            ),
            Err(db::archive::ArchiveError::Database(e)) => {
                return pages::failed(app, "read the message archive", &e);
            }
            Err(e) => (None, Some(e.to_string())),
        },
    };
    let pause = explained.console_pause.clone();
    let source = explained.source.clone();
    let amount = source.as_ref().and_then(|s| amount_text(app, s));
    let customer_mode = app.settings.reminders.group_by == GroupBy::Customer;
    render(
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
            source,
            amount,
            pause_own => pause.as_ref().is_some_and(|p| p.invoice_id.is_some()),
            pause_customer => pause.as_ref().and_then(|p| p.customer_id.clone()),
            pause_by => pause.as_ref().map(|p| p.paused_by.clone()),
            pause_at => pause.as_ref().map(|p| pages::when(app, p.paused_at)),
            pause_reason => pause.map(|p| p.reason),
            customer_mode,
            history,
            message,
            archive_note,
        },
    )
}

/// The archived message's parts for the page.
fn shown(app: &App, m: &ArchivedMessage) -> Message {
    let parsed = mail_parser::MessageParser::default().parse(&m.bytes);
    let text = parsed
        .as_ref()
        .and_then(|p| p.body_text(0))
        .map(|t| t.into_owned());
    let has_html = parsed.as_ref().is_some_and(|p| {
        p.html_body
            .first()
            .and_then(|i| p.part(*i))
            .is_some_and(|part| matches!(part.body, mail_parser::PartType::Html(_)))
    });
    Message {
        message_id: m.message_id.clone(),
        sha256: hex(&m.sha256),
        archived: pages::when(app, m.archived_at),
        text,
        has_html,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The archived message `message_id` of invoice `id`, if it is one of the
/// invoice's and in the archive; otherwise the answer to give.
async fn archived_of(app: &App, id: &str, message_id: &str) -> Result<ArchivedMessage, Response> {
    let proofs = db::archive::proofs_of_invoice(&app.db, &InvoiceId::from(id))
        .await
        .map_err(|e| pages::failed(app, "read the invoice's reminders", &e))?;
    if !proofs
        .iter()
        .any(|p| p.message_id.as_deref() == Some(message_id))
    {
        return Err(StatusCode::NOT_FOUND.into_response());
    }
    match db::archive::archived_message(&app.db, message_id).await {
        Ok(Some(m)) => Ok(m),
        Ok(None) => Err(StatusCode::NOT_FOUND.into_response()),
        Err(db::archive::ArchiveError::Database(e)) => {
            Err(pages::failed(app, "read the message archive", &e))
        }
        Err(e) => {
            tracing::error!(error = %e, "an archived message is damaged");
            Err(StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}

/// `GET /invoices/{id}/messages/{message_id}`: the HTML part as stored,
/// under [`MESSAGE_CSP`].
pub async fn message_html(
    State(app): State<App>,
    Path((id, message_id)): Path<(String, String)>,
) -> Response {
    let m = match archived_of(&app, &id, &message_id).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let parsed = mail_parser::MessageParser::default().parse(&m.bytes);
    let Some(html) = parsed
        .as_ref()
        .and_then(|p| p.body_html(0))
        .map(|h| h.into_owned())
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, MESSAGE_CSP),
        ],
        html,
    )
        .into_response()
}

/// `GET /invoices/{id}/messages/{message_id}/raw`: the message exactly as
/// sent, as a `.eml` download.
pub async fn message_raw(
    State(app): State<App>,
    Path((id, message_id)): Path<(String, String)>,
) -> Response {
    let m = match archived_of(&app, &id, &message_id).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let file: String = message_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "@.-_+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    (
        [
            (header::CONTENT_TYPE, "message/rfc822".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}.eml\""),
            ),
        ],
        m.bytes,
    )
        .into_response()
}

/// One invoice of a customer's page.
#[derive(Debug, serde::Serialize)]
struct CustomerInvoice {
    id: String,
    number: Option<String>,
    reason: &'static str,
    reason_detail: String,
}

/// `GET /customers/{id}` (customer mode; 404 otherwise).
pub async fn customer(
    State(app): State<App>,
    Extension(signed): Extension<Signed>,
    Path(id): Path<String>,
) -> Response {
    customer_page(&app, &signed, &id, StatusCode::OK, None).await
}

/// The customer page, with `notice` and `status`.
pub(super) async fn customer_page(
    app: &App,
    signed: &Signed,
    id: &str,
    status: StatusCode,
    notice: Option<&str>,
) -> Response {
    if app.settings.reminders.group_by != GroupBy::Customer {
        return not_found(app, signed, format!("Customer {id}"));
    }
    let explained = match explain_whole_customer(app, id).await {
        Ok(e) => e,
        Err(e) => return failed(app, "explain the customer's invoices", &e),
    };
    if explained.invoices.is_empty() {
        return not_found(app, signed, format!("Customer {id}"));
    }
    let pause = explained.pause;
    let invoices: Vec<CustomerInvoice> = explained
        .invoices
        .into_iter()
        .map(|e| CustomerInvoice {
            id: e.invoice_id.to_string(),
            number: e.source.and_then(|s| s.invoice_number),
            reason: e.reason.label(),
            reason_detail: e.reason_detail,
        })
        .collect();
    render(
        app,
        Some(signed),
        status,
        "customer.html",
        context! {
            title => format!("Customer {id}"),
            id,
            notice,
            invoices,
            paused => pause.is_some(),
            pause_by => pause.as_ref().map(|p| p.paused_by.clone()),
            pause_at => pause.as_ref().map(|p| pages::when(app, p.paused_at)),
            pause_reason => pause.map(|p| p.reason),
        },
    )
}

/// The invoice's amount as its mails write it (the customer's locale, else
/// `templates.default_locale`); None when the row has no usable amount.
fn amount_text(app: &App, source: &crate::commands::explain::SourceView) -> Option<String> {
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
