//! A mail as the tick would compose it, for a reader: `preview` prints
//! an invoice's reminder or a customer's next statement, the console's
//! Preview page shows every step in every locale. Each is built by the
//! code the tick sends with ([`compose_reminder`], `mail::compose_statement`)
//! and parsed back into the parts a reader looks at; nothing is sent,
//! claimed or written.

use anyhow::{Context as _, anyhow};
use chrono::NaiveDate;

use super::desk::Desk;
use super::explain::customer_statements;
use super::{UsageError, db_failed};
use crate::config::{GroupBy, Settings};
use crate::db;
use crate::domain::{Customer, Invoice, InvoiceId, SourceProblem};
use crate::mail::{self, Templates};
use crate::stages::Step;

/// A built message as `preview` prints it and the console shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Shown {
    /// The header block, folded lines joined.
    pub headers: String,
    pub subject: String,
    pub text: String,
    /// None: the reminder is text only.
    pub html: Option<String>,
}

/// The parts of `composed` a reader looks at.
pub fn shown(composed: &mail::OutgoingMail) -> anyhow::Result<Shown> {
    let raw = composed.formatted();
    let headers_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let headers = String::from_utf8_lossy(&raw[..headers_end])
        .replace("\r\n ", " ")
        .replace("\r\n", "\n");
    let parsed = mail_parser::MessageParser::default()
        .parse(raw)
        .ok_or_else(|| anyhow!("the built message does not parse"))?;
    let has_html = parsed
        .html_part(0)
        .is_some_and(|p| matches!(p.body, mail_parser::PartType::Html(_)));
    Ok(Shown {
        headers,
        subject: parsed.subject().unwrap_or("").to_owned(),
        text: parsed.body_text(0).unwrap_or_default().into_owned(),
        html: has_html.then(|| parsed.body_html(0).unwrap_or_default().into_owned()),
    })
}

/// One step's reminder in one locale, about the sample invoice the
/// templates are checked against (`mail::sample`), built by the code the
/// tick sends with.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sample {
    pub step: String,
    pub stage: String,
    pub locale: String,
    pub mail: Shown,
}

/// Every step's reminder in every locale with templates, about the sample
/// invoice on `today`; `only`: just this (step, locale).
pub fn samples(
    settings: &Settings,
    templates: &Templates,
    today: chrono::NaiveDate,
    only: Option<(&str, &str)>,
) -> anyhow::Result<Vec<Sample>> {
    let stages = &settings.reminders.stages;
    let (invoice, customer) = mail::sample(today)
        .map_err(|e| anyhow::anyhow!("the sample invoice does not parse: {e}"))?;
    let mut found = Vec::new();
    for step in stages.steps() {
        for locale in templates.locales() {
            if only.is_some_and(|(s, l)| s != step.key.as_str() || l != locale) {
                continue;
            }
            let customer = crate::domain::Customer {
                locale: Some(locale.clone()),
                ..customer.clone()
            };
            let composed = compose_reminder(settings, templates, &invoice, &customer, step, today)
                .with_context(|| format!("step {} in {locale} cannot be built", step.key))?;
            found.push(Sample {
                step: step.key.to_string(),
                stage: stages.stage(step).name.clone(),
                locale,
                mail: shown(&composed)?,
            });
        }
    }
    Ok(found)
}

/// `invoice`'s reminder for `step` to `customer` on `today`, as the tick
/// builds it, under the Message-ID of its first attempt.
pub fn compose_reminder(
    settings: &Settings,
    templates: &Templates,
    invoice: &Invoice,
    customer: &Customer,
    step: &Step,
    today: NaiveDate,
) -> Result<mail::OutgoingMail, mail::MessageError> {
    let message_id = mail::message_id(&invoice.id, &step.key, &settings.smtp.message_id_domain);
    mail::compose(
        templates,
        &settings.reminders.stages,
        &settings.smtp,
        invoice,
        customer,
        step,
        message_id,
        &[],
        today,
    )
}

