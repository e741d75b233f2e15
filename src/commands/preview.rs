//! `preview`: the reminder an invoice would get, built by the same code the
//! tick sends with (`mail::compose`), printed instead of sent. Writes
//! nothing, claims nothing, connects to no SMTP server.

use std::process::ExitCode;

use super::exit;
use crate::config::Settings;
use crate::domain::InvoiceId;
use crate::mail::{self, Templates};
use crate::operator::preview::{StatementPreview, shown};

pub struct Request {
    pub invoice: String,
    /// Customer mode: the statement for this customer instead.
    pub customer: Option<String>,
    pub step: Option<String>,
    pub locale: Option<String>,
    pub html: bool,
}

pub async fn preview(settings: &Settings, request: Request) -> anyhow::Result<ExitCode> {
    let templates = Templates::load(
        &settings.templates,
        &settings.company,
        &settings.late_payment,
        &settings.reminders.stages,
    )
    .map_err(|e| super::UsageError(e.to_string()))?;
    let desk = super::desk(settings).await?;
    desk.check_source().await?;
    if let Some(customer) = &request.customer {
        let mut left_out = Vec::new();
        let found = desk
            .preview_statement(&templates, customer.trim(), request.locale, &mut |p| {
                left_out.push(p);
            })
            .await?;
        for problem in left_out {
            outln!("# left out: {problem}");
        }
        return match found {
            StatementPreview::Built(p) => print(&p.mail, &p.what, request.html),
            StatementPreview::Nothing(why) => {
                outln!("{why}");
                Ok(ExitCode::from(exit::FAILURE))
            }
        };
    }
    let id = InvoiceId::from(request.invoice.trim());
    let previewed = desk
        .preview_invoice(&templates, &id, request.step.as_deref(), request.locale)
        .await?;
    print(&previewed.mail, &previewed.what, request.html)
}

/// Prints a built message: its headers, a comment line, then its text (or
/// HTML) body. Exit 1 when the HTML part is asked for and there is none.
fn print(composed: &mail::OutgoingMail, what: &str, html: bool) -> anyhow::Result<ExitCode> {
    let shown = shown(composed)?;
    outln!("{}", shown.headers);
    outln!("# {what}; subject: {}", shown.subject);
    outln!();
    match (html, shown.html) {
        (true, None) => {
            outln!("(no HTML part: this reminder is text only)");
            return Ok(ExitCode::from(exit::FAILURE));
        }
        (true, Some(body)) => outln!("{body}"),
        (false, _) => outln!("{}", shown.text),
    }
    Ok(ExitCode::SUCCESS)
}
