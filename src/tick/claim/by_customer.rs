//! One statement per customer (`reminders.group_by = "customer"`): the
//! source is walked in customer order, a page of whole customers at a
//! time, so one read finds everything a customer is owed today, new steps
//! and due retries alike; each customer's statement is chosen
//! (`choose::statements`) and claimed with its page's other customers' in one
//! statement, and handed on as one letter per customer.
//!
//! Every (invoice, step) is still claimed under UNIQUE (invoice_id,
//! period); a letter holds only rows this tick claimed, at most
//! `max_invoices_per_mail`, oldest due date first. Each customer is met on
//! one page only, so it gets at most one letter per tick; what did not fit
//! goes on the next tick, which the customer gap lets through (the
//! statement is `continued`).

use std::collections::{HashMap, HashSet};

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::choose::{Statement, statements};
use super::claiming::Claiming;
use super::grouping::Grouping;
use super::hand_on::{pass_on, screen};
use super::pages::{Customers, customer_page};
use crate::config::ReminderSettings;
use crate::db;
use crate::db::claims::StatementClaim;
use crate::db::source_row::SourceRow;
use crate::domain::{Claimed, Letter, LetterKind, SourceProblem};
use crate::domain::{MAX_RECIPIENTS, Recipients};
use crate::mail;
use crate::problems;
use crate::tick::TickError;
use crate::tick::mark::Batch;
use crate::tick::timings::Spent;
use lettre::Address;

/// One statement per customer.
pub(super) struct CustomerStatements {
    /// `reminders.max_invoices_per_mail`.
    per_mail: usize,
}

impl CustomerStatements {
    pub fn new(reminders: &ReminderSettings) -> Self {
        Self {
            per_mail: reminders.max_invoices_per_mail.get(),
        }
    }
}

impl Grouping for CustomerStatements {
    fn walk<'a>(
        &'a self,
        c: &'a Claiming,
        batches: &'a mpsc::Sender<Batch>,
    ) -> BoxFuture<'a, Result<(), TickError>> {
        Box::pin(self.walk_customers(c, batches))
    }

    fn rows_per_letter(&self) -> usize {
        self.per_mail
    }

    fn unmet(&self, row: &SourceRow) -> Option<SourceProblem> {
        row.customer_id
            .is_none()
            .then(|| problems::without_customer(row))
    }
}

impl CustomerStatements {
    /// Page by page in customer order: the next page is read while this
    /// one's statements are claimed (on the shared pool: the claims have a
    /// connection of their own).
    async fn walk_customers(
        &self,
        c: &Claiming,
        batches: &mpsc::Sender<Batch>,
    ) -> Result<(), TickError> {
        let Some(mut page) = customer_page(c, None, 0).await? else {
            return Ok(());
        };
        loop {
            let Customers {
                rows,
                next,
                suppressed,
            } = page;
            let claims = self.choose(c, rows, &suppressed).await?;
            let Some(claims) = claims else {
                return Ok(());
            };
            let Some(after) = next else {
                self.claim_all(c, claims, batches).await?;
                return Ok(());
            };
            let pending = claims
                .iter()
                .map(|g| g.iter().map(Statement::rows).sum::<usize>())
                .sum();
            let (read, claimed) = tokio::join!(
                customer_page(c, Some(after), pending),
                self.claim_all(c, claims, batches)
            );
            if !claimed? {
                return Ok(());
            }
            match read? {
                Some(next) => page = next,
                None => return Ok(()),
            }
        }
    }

    /// A page's statements, in groups of whole customers of at most
    /// `batch_size` rows for one claim each; the steps the gap keeps back past their window are recorded
    /// `superseded`. Ok(None): stop claiming (fenced).
    async fn choose(
        &self,
        c: &Claiming,
        rows: Vec<db::customers::CustomerRow>,
        suppressed: &HashSet<String>,
    ) -> Result<Option<Vec<Vec<Statement>>>, TickError> {
        if rows.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let chosen = statements(rows, self.per_mail, suppressed, c.today().date, &mut |p| {
            c.p().problem(p)
        });
        if !c.record_superseded(&chosen.superseded).await? {
            return Ok(None);
        }
        let most = usize::try_from(c.p().ctx().settings.reminders.batch_size).unwrap_or(usize::MAX);
        let mut groups: Vec<Vec<Statement>> = Vec::new();
        let mut rows_in = 0usize;
        for statement in chosen.statements {
            let full = groups.is_empty() || rows_in.saturating_add(statement.rows()) > most;
            if full {
                groups.push(Vec::new());
                rows_in = 0;
            }
            rows_in = rows_in.saturating_add(statement.rows());
            if let Some(group) = groups.last_mut() {
                group.push(statement);
            }
        }
        Ok(Some(groups))
    }

