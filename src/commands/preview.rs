//! `preview`: the reminder an invoice would get, built by the same code the
//! tick sends with (`mail::compose`), printed instead of sent. Writes
//! nothing, claims nothing, connects to no SMTP server.

use std::process::ExitCode;

use anyhow::{Context as _, anyhow};

use super::{connect, exit};
use crate::config::{GroupBy, Settings};
use crate::db;
use crate::db::customers::Retries;
use crate::db::owing::OwingDay;
use crate::domain::InvoiceId;
use crate::mail::{self, Templates};
use crate::operator::preview::shown;
use crate::tick;

pub struct Request {
    pub invoice: String,
    /// Customer mode: the statement for this customer instead.
    pub customer: Option<String>,
    pub step: Option<String>,
    pub locale: Option<String>,
    pub html: bool,
}

pub async fn preview(settings: &Settings, request: Request) -> anyhow::Result<ExitCode> {
    let stages = &settings.reminders.stages;
    let templates = Templates::load(&settings.templates, &settings.company, stages)
        .map_err(|e| super::UsageError(e.to_string()))?;
    let pool = connect(settings).await?;
    super::check_source(&pool).await?;
    if let Some(customer) = &request.customer {
        let locale = request.locale.clone();
        return preview_statement(
            settings,
            &templates,
            &pool,
            customer.trim(),
            locale,
            request.html,
        )
        .await;
    }
    let id = InvoiceId::from(request.invoice.trim());
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
    let step = match &request.step {
        Some(key) => stages.step(key).ok_or_else(|| {
            let keys: Vec<&str> = stages.steps().iter().map(|s| s.key.as_str()).collect();
            anyhow!(
                "--step {key:?} is not a step; the steps are {}",
                keys.join(", ")
            )
        })?,
        None => {
            let age = (today - invoice.due_date).num_days();
            stages.due_step(age).ok_or_else(|| {
                anyhow!(
                    "invoice {id} (due {}) owes no reminder on {today}: its first step is later; pass --step to see one",
                    invoice.due_date
                )
            })?
        }
    };
    if let Some(locale) = request.locale {
        customer.locale = Some(locale);
    }
    let message_id = mail::message_id(&invoice.id, &step.key, &settings.smtp.message_id_domain);
    let composed = mail::compose(
        &templates,
        stages,
        &settings.smtp,
        &invoice,
        &customer,
        step,
        message_id,
        &[],
        today,
    )
    .context("the reminder cannot be built")?;
    print(
        &composed,
        &format!("step {} on {today}", step.key),
        request.html,
    )
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

/// `preview --customer`: the statement the next tick would send this
/// customer, chosen by the tick's own rule (`tick::statements`) from the
/// rows it would read, claimed by nothing. Its Message-ID ends in `.0.0`:
/// the tick's names the mail's first reminder row and its run, which only
/// a claim creates.
async fn preview_statement(
    settings: &Settings,
    templates: &Templates,
    pool: &db::Db,
    customer: &str,
    locale: Option<String>,
    html: bool,
) -> anyhow::Result<ExitCode> {
    if settings.reminders.group_by != GroupBy::Customer {
        return Err(super::UsageError(
            "preview --customer needs reminders.group_by = \"customer\"".into(),
        )
        .into());
    }
    let stages = &settings.reminders.stages;
    let today = db::today(pool, settings.schedule.timezone)
        .await
        .context("failed to read the database clock")?;
    let read = "failed to read the customer's invoices from source.relation";
    let (rows, suppressed) = db::customers::fetch_whole_customer(
        pool,
        &OwingDay::from_settings(settings, today),
        &Retries::from_settings(&settings.reminders, 0),
        customer,
        settings.reminders.batch_size,
    )
    .await
    .context(read)?;
    let by_key: std::collections::HashMap<Option<InvoiceId>, db::customers::CustomerRow> = rows
        .iter()
        .map(|r| (r.row.invoice_id.clone(), r.clone()))
        .collect();
    let per_mail = usize::try_from(settings.reminders.max_invoices_per_mail).unwrap_or(usize::MAX);
    let mut left_out = Vec::new();
    let chosen = tick::statements(rows, per_mail, &suppressed, today, &mut |problem| {
        left_out.push(problem);
    });
    for problem in left_out {
        outln!("# left out: {problem}");
    }
    let mut parts = Vec::new();
    for pick in chosen.statements.iter().flat_map(|s| &s.letter) {
        let Some(owed) = by_key.get(&Some(pick.key.clone())) else {
            continue;
        };
        let Some(step) = stages.step(owed.step.as_str()) else {
            continue;
        };
        if let Ok((invoice, customer)) = owed.row.clone().into_parts() {
            parts.push((invoice, customer, step));
        }
    }
    let Some((_, first_customer, _)) = parts.first() else {
        let why = if chosen.waiting.is_empty() {
            "none of its invoices owes a step it can be mailed, or it was reminded within reminders.min_days_between"
        } else {
            "a failed statement's retry is waiting for its backoff, and everything new goes out with it"
        };
        outln!("customer {customer:?} gets no statement on {today} ({why})");
        return Ok(ExitCode::from(exit::FAILURE));
    };
    let mut first_customer = first_customer.clone();
    if locale.is_some() {
        first_customer.locale = locale;
    }
    let lines: Vec<mail::statement::Line<'_>> = parts
        .iter()
        .map(|(invoice, _, step)| mail::statement::Line { invoice, step })
        .collect();
    let message_id = mail::statement_message_id(customer, 0, 0, &settings.smtp.message_id_domain);
    let composed = mail::compose_statement(
        templates,
        stages,
        &settings.smtp,
        &lines,
        &first_customer,
        message_id,
        &[],
        today,
    )
    .context("the statement cannot be built")?;
    let more = if chosen.statements.iter().any(|s| s.continued) {
        "; more follow on the next tick (reminders.max_invoices_per_mail)"
    } else {
        ""
    };
    print(
        &composed,
        &format!("statement of {} invoice(s) on {today}{more}", lines.len()),
        html,
    )
}
