//! Customer mode's part of the claim stage (`reminders.group_by =
//! "customer"`): the source is walked in customer order, a page of whole
//! customers at a time, so that one read finds every invoice a customer
//! owes today, whatever its step; their rows are claimed a few customers at
//! a time, in room reserved for all of them, and handed on as one letter
//! per customer.
//!
//! Every (invoice, step) is still claimed under UNIQUE (invoice_id,
//! period); a letter holds only rows this tick claimed, at most
//! `max_invoices_per_mail`, oldest due date first. Each customer is met on
//! one page only, so it gets at most one letter per tick.

use std::collections::{HashMap, HashSet};

use tokio::sync::mpsc;

use super::Claimer;
use crate::db;
use crate::db::customers::CustomerRow;
use crate::db::invoices::SourceRow;
use crate::domain::{Claimed, InvoiceId, Letter, Problem, SourceProblem};
use crate::problems;
use crate::tick::TickError;
use crate::tick::db_err;
use crate::tick::timings::Spent;

impl Claimer {
    /// Customer mode: claims, page by page in customer order, every
    /// invoice that owes a step today (at most `max_invoices_per_mail` per
    /// customer) and hands on one letter per customer. A page that ends
    /// inside a customer leaves that customer to the next page; a customer
    /// whose unpaid invoices fill a page alone is read by key instead.
    /// Ok(false): stop claiming altogether.
    pub(super) async fn claim_customers(
        &self,
        batches: &mpsc::Sender<Vec<Letter>>,
    ) -> Result<bool, TickError> {
        let settings = &self.p.ctx().settings.reminders;
        let per_mail = usize::try_from(settings.max_invoices_per_mail)
            .unwrap_or(usize::MAX)
            .max(1);
        let most = usize::try_from(settings.batch_size).unwrap_or(usize::MAX);
        let database = &self.p.ctx().stages.claims;
        let mut after: Option<String> = None;
        loop {
            if self.p.stop_reason().is_some() {
                return Ok(false);
            }
            let Some(limit) = self.room(settings.batch_size) else {
                return Ok(false);
            };
            let reading = db::customers::fetch_customer_page(
                database,
                &self.windows,
                self.owed(),
                after.as_deref(),
                limit,
            );
            let page = self
                .p
                .timings()
                .time(Spent::ClaimPages, reading)
                .await
                .map_err(db_err("reading the invoices that owe a reminder"))?;
            let Some(last) = page.customers.last().cloned() else {
                return Ok(true);
            };
            let full = page.customers.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
            let mut owed = page.owed;
            let mut next = last.clone();
            if full {
                match page.customers.iter().rev().find(|c| **c != last) {
                    // The page may end inside its last customer: that
                    // customer starts the next page.
                    Some(before) => {
                        owed.retain(|r| r.row.customer_id.as_ref() != Some(&last));
                        next = before.clone();
                    }
                    // One customer fills the page: its owed invoices by key.
                    None => {
                        owed = db::customers::owed_of_customers(
                            database,
                            &self.windows,
                            self.owed(),
                            std::slice::from_ref(&last),
                            settings.max_invoices_per_mail,
                        )
                        .await
                        .map_err(db_err(
                            "reading the invoices of a customer that owes a reminder",
                        ))?;
                    }
                }
            }
            after = Some(next);
            for customers in whole_customers(self.usable(owed, per_mail), most) {
                let ids: Vec<InvoiceId> = customers
                    .into_iter()
                    .filter_map(|o| o.row.invoice_id)
                    .collect();
                if !self.claim_keys(&self.windows, &ids, batches).await? {
                    return Ok(false);
                }
            }
            if !full {
                return Ok(true);
            }
        }
    }

    /// The owed rows of a page worth claiming, in the page's order, each
    /// key once and at most `per_mail` per customer: a row with a problem is
    /// reported and left out; a key on several rows of the page goes to the
    /// claim unchecked, which refuses and reports it.
    fn usable(&self, owed: Vec<CustomerRow>, per_mail: usize) -> Vec<CustomerRow> {
        let repeated_ids = super::repeated(owed.iter().filter_map(|o| o.row.invoice_id.clone()));
        let mut taken = HashSet::new();
        let mut listed: HashMap<Option<String>, usize> = HashMap::new();
        let mut usable = Vec::with_capacity(owed.len());
        for o in owed {
            let Some(id) = o.row.invoice_id.clone() else {
                continue;
            };
            if !repeated_ids.contains(&id)
                && let Err(problem) = problems::check(o.row.clone())
            {
                self.p.problem(problem);
                continue;
            }
            let n = listed.entry(o.row.customer_id.clone()).or_insert(0);
            if *n < per_mail && taken.insert(id) {
                *n = n.saturating_add(1);
                usable.push(o);
            }
        }
        usable
    }

