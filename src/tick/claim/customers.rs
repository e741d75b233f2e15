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

use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::Claimer;
use crate::db;
use crate::db::customers::{CustomerPage, CustomerRow};
use crate::db::invoices::SourceRow;
use crate::db::reminders::ClaimedRow;
use crate::domain::{Claimed, InvoiceId, Letter, Problem, ReminderId, SourceProblem};
use crate::problems;
use crate::tick::TickError;
use crate::tick::db_err;
use crate::tick::mark::{Batch, Marked};
use crate::tick::timings::Spent;

/// The rows a started claim took, with their letters' room in the mark
/// window.
struct Started {
    rows: Vec<ClaimedRow>,
    permits: Vec<OwnedSemaphorePermit>,
}

/// A page as read, and whether it was full (more may follow).
struct Read {
    page: CustomerPage,
    full: bool,
}

impl Claimer {
    /// Customer mode: claims, page by page in customer order, every
    /// invoice that owes a step today (at most `max_invoices_per_mail` per
    /// customer) and hands on one letter per customer. The next page is
    /// read while this one's rows are claimed (on the shared pool: the
    /// claims have a connection of their own). Ok(false): stop claiming
    /// altogether.
    pub(super) async fn claim_customers(
        &self,
        batches: &mpsc::Sender<Batch>,
    ) -> Result<bool, TickError> {
        let settings = &self.p.ctx().settings.reminders;
        let per_mail = usize::try_from(settings.max_invoices_per_mail)
            .unwrap_or(usize::MAX)
            .max(1);
        let most = usize::try_from(settings.batch_size).unwrap_or(usize::MAX);
        let most_customers = self.window.group();
        let Some(mut page) = self.customer_page(None, 0).await? else {
            return Ok(false);
        };
        // The last group of a page, short of a full claim, is claimed with
        // the next page's first customers (fewer, fuller claims).
        let mut carry: Vec<CustomerRow> = Vec::new();
        loop {
            let Some((owed, next)) = self.cut(page).await? else {
                return self.claim_groups(vec![carry], batches).await;
            };
            let mut rows = std::mem::take(&mut carry);
            rows.extend(self.usable(owed, per_mail));
            let mut groups = whole_customers(rows, most, most_customers);
            let Some(after) = next else {
                return self.claim_groups(groups, batches).await;
            };
            if groups
                .last()
                .is_some_and(|g| g.len() < most && customer_count(g) < most_customers)
            {
                carry = groups.pop().unwrap_or_default();
            }
            let pending = groups
                .iter()
                .map(Vec::len)
                .sum::<usize>()
                .saturating_add(carry.len());
            let (read, claimed) = tokio::join!(
                self.customer_page(Some(after), pending),
                self.claim_groups(groups, batches)
            );
            if !claimed? {
                return Ok(false);
            }
            match read? {
                Some(next) => page = next,
                // Stopped, or the tick's share is taken by what is being
                // claimed: the carried customers still go.
                None => {
                    self.claim_groups(vec![carry], batches).await?;
                    return Ok(false);
                }
            }
        }
    }

