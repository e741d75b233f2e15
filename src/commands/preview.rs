//! `preview`: the reminder an invoice would get, built by the same code the
//! tick sends with (`mail::compose`), printed instead of sent. Writes
//! nothing, claims nothing, connects to no SMTP server.

use std::process::ExitCode;

use anyhow::{Context as _, anyhow};

use super::{connect, exit};
use crate::config::Settings;
use crate::db;
use crate::domain::InvoiceId;
use crate::mail::{self, Templates};

pub(super) struct Request {
    pub invoice: String,
    pub stage: Option<String>,
    pub locale: Option<String>,
    pub html: bool,
}

pub(super) async fn preview(settings: &Settings, request: Request) -> anyhow::Result<ExitCode> {
    let stages = &settings.reminders.stages;
    let templates = Templates::load(&settings.templates, &settings.company, stages)?;
    let id = InvoiceId::from(request.invoice.trim());
    let pool = connect(settings).await?;
    super::check_source(&pool).await?;
    let rows = db::invoices::rows_by_key(&pool, &id)
        .await
        .context("failed to read the invoice from source.relation")?;
    let row = match <[_; 1]>::try_from(rows) {
        Ok([row]) => row,
        Err(rows) if rows.is_empty() => {
            return Err(anyhow!(
                "source.relation {} has no invoice_id {:?}",
                settings.source.relation,
                id.as_str()
            ));
        }
        Err(rows) => {
            return Err(anyhow!(
                "invoice {id}: repeated_key ({}{} rows of source.relation {} have this invoice_id; no reminder is sent until there is one)",
                rows.len(),
                if rows.len() >= 10 { " or more" } else { "" },
                settings.source.relation
            ));
        }
    };
    let (invoice, mut customer) = row
        .into_parts()
        .map_err(|problem| anyhow!("{problem}; no reminder is sent until it is fixed"))?;
    let today = db::today(&pool, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    let step = match &request.stage {
        Some(key) => stages.step(key).ok_or_else(|| {
            let keys: Vec<&str> = stages.steps().iter().map(|s| s.key.as_str()).collect();
            anyhow!(
                "--stage {key:?} is not a step; the steps are {}",
                keys.join(", ")
            )
        })?,
        None => {
            let age = (today - invoice.due_date).num_days();
            stages.due_step(age).ok_or_else(|| {
                anyhow!(
                    "invoice {id} (due {}) owes no reminder on {today}: its first step is later; pass --stage to see one",
                    invoice.due_date
                )
            })?
        }
    };
    if let Some(locale) = request.locale {
        customer.locale = Some(locale);
    }
    let composed = mail::compose(
        &templates,
        stages,
        &settings.smtp,
        &invoice,
        &customer,
        step,
        &[],
        today,
    )
    .context("the reminder cannot be built")?;
    let raw = composed.formatted();
    let headers_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let headers = String::from_utf8_lossy(&raw[..headers_end]).replace("\r\n ", " ");
    let parsed = mail_parser::MessageParser::default()
        .parse(raw)
        .ok_or_else(|| anyhow!("the built message does not parse"))?;
    outln!("{}", headers.replace("\r\n", "\n"));
    outln!(
        "# step {} on {today}; subject: {}",
        step.key,
        parsed.subject().unwrap_or("")
    );
    outln!();
    if request.html {
        let has_html = parsed
            .html_part(0)
            .is_some_and(|p| matches!(p.body, mail_parser::PartType::Html(_)));
        if !has_html {
            outln!("(no HTML part: this reminder is text only)");
            return Ok(ExitCode::from(exit::FAILURE));
        }
        outln!("{}", parsed.body_html(0).unwrap_or_default());
    } else {
        outln!("{}", parsed.body_text(0).unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}
