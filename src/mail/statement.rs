//! The statement: one mail listing every invoice of one customer that owes
//! a step today (`reminders.group_by = "customer"`), rendered from the
//! `statement` template (`{locale}/statement.subject.j2`, `.txt.j2`,
//! `.html.j2`; built in for `en` and `de`, overridable through
//! `templates.dir` like the stage templates).
//!
//! Its variables (the README's "One mail per customer" lists them; a docs
//! test checks the list): `customer`, `invoices` (each with `id`, `number`,
//! `amount`, `currency`, `due_date`, `days_overdue`, `payment_url` and its
//! `step`), `totals` (one per currency, in order of first appearance),
//! `stage` (the most severe step in the mail: the latest stage in the list,
//! its latest occurrence, with `position`, 1 for the first stage, and
//! `last`), `company`,
//! `today` and `locale`. Guarantee: a statement is built only from the rows
//! given, in the order given, and names no invoice twice.

use chrono::NaiveDate;
use serde::Serialize;

use super::late::{self, LateVars};
use super::templates::{RenderError, Templates};
use super::vars::{CompanyVars, CustomerVars, Vars};
use crate::domain::StepKey;
use crate::domain::{Customer, Invoice};
use crate::stages::{Stages, Step};

/// The template every statement is rendered from.
pub const STATEMENT: &str = "statement";

/// One invoice of a statement, with the step it is reminded for.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    pub invoice: &'a Invoice,
    pub step: &'a Step,
}

#[derive(Serialize)]
pub(super) struct StatementVars<'a> {
    customer: CustomerVars<'a>,
    invoices: Vec<LineVars>,
    totals: Vec<Total>,
    stage: StepVars,
    company: CompanyVars<'a>,
    today: String,
    locale: String,
}

#[derive(Serialize)]
struct LineVars {
    id: String,
    number: String,
    amount: i64,
    currency: String,
    due_date: String,
    days_overdue: i64,
    payment_url: String,
    step: StepVars,
    /// The late-payment claim of this invoice's step, if it states one.
    late_payment: Option<LateVars>,
}

#[derive(Serialize, Clone)]
struct StepVars {
    name: String,
    key: StepKey,
    occurrence: u32,
    /// The stage's place in `reminders.stages`, from 1.
    position: usize,
    /// Whether it is the last stage of the list (the final notice).
    last: bool,
}

#[derive(Serialize)]
struct Total {
    currency: String,
    /// Minor units, saturating.
    amount: i64,
}

fn step_vars(stages: &Stages, step: &Step) -> StepVars {
    StepVars {
        name: stages.stage(step).name.clone(),
        key: step.key.clone(),
        occurrence: step.occurrence,
        position: step.stage.saturating_add(1),
        last: step.stage.saturating_add(1) >= stages.stages().len(),
    }
}

impl Templates {
    /// Renders the statement for `lines` (at least one) to `customer`,
    /// with each line's late-payment claim and letter when its stage
    /// states one.
    pub fn render_statement(
        &self,
        stages: &Stages,
        lines: &[Line<'_>],
        customer: &Customer,
        today: NaiveDate,
    ) -> Result<super::text::Rendered, RenderError> {
        self.render_statement_priced(stages, lines, customer, today, Pricing::Rates)
    }

    /// [`Templates::render_statement`], its claims priced by the rates or
    /// (the start-up check) a sample.
    pub(super) fn render_statement_priced(
        &self,
        stages: &Stages,
        lines: &[Line<'_>],
        customer: &Customer,
        today: NaiveDate,
        pricing: Pricing,
    ) -> Result<super::text::Rendered, RenderError> {
        let Some(worst) = lines
            .iter()
            .map(|l| l.step)
            .max_by_key(|s| (s.stage, s.occurrence))
        else {
            return Err(RenderError::Data("a statement needs an invoice".into()));
        };
        let (locale, format_locale) = self.resolve(STATEMENT, customer.locale.as_deref());
        let mut invoices = Vec::with_capacity(lines.len());
        let mut totals: Vec<Total> = Vec::new();
        let mut first: Option<Vars<'_>> = None;
        let mut letters = Vec::new();
        let pay_by = late::pay_by(&self.late_payment, today);
        for line in lines {
            let stage = stages.stage(line.step);
            let mut vars = Vars::new(
                line.invoice,
                customer,
                line.step,
                &stage.name,
                self.company(),
                today,
            );
            let amount = line.invoice.amount.minor();
            vars.locale = format_locale.to_string();
            let payment_url = self.payment_link(line.invoice, &vars)?;
            let claim = match pricing {
                Pricing::Rates => late::claim_of(&self.late_payment, stage, line.invoice, today)
                    .map_err(RenderError::Data)?,
                Pricing::Sample => stage
                    .late_payment
                    .then(|| late::sample_claim(line.invoice, today)),
            };
            if let (Some(claim), true) = (&claim, stage.letter) {
                let facts = late::LetterFacts {
                    invoice: line.invoice,
                    customer,
                    company: self.company(),
                    today,
                    pay_by,
                    payment_link: &payment_url,
                    locale: &vars.locale,
                };
                letters
                    .push(late::letter(&self.formats, claim, &facts).map_err(RenderError::Data)?);
            }
            match totals
                .iter_mut()
                .find(|t| t.currency == line.invoice.amount.currency().as_str())
            {
                Some(t) => t.amount = t.amount.saturating_add(amount),
                None => totals.push(Total {
                    currency: line.invoice.amount.currency().as_str().to_owned(),
                    amount,
                }),
            }
            invoices.push(LineVars {
                id: vars.invoice.id.clone(),
                number: vars.invoice.number.clone(),
                amount,
                currency: vars.invoice.currency.clone(),
                due_date: vars.invoice.due_date.clone(),
                days_overdue: vars.invoice.days_overdue,
                step: step_vars(stages, line.step),
                late_payment: claim.map(|c| LateVars::new(&c, line.invoice, pay_by)),
                payment_url,
            });
            first.get_or_insert(vars);
        }
        let Some(first) = first else {
            return Err(RenderError::Data("a statement needs an invoice".into()));
        };
        let vars = StatementVars {
            customer: first.customer,
            invoices,
            totals,
            stage: step_vars(stages, worst),
            company: first.company,
            today: first.today,
            locale: format_locale.to_string(),
        };
        let mut rendered = self.render_parts(&locale, STATEMENT, &vars)?;
        rendered.attachments = letters;
        Ok(rendered)
    }
}

/// How a statement's claims are priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pricing {
    /// By the rates file, as sent.
    Rates,
    /// By a sample claim (the start-up check).
    Sample,
}
