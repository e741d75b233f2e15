//! Loading the templates: the built-in ones compiled in, then
//! `templates.dir`, and the start-up check that every stage's template
//! exists and every template (the statement's too) renders against a
//! sample reminder. Sits above `templates.rs` (the renderer) and
//! `statement.rs` (which renders through it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use chrono::NaiveDate;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};

use super::filters::add_filters;
use super::format::Formats;
use super::late;
use super::links::{self, PAYMENT_URL, PaymentUrlTemplate};
use super::statement::{Line, Pricing, STATEMENT};
use super::templates::{RenderError, TemplateError, Templates};
use super::vars::{Vars, sample};
use crate::config::{CompanySettings, LatePaymentSettings, TemplateSettings};
use crate::domain::StepKey;
use crate::domain::{Customer, Invoice};
use crate::stages::{Stage, Stages, Step};

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

impl Templates {
    /// Loads the built-in templates, then `templates.dir`, and checks them
    /// against `stages` (see the module docs).
    pub fn load(
        settings: &TemplateSettings,
        company: &CompanySettings,
        late_payment: &LatePaymentSettings,
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
        let kept_formats = formats.clone();
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
            late_payment: late_payment.clone(),
            formats: kept_formats,
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
        let (invoice, customer) = sample(today).map_err(|reason| TemplateError::Broken {
            file: "the sample reminder".to_owned(),
            line: None,
            reason,
        })?;
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
                self.render_statement_priced(stages, &lines, &customer, today, Pricing::Sample)
                    .map_err(|e| sample_failed(&locale, &template, e))?;
                continue;
            }
            let step = stages
                .steps()
                .iter()
                .find(|s| stages.stage(s).template == template)
                .cloned()
                .unwrap_or(Step {
                    key: StepKey(template.clone()),
                    stage: 0,
                    occurrence: 1,
                    offset: 0,
                    business: false,
                });
            let stage = Stage {
                template: template.clone(),
                ..stages.stage(&step).clone()
            };
            let claim = stage
                .late_payment
                .then(|| late::sample_claim(&invoice, today));
            self.render_claim(&stage, &step, &invoice, &customer, today, claim)
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
                "renders to {:?} for a sample invoice, which is not an absolute http:// or https:// URL without . or .. path steps",
                links::shown(&link)
            ),
        })
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
