//! Reminder templates: files rendered with minijinja.
//!
//! Layout (a contract users write to): `{templates.dir}/{locale}/{template}
//! .subject.j2`, `.txt.j2` and, optionally, `.html.j2`. The templates under
//! `templates/` in the repository are compiled into the binary; files in
//! `templates.dir` add locales and templates, and replace a built-in
//! template as a whole (all of its files) when they provide any of them. HTML is
//! auto-escaped, text is not; undefined variables are errors.
//!
//! This file renders; loading and the start-up check are `load.rs`'s.
//!
//! Guarantees: at start-up every stage's template exists for
//! `templates.default_locale`, and every template file (and
//! `company.payment_url`, to nothing or an http(s) URL) renders against a
//! sample reminder, or loading fails naming the file and line. The payment
//! link a reminder shows is checked per invoice (see `links`). A customer's locale is looked up as
//! `de-CH` → `de` → `templates.default_locale`, per template.

use std::collections::BTreeMap;

use chrono::NaiveDate;
use icu_locale_core::Locale;
use minijinja::Environment;

use super::format::Formats;
use super::late;
use super::links::{self, PAYMENT_URL, PaymentUrlTemplate};
use super::text::{MAX_SUBJECT_CHARS, Rendered};
use super::vars::Vars;
use crate::config::{CompanySettings, LatePaymentSettings};
use crate::domain::sanitize;
use crate::domain::{Customer, Invoice};
use crate::late_payment::Claim;
use crate::locale::parse_locale;
use crate::stages::{Stage, Step};

/// A template problem found at start-up; `main` exits 2 with it.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("template {file}{}: {reason}", line.map(|l| format!(", line {l}")).unwrap_or_default())]
    Broken {
        file: String,
        line: Option<usize>,
        reason: String,
    },
    #[error(
        "templates.default_locale = {locale:?}: stage {stage:?} needs {file}, which does not exist"
    )]
    Missing {
        locale: String,
        stage: String,
        file: String,
    },
    #[error("templates.dir = {dir}: {reason}")]
    Dir { dir: String, reason: String },
}

/// The loaded templates and what rendering them needs. Built once.
pub struct Templates {
    pub(super) env: Environment<'static>,
    /// Where each template came from, for messages: a path or "built-in x".
    pub(super) origins: BTreeMap<String, String>,
    pub(super) default_locale: String,
    pub(super) company: CompanySettings,
    /// `company.payment_url`, compiled; None when unset.
    pub(super) payment_url: Option<PaymentUrlTemplate>,
    /// `[late_payment]`, with its rates.
    pub(super) late_payment: LatePaymentSettings,
    /// The formats the filters use, for the letter's figures.
    pub(super) formats: Formats,
}

impl Templates {
    /// The payment link for `invoice`: the source's own when it has one,
    /// else `company.payment_url` rendered; empty when there is none or it
    /// is not an absolute http(s) URL (then with a warning naming the
    /// invoice: the reminder goes out without the link).
    pub(super) fn payment_link(
        &self,
        invoice: &Invoice,
        vars: &Vars<'_>,
    ) -> Result<String, RenderError> {
        let (link, origin) = match (&invoice.payment_url, &self.payment_url) {
            (Some(link), _) => (link.trim().to_owned(), "the source's payment_url"),
            (None, Some(template)) => (
                template
                    .render(vars)
                    .map_err(|e| render_error(PAYMENT_URL, &e))?,
                PAYMENT_URL,
            ),
            (None, None) => return Ok(String::new()),
        };
        if link.is_empty() {
            return Ok(String::new());
        }
        Ok(links::http_url(&link).unwrap_or_else(|| {
            tracing::warn!(
                invoice_id = %invoice.id,
                link = ?links::shown(&link),
                "{origin} is not an absolute http or https URL, or its path has a . or .. step (a browser would open another page); the reminder is sent without the payment link"
            );
            String::new()
        }))
    }

    pub(super) fn company(&self) -> &CompanySettings {
        &self.company
    }

    /// The locales with templates (built-in and `templates.dir`'s), sorted.
    pub fn locales(&self) -> Vec<String> {
        let mut locales: Vec<String> = self
            .origins
            .keys()
            .filter_map(|name| name.split_once('/').map(|(l, _)| l.to_owned()))
            .collect();
        locales.dedup();
        locales
    }

    /// `company.reply_to`, for the Reply-To header.
    pub fn reply_to(&self) -> Option<&lettre::message::Mailbox> {
        self.company.reply_to.as_ref()
    }

