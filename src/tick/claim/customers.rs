//! Customer mode's part of the claim stage (`reminders.group_by =
//! "customer"`): the customers a page meets, all of their owed invoices at
//! once, claimed step by step in room reserved for all of them, and handed
//! on as one letter per customer.
//!
//! Every (invoice, step) is still claimed under UNIQUE (invoice_id,
//! period); a letter holds only rows this tick claimed, at most
//! `max_invoices_per_mail`, oldest due date first.

use std::collections::{BTreeSet, HashMap};

use tokio::sync::mpsc;

use super::Claimer;
use crate::db;
use crate::db::customers::CustomerRow;
use crate::db::invoices::SourceRow;
use crate::domain::{Claimed, InvoiceId, Letter, Problem};
use crate::problems;
use crate::tick::TickError;
use crate::tick::db_err;

impl Claimer {
    /// Customer mode: the customers of a page's usable rows that this tick
    /// has not handled yet, each once. Problems are reported as in invoice
    /// mode, and a row without a `customer_id` is one (`missing_field`).
    pub(super) fn customers_of(&self, rows: Vec<SourceRow>) -> Vec<String> {
        let customer_of: HashMap<InvoiceId, Option<String>> = rows
            .iter()
            .filter_map(|r| Some((r.invoice_id.clone()?, r.customer_id.clone())))
            .collect();
        let mut customers = Vec::new();
        let mut handled = self.handled.lock().unwrap_or_else(|p| p.into_inner());
        for id in self.candidates(rows) {
            match customer_of.get(&id) {
                Some(Some(customer)) => {
                    if handled.insert(customer.clone()) {
                        customers.push(customer.clone());
                    }
                }
                _ => self.p.problem(crate::domain::SourceProblem {
                    invoice_id: Some(id),
                    invoice_number: None,
                    problem: Problem::MissingField,
                    detail: "customer_id is NULL (reminders.group_by = \"customer\")".into(),
                }),
            }
        }
        customers
    }

    /// Customer mode: claims every invoice of `customers` that owes a step
    /// today (at most `max_invoices_per_mail` each) and hands on one letter
    /// per customer, a few customers at a time (see [`Self::claim_letters`]).
    /// Ok(false): stop claiming altogether.
    pub(super) async fn claim_customers(
        &self,
        customers: &[String],
        batches: &mpsc::Sender<Vec<Letter>>,
    ) -> Result<bool, TickError> {
        let settings = &self.p.ctx().settings.reminders;
        let owed = db::customers::owed_of_customers(
            &self.p.ctx().stages.claims,
            &self.windows,
            self.owed(),
            customers,
            settings.max_invoices_per_mail,
        )
        .await
        .map_err(db_err(
            "reading the invoices of the customers that owe a reminder",
        ))?;
        let most = usize::try_from(settings.batch_size).unwrap_or(usize::MAX);
        for customers in whole_customers(owed, most) {
            if !self.claim_letters(&customers, batches).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Claims the owed rows of a few customers (at most `batch_size` rows),
    /// whatever steps they owe, in one statement, and hands them on
    /// together. The room for all of them is reserved before the claim.
    /// Rows with a problem are left out here without a report: the scan
    /// reports each when its own page meets it. Ok(false): stop claiming
    /// altogether.
    async fn claim_letters(
        &self,
        owed: &[CustomerRow],
        batches: &mpsc::Sender<Vec<Letter>>,
    ) -> Result<bool, TickError> {
        let repeated_ids = super::repeated(owed.iter().filter_map(|o| o.row.invoice_id.as_ref()));
        let ids: BTreeSet<InvoiceId> = owed
            .iter()
            .filter(|o| {
                // A repeated key goes to the claim, which refuses and reports it.
                let repeated = o
                    .row
                    .invoice_id
                    .as_ref()
                    .is_some_and(|id| repeated_ids.contains(id));
                repeated || problems::check(o.row.clone()).is_ok()
            })
            .filter_map(|o| o.row.invoice_id.clone())
            .collect();
        let ids: Vec<InvoiceId> = ids.into_iter().collect();
        if ids.is_empty() {
            return Ok(true);
        }
        self.claim_keys(&self.windows, &ids, batches).await
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
