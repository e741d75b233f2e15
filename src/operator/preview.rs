//! A mail as the tick would compose it, for a reader: `preview` prints
//! one, the console's Preview page shows every step in every locale. Each
//! is built by the code the tick sends with (`mail::compose`) and parsed
//! back into the parts a reader looks at; nothing is sent or written.

use anyhow::{Context as _, anyhow};

use crate::config::Settings;
use crate::mail::{self, Templates};

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
            let message_id =
                mail::message_id(&invoice.id, &step.key, &settings.smtp.message_id_domain);
            let composed = mail::compose(
                templates,
                stages,
                &settings.smtp,
                &invoice,
                &customer,
                step,
                message_id,
                &[],
                today,
            )
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