    /// The locale whose `template` is used for a customer with `tag`, and
    /// the locale amounts and dates are formatted in.
    pub(super) fn resolve(&self, template: &str, tag: Option<&str>) -> (String, Locale) {
        let parsed = tag.and_then(parse_locale);
        let mut chain = Vec::new();
        if let Some(locale) = &parsed {
            chain.push(locale.to_string().to_ascii_lowercase());
            chain.push(locale.id.language.to_string());
        }
        chain.push(self.default_locale.clone());
        let chosen = chain
            .into_iter()
            .find(|l| {
                self.origins
                    .contains_key(&format!("{l}/{template}.subject.j2"))
            })
            .unwrap_or_else(|| self.default_locale.clone());
        let chosen_language = chosen.split('-').next().unwrap_or_default();
        let format_locale = match parsed {
            Some(locale) if locale.id.language.as_str() == chosen_language => locale,
            _ => parse_locale(&chosen).unwrap_or(Locale::UNKNOWN),
        };
        (chosen, format_locale)
    }

    /// Renders the reminder for `step` of `stage`: its template, with the
    /// late-payment claim and letter when the stage states one.
    pub fn render(
        &self,
        stage: &Stage,
        step: &Step,
        invoice: &Invoice,
        customer: &Customer,
        today: NaiveDate,
    ) -> Result<Rendered, RenderError> {
        let claim =
            late::claim_of(&self.late_payment, stage, invoice, today).map_err(RenderError::Data)?;
        self.render_claim(stage, step, invoice, customer, today, claim)
    }

    /// [`Templates::render`] with the claim given (the start-up check
    /// renders a sample claim, whatever the rates file holds).
    pub(super) fn render_claim(
        &self,
        stage: &Stage,
        step: &Step,
        invoice: &Invoice,
        customer: &Customer,
        today: NaiveDate,
        claim: Option<Claim>,
    ) -> Result<Rendered, RenderError> {
        let template = stage.template.as_str();
        let (locale, format_locale) = self.resolve(template, customer.locale.as_deref());
        let mut vars = Vars::new(invoice, customer, step, &stage.name, &self.company, today);
        vars.locale = format_locale.to_string();
        vars.company.payment_url = self.payment_link(invoice, &vars)?;
        let pay_by = late::pay_by(&self.late_payment, today);
        vars.late_payment = claim
            .as_ref()
            .map(|c| late::LateVars::new(c, invoice, pay_by));
        let mut rendered = self.render_parts(&locale, template, &vars)?;
        if let (Some(claim), true) = (&claim, stage.letter) {
            let facts = late::LetterFacts {
                invoice,
                customer,
                company: &self.company,
                today,
                pay_by,
                payment_link: &vars.company.payment_url,
                locale: &vars.locale,
            };
            rendered
                .attachments
                .push(late::letter(&self.formats, claim, &facts).map_err(RenderError::Data)?);
        }
        Ok(rendered)
    }

    /// Renders `{locale}/{template}`'s subject, text and (when it exists)
    /// HTML with `vars`, turned into a template value once for all three.
    pub(super) fn render_parts(
        &self,
        locale: &str,
        template: &str,
        vars: &impl serde::Serialize,
    ) -> Result<Rendered, RenderError> {
        let vars = minijinja::Value::from_serialize(vars);
        let name = |part: &str| format!("{locale}/{template}.{part}.j2");
        let subject = self.render_one(&name("subject"), &vars)?;
        let text = self.render_one(&name("txt"), &vars)?;
        let html = match self.origins.contains_key(&name("html")) {
            true => Some(self.render_one(&name("html"), &vars)?),
            false => None,
        };
        Ok(Rendered {
            subject: sanitize(&subject, MAX_SUBJECT_CHARS),
            text,
            html,
            attachments: Vec::new(),
        })
    }

    fn render_one(&self, name: &str, vars: &minijinja::Value) -> Result<String, RenderError> {
        let template = self
            .env
            .get_template(name)
            .map_err(|_| RenderError::Missing(format!("no template {name}")))?;
        template
            .render(vars)
            .map_err(|e| render_error(self.origins.get(name).map_or(name, String::as_str), &e))
    }
}

/// A reminder that could not be rendered (names the file and line).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RenderError {
    #[error("{file}{}: {reason}", line.map(|l| format!(", line {l}")).unwrap_or_default())]
    Template {
        file: String,
        line: Option<usize>,
        reason: String,
    },
    #[error("{0}")]
    Missing(String),
    /// The letter's data cannot make a message (a statement without
    /// invoices).
    #[error("{0}")]
    Data(String),
}

fn render_error(origin: &str, e: &minijinja::Error) -> RenderError {
    RenderError::Template {
        file: origin.to_owned(),
        line: e.line(),
        reason: e
            .detail()
            .map_or_else(|| e.kind().to_string(), str::to_owned),
    }
}