    /// Customer mode: a row no customer-order page meets (its
    /// `customer_id` is NULL) as the problem it is, if it is one.
    pub(super) fn without_customer(&self, row: &SourceRow) -> Option<SourceProblem> {
        (self.by_customer() && row.customer_id.is_none()).then(|| SourceProblem {
            invoice_id: row.invoice_id.clone(),
            invoice_number: row.number.clone(),
            problem: Problem::MissingField,
            detail: "customer_id is NULL (reminders.group_by = \"customer\")".into(),
        })
    }

    /// Claimed rows as letters: one per row in invoice mode; in customer
    /// mode one per customer (at most `max_invoices_per_mail` rows each),
    /// oldest due date first.
    pub(super) fn letters(&self, rows: Vec<Claimed>) -> Vec<Letter> {
        if !self.by_customer() {
            return rows.into_iter().map(|r| Letter { rows: vec![r] }).collect();
        }
        let max = usize::try_from(self.p.ctx().settings.reminders.max_invoices_per_mail)
            .unwrap_or(usize::MAX)
            .max(1);
        let mut index: HashMap<Option<String>, usize> = HashMap::new();
        let mut by_customer: Vec<Vec<Claimed>> = Vec::new();
        for row in rows {
            match index
                .get(&row.customer.id)
                .and_then(|i| by_customer.get_mut(*i))
            {
                Some(rows) => rows.push(row),
                None => {
                    index.insert(row.customer.id.clone(), by_customer.len());
                    by_customer.push(vec![row]);
                }
            }
        }
        let mut letters = Vec::new();
        for mut rows in by_customer {
            rows.sort_by(|a, b| {
                (a.invoice.due_date, &a.invoice.id).cmp(&(b.invoice.due_date, &b.invoice.id))
            });
            while !rows.is_empty() {
                let rest = rows.split_off(rows.len().min(max));
                letters.push(Letter { rows });
                rows = rest;
            }
        }
        letters
    }
}

/// Customer mode: `owed` (ordered by customer) cut into groups of whole
/// customers with at most `most` rows each (a customer with more, which
/// the settings rule out, is a group of its own).
fn whole_customers(owed: Vec<CustomerRow>, most: usize) -> Vec<Vec<CustomerRow>> {
    let mut groups: Vec<Vec<CustomerRow>> = Vec::new();
    let mut group: Vec<CustomerRow> = Vec::new();
    let mut customer: Vec<CustomerRow> = Vec::new();
    for row in owed {
        if customer
            .last()
            .is_some_and(|last| last.row.customer_id != row.row.customer_id)
        {
            if !group.is_empty() && group.len().saturating_add(customer.len()) > most {
                groups.push(std::mem::take(&mut group));
            }
            group.append(&mut customer);
        }
        customer.push(row);
    }
    if !group.is_empty() && group.len().saturating_add(customer.len()) > most {
        groups.push(std::mem::take(&mut group));
    }
    group.append(&mut customer);
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn rows_of(customers: &[(&str, usize)]) -> Vec<CustomerRow> {
        customers
            .iter()
            .flat_map(|(customer, n)| {
                (0..*n).map(|_| CustomerRow {
                    step: "overdue".into(),
                    row: SourceRow {
                        customer_id: Some((*customer).into()),
                        ..SourceRow::default()
                    },
                })
            })
            .collect()
    }

    fn sizes(groups: &[Vec<CustomerRow>]) -> Vec<usize> {
        groups.iter().map(Vec::len).collect()
    }

    #[test]
    fn groups_hold_whole_customers_and_at_most_the_limit() {
        let groups = whole_customers(rows_of(&[("a", 3), ("b", 3), ("c", 2), ("d", 4)]), 4);
        assert_eq!(sizes(&groups), [3, 3, 2, 4]);
        let groups = whole_customers(rows_of(&[("a", 1), ("b", 2), ("c", 1), ("d", 4)]), 4);
        assert_eq!(sizes(&groups), [4, 4]);
        for group in &groups {
            let customers: BTreeSet<_> = group.iter().map(|r| &r.row.customer_id).collect();
            assert!(customers.len() <= 3);
        }
    }

    #[test]
    fn a_customer_over_the_limit_is_a_group_of_its_own_and_nothing_is_lost() {
        let groups = whole_customers(rows_of(&[("a", 1), ("b", 6), ("c", 1)]), 4);
        assert_eq!(sizes(&groups), [1, 6, 1]);
        assert!(whole_customers(Vec::new(), 4).is_empty());
    }
}
