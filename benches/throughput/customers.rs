//! The customer-mode case (`BENCH_CUSTOMERS`, on by default; issue 19):
//! 100,000 owed invoices over 20,000 customers (five each, due 10 to 39
//! days ago, so over the `overdue`, `final` and `final-2` steps), worked
//! once in invoice mode and once with `reminders.group_by = "customer"` (one
//! statement of five invoices per customer). Customer mode runs in
//! `BENCH_ROUNDS` rounds, each followed by `smtp-source` with the
//! statements' size against the same sink, interleaved as the backlogs are.
//! Targets: statements per second at least 0.5x smtp-source (the median of
//! the per-round ratios), and peak RSS within 1.5x of the invoice-mode run
//! over the same backlog.

use chrono::NaiveDate;
use invoice_reminder::config::Settings;
use invoice_reminder::domain::{Currency, Customer, Invoice, InvoiceId, Money, Recipients};
use invoice_reminder::mail::{self, Templates};
use sqlx::PgPool;

use crate::report::{list, median};
use crate::sink::Sink;
use crate::worker::Worker;

const INVOICES: i64 = 100_000;
const CUSTOMERS: i64 = 20_000;
const PER_CUSTOMER: usize = 5;

/// One round: a customer-mode tick, then smtp-source.
struct Round {
    /// Statements per second (customers mailed / tick seconds).
    mails_per_sec: f64,
    /// Invoices per second in the same tick.
    invoices_per_sec: f64,
    /// smtp-source with the statements' size, right after it.
    source_per_sec: f64,
    rss_kib: i64,
}

/// What the case measured.
pub struct CustomerCase {
    rounds: Vec<Round>,
    /// The invoice-mode run over the same backlog.
    invoice_rss_kib: i64,
}

impl CustomerCase {
    /// The target's figure: the median of the per-round ratios.
    pub fn ratio(&self) -> f64 {
        let ratios: Vec<f64> = self
            .rounds
            .iter()
            .map(|r| r.mails_per_sec / r.source_per_sec)
            .collect();
        median(&ratios)
    }

    /// The highest peak RSS of the customer-mode rounds against invoice mode.
    pub fn rss_ratio(&self) -> f64 {
        let most = self.rounds.iter().map(|r| r.rss_kib).max().unwrap_or(0);
        most as f64 / self.invoice_rss_kib.max(1) as f64
    }
}

async fn seed(pool: &PgPool, schema: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {schema}.customers (name, email)
         SELECT 'Customer ' || g, 'customer' || g || '@example.test'
           FROM generate_series(1, {CUSTOMERS}) g"
    )))
    .execute(pool)
    .await
    .expect("customers");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {schema}.invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT 1 + g % {CUSTOMERS}, 'INV-' || g, 10000 + g % 5000, 'EUR',
                current_date - 10 - (g % 30)::int
           FROM generate_series(1, {INVOICES}) g"
    )))
    .execute(pool)
    .await
    .expect("invoices");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ANALYZE {schema}.invoices; ANALYZE {schema}.customers"
    )))
    .execute(pool)
    .await
    .expect("analyze");
}

/// The size of a statement of five invoices over the backlog's steps, as
/// the worker builds it.
fn statement_bytes(settings: &Settings) -> usize {
    let templates = Templates::load(
        &settings.templates,
        &settings.company,
        &settings.late_payment,
        &settings.reminders.stages,
    )
    .expect("templates");
    let stages = &settings.reminders.stages;
    let today = NaiveDate::from_ymd_opt(2026, 11, 30).expect("date");
    let invoices: Vec<Invoice> = (0..PER_CUSTOMER)
        .map(|i| Invoice {
            id: InvoiceId::from(i as i64),
            number: format!("INV-{i}"),
            amount: Money::from_minor(12_345, Currency::parse("EUR").expect("a currency")),
            due_date: today - chrono::Days::new(10 + 6 * i as u64),
            payment_url: None,
            late_payment_regime: None,
        })
        .collect();
    let lines: Vec<mail::statement::Line<'_>> = invoices
        .iter()
        .map(|invoice| mail::statement::Line {
            invoice,
            step: stages
                .due_step(invoice.due_date, today)
                .expect("owes a step"),
        })
        .collect();
    let customer = Customer {
        name: "Customer 7".into(),
        email: Recipients::parse("customer7@example.test").expect("an address"),
        locale: None,
        id: Some("7".into()),
        timezone: None,
        holiday_calendar: None,
    };
    let message_id = mail::statement_message_id("7", 1, 1, &settings.smtp.message_id_domain);
    mail::compose_statement(
        &templates,
        stages,
        &settings.smtp,
        &lines,
        &customer,
        message_id,
        &[],
        today,
    )
    .expect("statement")
    .formatted()
    .len()
}

/// Runs the case on today's worker's database, in `rounds` rounds.
pub async fn run(new: &Worker, settings: &Settings, sink: &Sink, rounds: usize) -> CustomerCase {
    let bytes = statement_bytes(settings);
    new.db.reset_all().await;
    seed(&new.db.pool, &new.db.schema).await;
    let by_invoice = new.run_once(sink.port, INVOICES as usize, &[], false).await;
    new.db.reset_runs().await;
    let mut measured = Vec::new();
    for _ in 0..rounds.max(1) {
        let by_customer = new
            .run_once(
                sink.port,
                INVOICES as usize,
                &[("reminders.group_by", "customer".to_owned())],
                false,
            )
            .await;
        new.db.reset_runs().await;
        let messages = CUSTOMERS as usize;
        let source = tokio::task::block_in_place(|| sink.smtp_source(messages, bytes, false));
        measured.push(Round {
            mails_per_sec: CUSTOMERS as f64 / by_customer.secs,
            invoices_per_sec: by_customer.rate,
            source_per_sec: source,
            rss_kib: by_customer.rss_kib,
        });
    }
    // The next bar for a pooled sender: the same sink with connections reused.
    let reused = tokio::task::block_in_place(|| sink.smtp_source(CUSTOMERS as usize, bytes, true));
    let case = CustomerCase {
        rounds: measured,
        invoice_rss_kib: by_invoice.rss_kib,
    };
    let of = |f: fn(&Round) -> f64| case.rounds.iter().map(f).collect::<Vec<f64>>();
    println!(
        "customer mode, {INVOICES} invoices over {CUSTOMERS} customers, {} round(s): {:.2}x \
         smtp-source (median of the rounds' ratios); peak RSS {:.2}x of invoice mode's {:.1} MiB \
         (invoice mode ran at {:.0}/s)",
        case.rounds.len(),
        case.ratio(),
        case.rss_ratio(),
        case.invoice_rss_kib as f64 / 1024.0,
        by_invoice.rate
    );
    println!(
        "          runs: statements/s {}; invoices/s {}; smtp-source -l {bytes} {}; ratio {}; RSS MiB {}",
        list(&of(|r| r.mails_per_sec), 0),
        list(&of(|r| r.invoices_per_sec), 0),
        list(&of(|r| r.source_per_sec), 0),
        list(&of(|r| r.mails_per_sec / r.source_per_sec), 2),
        list(&of(|r| r.rss_kib as f64 / 1024.0), 1),
    );
    println!("          smtp-source -d -l {bytes} (connections reused): {reused:.0}/s");
    case
}