    /// Claims each group in one statement and hands its letters on.
    /// Ok(false): stop claiming altogether.
    async fn claim_all(
        &self,
        c: &Claiming,
        groups: Vec<Vec<Statement>>,
        batches: &mpsc::Sender<Batch>,
    ) -> Result<bool, TickError> {
        for group in groups {
            if !self.claim_group(c, group, batches).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn claim_group(
        &self,
        c: &Claiming,
        group: Vec<Statement>,
        batches: &mpsc::Sender<Batch>,
    ) -> Result<bool, TickError> {
        let claim = statement_claim(&group);
        let Some(reserved) = c.reserve(claim.keys.len()).await else {
            return Ok(false);
        };
        let claiming = db::claims::claim_statements(
            &c.p().ctx().phases.claims,
            &claim,
            c.today(),
            c.retries(),
            c.p().fence(),
        );
        let taken = c.p().timings().time(Spent::ClaimStatements, claiming).await;
        let Some(mut taken) = c.fenced(taken, "claiming reminders")? else {
            return Ok(false);
        };
        let suppressed = std::mem::take(&mut taken.suppressed);
        let rows = c.took(claim.keys.len(), taken);
        reserved.keep(rows.len());
        let rows = screen(c, rows, &suppressed).await;
        let letters = letters(c, &group, rows);
        Ok(pass_on(c, batches, letters).await)
    }
}

/// What one claim statement takes for `group`.
fn statement_claim(group: &[Statement]) -> StatementClaim {
    let mut claim = StatementClaim::default();
    for s in group {
        for pick in s.picks() {
            claim.keys.push(pick.key.clone());
            if let Some(id) = pick.retry {
                claim.retries.push(id);
                claim.retry_keys.push(pick.key.clone());
                if s.resend_of.is_some() {
                    claim.resend_keys.push(pick.key.clone());
                }
            }
        }
        claim.customers.push(s.customer.clone());
        if s.continued {
            claim.continued.push(s.customer.clone());
        }
    }
    claim
}

/// The letters of `group` from its claimed rows: one per customer, oldest
/// due date first, under the Message-ID of the mail it resends or a new
/// one.
fn letters(c: &Claiming, group: &[Statement], rows: Vec<Claimed>) -> Vec<Letter> {
    let mut rows_of: HashMap<String, Vec<Claimed>> = HashMap::new();
    for row in rows {
        rows_of
            .entry(row.customer.id.clone().unwrap_or_default())
            .or_default()
            .push(row);
    }
    let domain = &c.p().ctx().settings.smtp.message_id_domain;
    let mut letters = Vec::with_capacity(group.len());
    for s in group {
        let Some(mut rows) = rows_of.remove(&s.customer) else {
            continue;
        };
        rows.sort_by(|a, b| {
            (a.invoice.due_date, &a.invoice.id).cmp(&(b.invoice.due_date, &b.invoice.id))
        });
        address_to_all(&mut rows);
        let resent = s.resend_of.as_ref().filter(|m| {
            rows.iter()
                .all(|r| r.stored_message_id.as_ref() == Some(*m))
        });
        let (message_id, fresh_message_id) = match resent {
            Some(m) => (m.clone(), false),
            None => {
                let first = rows.iter().map(|r| r.id.0).min().unwrap_or_default();
                let id = mail::statement_message_id(&s.customer, first, c.p().run_id(), domain);
                (id, true)
            }
        };
        letters.push(Letter {
            rows,
            message_id,
            fresh_message_id,
            kind: LetterKind::Statement,
        });
    }
    letters
}

/// A statement goes to every distinct address among its invoices' cells
/// (suppressed ones already left out), in the order the rows give them, at
/// most [`MAX_RECIPIENTS`]: the mail is built from its first row's customer,
/// which gets them all.
fn address_to_all(rows: &mut [Claimed]) {
    let mut all: Vec<Address> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for row in rows.iter() {
        for address in row.customer.email.addresses() {
            if seen.insert(address.to_string().to_lowercase()) {
                all.push(address.clone());
            }
        }
    }
    if all.len() > MAX_RECIPIENTS {
        tracing::warn!(
            customer = rows
                .first()
                .and_then(|r| r.customer.id.as_deref())
                .unwrap_or_default(),
            addresses = all.len(),
            "a statement's invoices name more addresses than one mail takes; the first {MAX_RECIPIENTS} get it"
        );
        all.truncate(MAX_RECIPIENTS);
    }
    if let Some(first) = rows.first_mut()
        && let Some(all) = Recipients::of(all)
    {
        first.customer.email = all;
    }
}