/// A built mail and what it is, for `preview`'s comment line.
#[derive(Debug)]
pub struct Previewed {
    pub mail: mail::OutgoingMail,
    pub what: String,
}

/// What `preview --customer` finds.
#[derive(Debug)]
pub enum StatementPreview {
    /// The statement the next tick would send.
    Built(Previewed),
    /// None today, and why.
    Nothing(String),
}

impl Desk {
    /// Invoice `id`'s reminder for `step` (None: its due step today) in
    /// `locale` (None: its own).
    pub async fn preview_invoice(
        &self,
        templates: &Templates,
        id: &InvoiceId,
        step: Option<&str>,
        locale: Option<String>,
    ) -> anyhow::Result<Previewed> {
        let settings = self.settings();
        let stages = &settings.reminders.stages;
        let rows = db::invoices::rows_by_key(self.db(), id)
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
        let today = self
            .today()
            .await
            .context("failed to read the database clock")?;
        let step = match step {
            Some(key) => stages.step(key).ok_or_else(|| {
                let keys: Vec<&str> = stages.steps().iter().map(|s| s.key.as_str()).collect();
                anyhow!(
                    "--step {key:?} is not a step; the steps are {}",
                    keys.join(", ")
                )
            })?,
            None => {
                stages.due_step(invoice.due_date, today).ok_or_else(|| {
                    anyhow!(
                        "invoice {id} (due {}) owes no reminder on {today}: its first step is later; pass --step to see one",
                        invoice.due_date
                    )
                })?
            }
        };
        if locale.is_some() {
            customer.locale = locale;
        }
        let mail = compose_reminder(settings, templates, &invoice, &customer, step, today)
            .context("the reminder cannot be built")?;
        Ok(Previewed {
            mail,
            what: format!("step {} on {today}", step.key),
        })
    }

    /// The statement the next tick would send `customer`, chosen by the
    /// tick's own rule from the rows it would read, claimed by nothing
    /// (its Message-ID ends in `.0.0`: the tick's names its first row and
    /// its run, which only a claim makes); `left_out` hears each row a
    /// source problem keeps out.
    pub async fn preview_statement(
        &self,
        templates: &Templates,
        customer: &str,
        locale: Option<String>,
        left_out: &mut (dyn FnMut(SourceProblem) + Send),
    ) -> anyhow::Result<StatementPreview> {
        let settings = self.settings();
        if settings.reminders.group_by != GroupBy::Customer {
            return Err(UsageError(
                "preview --customer needs reminders.group_by = \"customer\"".into(),
            )
            .into());
        }
        let stages = &settings.reminders.stages;
        let today = self
            .today()
            .await
            .map_err(db_failed("failed to read the database clock"))?;
        let now = self
            .now()
            .await
            .map_err(db_failed("failed to read the database clock"))?;
        let (chosen, rows) =
            customer_statements(self.db(), settings, (now, today), customer, left_out).await?;
        let by_key: std::collections::HashMap<Option<InvoiceId>, db::customers::CustomerRow> = rows
            .iter()
            .map(|r| (r.row.invoice_id.clone(), r.clone()))
            .collect();
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
            return Ok(StatementPreview::Nothing(format!(
                "customer {customer:?} gets no statement on {today} ({why})"
            )));
        };
        let mut first_customer = first_customer.clone();
        if locale.is_some() {
            first_customer.locale = locale;
        }
        let lines: Vec<mail::statement::Line<'_>> = parts
            .iter()
            .map(|(invoice, _, step)| mail::statement::Line { invoice, step })
            .collect();
        let message_id =
            mail::statement_message_id(customer, 0, 0, &settings.smtp.message_id_domain);
        let mail = mail::compose_statement(
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
        Ok(StatementPreview::Built(Previewed {
            mail,
            what: format!("statement of {} invoice(s) on {today}{more}", lines.len()),
        }))
    }
}