    /// Reads the page after customer `after`, of as many rows as the tick
    /// may still claim besides `pending` (rows being claimed meanwhile).
    /// Ok(None): stop claiming (stopped, or `max_per_tick` reached).
    async fn customer_page(
        &self,
        after: Option<String>,
        pending: usize,
    ) -> Result<Option<Read>, TickError> {
        if self.p.stop_reason().is_some() {
            return Ok(None);
        }
        let batch_size = self.p.ctx().settings.reminders.batch_size;
        let Some(limit) = self.room(batch_size, pending) else {
            return Ok(None);
        };
        let reading = db::customers::fetch_customer_page(
            &self.p.ctx().db,
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
        let full = page.customers.len() >= usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(Some(Read { page, full }))
    }

    /// A page's owed rows of whole customers, and the customer the next
    /// page starts after (None: this was the last page). A page that may
    /// end inside its last customer leaves that customer to the next page;
    /// a customer whose unpaid invoices fill a page alone is read by key.
    /// Ok(None): the page is empty.
    async fn cut(
        &self,
        read: Read,
    ) -> Result<Option<(Vec<CustomerRow>, Option<String>)>, TickError> {
        let Read { page, full } = read;
        let Some(last) = page.customers.last().cloned() else {
            return Ok(None);
        };
        let mut owed = page.owed;
        if !full {
            return Ok(Some((owed, None)));
        }
        match page.customers.iter().rev().find(|c| **c != last) {
            Some(before) => {
                owed.retain(|r| r.row.customer_id.as_ref() != Some(&last));
                Ok(Some((owed, Some(before.clone()))))
            }
            None => {
                let settings = &self.p.ctx().settings.reminders;
                let owed = db::customers::owed_of_customers(
                    &self.p.ctx().stages.claims,
                    &self.windows,
                    self.owed(),
                    std::slice::from_ref(&last),
                    settings.max_invoices_per_mail,
                )
                .await
                .map_err(db_err(
                    "reading the invoices of a customer that owes a reminder",
                ))?;
                Ok(Some((owed, Some(last))))
            }
        }
    }

    /// Claims each group of whole customers in one statement and hands its
    /// letters on; a group's rows are checked and handed on while the next
    /// group is claimed. Ok(false): stop claiming altogether.
    async fn claim_groups(
        &self,
        groups: Vec<Vec<CustomerRow>>,
        batches: &mpsc::Sender<Batch>,
    ) -> Result<bool, TickError> {
        let mut claimed: Option<Started> = None;
        for customers in groups.into_iter().filter(|g| !g.is_empty()) {
            let letters = customer_count(&customers);
            let ids: Vec<InvoiceId> = customers
                .into_iter()
                .filter_map(|o| o.row.invoice_id)
                .collect();
            let (handed, next) = tokio::join!(
                self.hand_on_started(claimed.take(), batches),
                self.claim_started(&ids, letters)
            );
            match (handed, next) {
                (Ok(true), Ok(Some(next))) => claimed = Some(next),
                (handed, next) => {
                    let next = match next {
                        Ok(Some(next)) => {
                            // Claimed, never to be sent: un-marked, returned
                            // at the end of the run.
                            self.abandon(next).await;
                            Ok(())
                        }
                        Ok(None) => Ok(()),
                        Err(e) => Err(e),
                    };
                    handed?;
                    next?;
                    return Ok(false);
                }
            }
        }
        self.hand_on_started(claimed, batches).await
    }

    /// Claims `ids`, the owed rows of `letters` whole customers (at most a
    /// mark group of them), **marked started by the claim itself**, in room
    /// taken in the mark window before the claim: the claim is the
    /// letters' mark (no mark statement, no commit of its own). Ok(None):
    /// stop claiming altogether.
    async fn claim_started(
        &self,
        ids: &[InvoiceId],
        letters: usize,
    ) -> Result<Option<Started>, TickError> {
        let Some(reserved) = self.reserve(ids.len()).await else {
            return Ok(None);
        };
        let opening = self.window.open(letters, letters);
        let Some(permits) = self
            .p
            .timings()
            .time(Spent::MarkWaitingForRoom, opening)
            .await
        else {
            return Ok(None);
        };
        // Waiting for room may have outlasted the lease.
        if self.p.stop_reason().is_some() {
            return Ok(None);
        }
        let Some(rows) = self.claim_reserved(&self.windows, ids, true).await? else {
            return Ok(None);
        };
        reserved.keep(rows.len());
        Ok(Some(Started { rows, permits }))
    }

    /// Checks rows a started claim took and hands their letters to the
    /// senders through the marker, each with its room in the mark window. A
    /// claimed row that is not sent after all is un-marked at once, so what
    /// a SIGKILL can leave unknown stays within the window. Ok(false): the
    /// marker is gone.
    async fn hand_on_started(
        &self,
        started: Option<Started>,
        batches: &mpsc::Sender<Batch>,
    ) -> Result<bool, TickError> {
        let Some(Started { rows, permits }) = started else {
            return Ok(true);
        };
        let claimed: Vec<ReminderId> = rows.iter().map(|r| r.id).collect();
        let (batch, dropped) = match self.screen(rows).await {
            Ok(screened) => screened,
            Err(e) => {
                // Started, never sent: the end of the run returns them.
                self.p.return_at_end(claimed);
                return Err(e);
            }
        };
        let mut letters = self.letters(batch);
        let beyond = letters.split_off(letters.len().min(permits.len()));
        let mut unsent = dropped;
        if !beyond.is_empty() {
            // More letters than room taken (never, with whole customers of
            // one letter each): not sent now, their room freed.
            let ids: Vec<ReminderId> = beyond.iter().flat_map(Letter::ids).collect();
            self.p.bound().release(ids.len());
            unsent.extend(ids);
        }
        self.unmark(unsent).await?;
        let marked: Vec<Marked> = letters
            .into_iter()
            .zip(permits)
            .map(|(letter, permit)| Marked { letter, permit })
            .collect();
        if marked.is_empty() {
            return Ok(true);
        }
        match batches.send(Batch::Started(marked)).await {
            Ok(()) => Ok(true),
            Err(gone) => {
                if let Batch::Started(marked) = gone.0 {
                    self.p.not_sent_all(
                        marked
                            .iter()
                            .flat_map(|m| m.letter.ids())
                            .collect::<Vec<_>>(),
                    );
                }
                Ok(false)
            }
        }
    }

    /// Rows a started claim took that will not be sent: their room freed,
    /// their mark taken back (or, failing that, returned at the end of the
    /// run).
    async fn abandon(&self, started: Started) {
        let ids: Vec<ReminderId> = started.rows.iter().map(|r| r.id).collect();
        self.p.bound().release(ids.len());
        if let Err(e) = self.unmark(ids).await {
            tracing::debug!(error = %e, "claimed rows left for the end of the run");
        }
    }

    /// Takes back the started mark of claimed rows that will not be sent
    /// (their room is already free); if that fails, the end of the run
    /// returns them.
    async fn unmark(&self, ids: Vec<ReminderId>) -> Result<(), TickError> {
        if ids.is_empty() {
            return Ok(());
        }
        let database = &self.p.ctx().stages.claims;
        if let Err(e) = db::deliveries::unmark(database, self.p.run_id(), &ids).await {
            self.p.return_at_end(ids);
            return Err(db_err(
                "taking back the start of rows that will not be sent",
            )(e));
        }
        Ok(())
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
/// customers with at most `most` rows and at most `customers` customers
/// each (a customer with more rows, which the settings rule out, is a group
/// of its own).
fn whole_customers(owed: Vec<CustomerRow>, most: usize, customers: usize) -> Vec<Vec<CustomerRow>> {
    let mut groups: Vec<Vec<CustomerRow>> = Vec::new();
    let mut group: Vec<CustomerRow> = Vec::new();
    let mut in_group = 0usize;
    let mut rows = owed.into_iter().peekable();
    while let Some(first) = rows.next() {
        let mut customer = vec![first];
        while let Some(next) = rows.next_if(|r| r.row.customer_id == customer[0].row.customer_id) {
            customer.push(next);
        }
        let full =
            group.len().saturating_add(customer.len()) > most || in_group >= customers.max(1);
        if !group.is_empty() && full {
            groups.push(std::mem::take(&mut group));
            in_group = 0;
        }
        group.append(&mut customer);
        in_group = in_group.saturating_add(1);
    }
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

/// How many customers `rows` (ordered by customer) hold.
fn customer_count(rows: &[CustomerRow]) -> usize {
    rows.windows(2)
        .filter(|w| w[0].row.customer_id != w[1].row.customer_id)
        .count()
        .saturating_add(usize::from(!rows.is_empty()))
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
        let groups = whole_customers(rows_of(&[("a", 3), ("b", 3), ("c", 2), ("d", 4)]), 4, 10);
        assert_eq!(sizes(&groups), [3, 3, 2, 4]);
        let groups = whole_customers(rows_of(&[("a", 1), ("b", 2), ("c", 1), ("d", 4)]), 4, 10);
        assert_eq!(sizes(&groups), [4, 4]);
        for group in &groups {
            let customers: BTreeSet<_> = group.iter().map(|r| &r.row.customer_id).collect();
            assert!(customers.len() <= 3);
        }
    }

    #[test]
    fn groups_hold_at_most_the_customers_one_mark_group_takes() {
        let groups = whole_customers(
            rows_of(&[("a", 1), ("b", 1), ("c", 2), ("d", 1), ("e", 1)]),
            100,
            2,
        );
        assert_eq!(sizes(&groups), [2, 3, 1]);
        for group in &groups {
            assert!(customer_count(group) <= 2);
        }
        assert_eq!(customer_count(&rows_of(&[("a", 2), ("b", 1)])), 2);
        assert_eq!(customer_count(&[]), 0);
    }

    #[test]
    fn a_customer_over_the_limit_is_a_group_of_its_own_and_nothing_is_lost() {
        let groups = whole_customers(rows_of(&[("a", 1), ("b", 6), ("c", 1)]), 4, 10);
        assert_eq!(sizes(&groups), [1, 6, 1]);
        assert!(whole_customers(Vec::new(), 4, 10).is_empty());
    }
}
