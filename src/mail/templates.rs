//! Reminder templates: files rendered with minijinja.
//!
//! Layout (a contract users write to): `{templates.dir}/{locale}/{template}
//! .subject.j2`, `.txt.j2` and, optionally, `.html.j2`. The templates under
//! `templates/` in the repository are compiled into the binary; files in
//! `templates.dir` add locales and templates, and replace a built-in
//! template as a whole (all of its files) when they provide any of them. HTML is
//! auto-escaped, text is not; undefined variables are errors.
//!
//! Guarantees: at start-up every stage's template exists for
//! `templates.default_locale`, and every template file (and
//! `company.payment_url`, to nothing or an http(s) URL) renders against a
//! sample reminder, or loading fails naming the file and line. The payment
//! link a reminder shows is checked per invoice (see `links`). A customer's locale is looked up as
//! `de-CH` → `de` → `templates.default_locale`, per template.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use chrono::NaiveDate;
use icu_locale_core::Locale;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};

use super::filters::add_filters;
use super::format::Formats;
use super::links::{self, PAYMENT_URL, PaymentUrlTemplate};
use super::statement::{Line, STATEMENT};
use super::text::{MAX_SUBJECT_CHARS, Rendered, sanitize};
use super::vars::{Vars, sample};
use crate::config::{CompanySettings, TemplateSettings};
use crate::domain::{Amount, Customer, Invoice};
use crate::locale::parse_locale;
use crate::stages::{Stages, Step};

macro_rules! builtin {
    ($($locale:literal: $($name:literal),+;)+) => {
        &[$($(
            (concat!($locale, "/", $name, ".subject.j2"), include_str!(concat!("../../templates/", $locale, "/", $name, ".subject.j2"))),
            (concat!($locale, "/", $name, ".txt.j2"), include_str!(concat!("../../templates/", $locale, "/", $name, ".txt.j2"))),
            (concat!($locale, "/", $name, ".html.j2"), include_str!(concat!("../../templates/", $locale, "/", $name, ".html.j2"))),
        )+)+]
    };
}

/// The templates shipped in `templates/`, compiled in.
const BUILTIN: &[(&str, &str)] = builtin! {
    "en": "upcoming", "overdue", "final", "statement";
    "de": "upcoming", "overdue", "final", "statement";
};

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
    env: Environment<'static>,
    /// Where each template came from, for messages: a path or "built-in x".
    origins: BTreeMap<String, String>,
    default_locale: String,
    company: CompanySettings,
    /// `company.payment_url`, compiled; None when unset.
    payment_url: Option<PaymentUrlTemplate>,
}

impl Templates {
    /// Loads the built-in templates, then `templates.dir`, and checks them
    /// against `stages` (see the module docs).
    pub fn load(
        settings: &TemplateSettings,
        company: &CompanySettings,
        stages: &Stages,
    ) -> Result<Self, TemplateError> {
        let formats = Formats::default();
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_keep_trailing_newline(true);
        env.set_auto_escape_callback(|name| {
            if name.ends_with(".html.j2") {
                AutoEscape::Html
            } else {
                AutoEscape::None
            }
        });
        add_filters(&mut env, formats.clone());
        let mut sources: BTreeMap<String, (String, String)> = BUILTIN
            .iter()
            .map(|(name, source)| {
                (
                    name.to_string(),
                    (format!("built-in {name}"), source.to_string()),
                )
            })
            .collect();
        if let Some(dir) = &settings.dir {
            let mine = read_dir(dir)?;
            // A template is replaced as a whole: your `en/overdue.txt.j2`
            // without an `.html.j2` makes that reminder text only, rather
            // than pairing your text with the built-in HTML.
            let replaced: BTreeSet<&str> = mine
                .keys()
                .filter_map(|n| n.split_once('.').map(|p| p.0))
                .collect();
            sources.retain(|name, _| name.split_once('.').is_none_or(|p| !replaced.contains(p.0)));
            sources.extend(mine);
        }
        let mut origins = BTreeMap::new();
        for (name, (origin, source)) in sources {
            env.add_template_owned(name.clone(), source)
                .map_err(|e| broken(&origin, &e))?;
            origins.insert(name, origin);
        }
        let payment_url = match &company.payment_url {
            Some(source) => Some(
                PaymentUrlTemplate::new(source, formats).map_err(|e| broken(PAYMENT_URL, &e))?,
            ),
            None => None,
        };
        let templates = Self {
            env,
            origins,
            default_locale: settings.default_locale.to_ascii_lowercase(),
            company: company.clone(),
            payment_url,
        };
        templates.check(stages)?;
        Ok(templates)
    }

    /// Every stage's template exists in the default locale; every template
    /// renders against a sample reminder.
    fn check(&self, stages: &Stages) -> Result<(), TemplateError> {
        for stage in stages.stages() {
            for part in ["subject", "txt"] {
                let name = format!("{}/{}.{part}.j2", self.default_locale, stage.template);
                if !self.origins.contains_key(&name) {
                    return Err(TemplateError::Missing {
                        locale: self.default_locale.clone(),
                        stage: stage.name.clone(),
                        file: name,
                    });
                }
            }
        }
        let today = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap_or_default();
        let (invoice, customer) = sample(today);
        self.check_payment_url(stages, &invoice, &customer, today)?;
        let pairs: BTreeSet<(String, String)> = self
            .origins
            .keys()
            .filter_map(|name| {
                let (locale, file) = name.split_once('/')?;
                let template = file.split_once('.')?.0;
                Some((locale.to_owned(), template.to_owned()))
            })
            .collect();
        for (locale, template) in pairs {
            let customer = Customer {
                locale: Some(locale.clone()),
                ..customer.clone()
            };
            if template == STATEMENT {
                let lines: Vec<Line<'_>> = stages
                    .steps()
                    .iter()
                    .map(|step| Line {
                        invoice: &invoice,
                        step,
                    })
                    .collect();
                self.render_statement(stages, &lines, &customer, today)
                    .map_err(|e| sample_failed(&locale, &template, e))?;
                continue;
            }
            let step = stages
                .steps()
                .iter()
                .find(|s| stages.stage(s).template == template)
                .cloned()
                .unwrap_or(Step {
                    key: template.clone(),
                    stage: 0,
                    occurrence: 1,
                    offset: 0,
                });
            self.render(
                &template,
                &step,
                stages.stage(&step).name.as_str(),
                &invoice,
                &customer,
                today,
            )
            .map_err(|e| sample_failed(&locale, &template, e))?;
        }
        Ok(())
    }

    /// `company.payment_url` renders, for the sample reminder, to nothing
    /// or to an absolute http(s) URL: a template that makes anything else
    /// would drop every reminder's link.
    fn check_payment_url(
        &self,
        stages: &Stages,
        invoice: &Invoice,
        customer: &Customer,
        today: NaiveDate,
    ) -> Result<(), TemplateError> {
        let (Some(template), Some(step)) = (&self.payment_url, stages.steps().first()) else {
            return Ok(());
        };
        let stage = stages.stage(step);
        let vars = Vars::new(invoice, customer, step, &stage.name, &self.company, today);
        let link = template
            .render(&vars)
            .map_err(|e| broken(PAYMENT_URL, &e))?;
        if link.is_empty() || links::http_url(&link).is_some() {
            return Ok(());
        }
        Err(TemplateError::Broken {
            file: PAYMENT_URL.to_owned(),
            line: None,
            reason: format!(
                "renders to {:?} for a sample invoice, which is not an absolute http:// or https:// URL",
                links::shown(&link)
            ),
        })
    }

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
                "{origin} is not an absolute http or https URL; the reminder is sent without the payment link"
            );
            String::new()
        }))
    }

    pub(super) fn company(&self) -> &CompanySettings {
        &self.company
    }

    /// With `group_by = "customer"`: the statement template exists in the
    /// default locale (it is built in for `en` and `de`).
    pub fn check_statement(&self) -> Result<(), TemplateError> {
        for part in ["subject", "txt"] {
            let name = format!("{}/{STATEMENT}.{part}.j2", self.default_locale);
            if !self.origins.contains_key(&name) {
                return Err(TemplateError::Missing {
                    locale: self.default_locale.clone(),
                    stage: "reminders.group_by = \"customer\"".into(),
                    file: name,
                });
            }
        }
        Ok(())
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

    /// Renders the reminder for `step` (of the stage named `stage_name`,
    /// whose template is `template`).
    pub fn render(
        &self,
        template: &str,
        step: &Step,
        stage_name: &str,
        invoice: &Invoice,
        customer: &Customer,
        today: NaiveDate,
    ) -> Result<Rendered, RenderError> {
        let (locale, format_locale) = self.resolve(template, customer.locale.as_deref());
        let amount = self.minor_units(invoice)?;
        let mut vars = Vars::new(invoice, customer, step, stage_name, &self.company, today);
        vars.invoice.amount = amount;
        vars.locale = format_locale.to_string();
        vars.company.payment_url = self.payment_link(invoice, &vars)?;
        self.render_parts(&locale, template, &vars)
    }

    /// Renders `{locale}/{template}`'s subject, text and (when it exists)
    /// HTML with `vars`.
    pub(super) fn render_parts(
        &self,
        locale: &str,
        template: &str,
        vars: &impl serde::Serialize,
    ) -> Result<Rendered, RenderError> {
        let name = |part: &str| format!("{locale}/{template}.{part}.j2");
        let subject = self.render_one(&name("subject"), vars)?;
        let text = self.render_one(&name("txt"), vars)?;
        let html = match self.origins.contains_key(&name("html")) {
            true => Some(self.render_one(&name("html"), vars)?),
            false => None,
        };
        Ok(Rendered {
            subject: sanitize(&subject, MAX_SUBJECT_CHARS),
            text,
            html,
        })
    }

    /// The invoice's amount in minor units of its currency.
    pub(super) fn minor_units(&self, invoice: &Invoice) -> Result<i64, RenderError> {
        match &invoice.amount {
            Amount::Minor(minor) => Ok(*minor),
            Amount::Major(major) => {
                super::format::major_to_minor(major, &invoice.currency).map_err(RenderError::Data)
            }
            Amount::Missing => Err(RenderError::Data("the source's amount is NULL".to_owned())),
        }
    }

    fn render_one(&self, name: &str, vars: &impl serde::Serialize) -> Result<String, RenderError> {
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
    /// The invoice's data cannot make a reminder (its amount).
    #[error("{0}")]
    Data(String),
}

/// A template that does not render against the sample reminder.
fn sample_failed(locale: &str, template: &str, e: RenderError) -> TemplateError {
    match e {
        RenderError::Template { file, line, reason } => {
            TemplateError::Broken { file, line, reason }
        }
        RenderError::Missing(reason) | RenderError::Data(reason) => TemplateError::Broken {
            file: format!("{locale}/{template}"),
            line: None,
            reason,
        },
    }
}

fn broken(origin: &str, e: &minijinja::Error) -> TemplateError {
    TemplateError::Broken {
        file: origin.to_owned(),
        line: e.line(),
        reason: e
            .detail()
            .map_or_else(|| e.kind().to_string(), str::to_owned),
    }
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

/// `{dir}/{locale}/{template}.{subject,txt,html}.j2`, by template name,
/// with where each came from.
fn read_dir(dir: &Path) -> Result<BTreeMap<String, (String, String)>, TemplateError> {
    let mut sources = BTreeMap::new();
    let fail = |reason: String| TemplateError::Dir {
        dir: dir.display().to_string(),
        reason,
    };
    let locales = std::fs::read_dir(dir).map_err(|e| fail(format!("cannot read it: {e}")))?;
    for locale in locales.flatten() {
        if !locale.path().is_dir() {
            continue;
        }
        let locale_name = locale.file_name().to_string_lossy().to_ascii_lowercase();
        let files = std::fs::read_dir(locale.path())
            .map_err(|e| fail(format!("cannot read {}: {e}", locale.path().display())))?;
        for file in files.flatten() {
            let file_name = file.file_name().to_string_lossy().into_owned();
            let part = [".subject.j2", ".txt.j2", ".html.j2"]
                .into_iter()
                .find(|suffix| file_name.ends_with(suffix));
            if part.is_none() {
                continue;
            }
            let path = file.path();
            let source = std::fs::read_to_string(&path)
                .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
            sources.insert(
                format!("{locale_name}/{file_name}"),
                (path.display().to_string(), source),
            );
        }
    }
    Ok(sources)
}
