//! Late-payment letters (`BENCH_LETTERS`, on by default): how many final
//! notices with their PDF letter one core composes a second (the claim,
//! the templates and the letter, as the tick does), and a tick of 10,000
//! final notices with letters (regime `eu`) against `smtp-source` at the
//! message's size, interleaved in `BENCH_ROUNDS` rounds.

use std::path::PathBuf;
use std::time::Instant;

use chrono::NaiveDate;
use invoice_reminder::config::{ConfigSource, Settings};
use invoice_reminder::domain::{Currency, Customer, Invoice, InvoiceId, Money, Recipients};
use invoice_reminder::mail::{self, Templates};

use crate::seed::seed_overdue;
use crate::sink::Sink;
use crate::worker::Worker;

const REMINDERS: i64 = 10_000;
/// Letters composed for the one-core rate.
const COMPOSED: usize = 2_000;

/// A rates file that covers every half-year the bench's claims span (the
/// seeded invoices are at most 39 days late): the bench measures the
/// letter, not the published rates, so this file is the bench's own.
fn rates_file() -> PathBuf {
    let path = std::env::temp_dir().join("invoice-reminder-bench-rates.toml");
    let mut text = String::from("ecb = [\n");
    for year in 2024..=2040 {
        text.push_str(&format!(
            "  {{ from = \"{year}-01-01\", percent = 2.15 }},\n  {{ from = \"{year}-07-01\", percent = 2.15 }},\n"
        ));
    }
    text.push_str("]\n");
    std::fs::write(&path, text).expect("write the bench's rates file");
    path
}

fn extra(rates: &std::path::Path) -> Vec<(&'static str, String)> {
    vec![
        ("late_payment.regime", "eu".to_owned()),
        ("late_payment.rates_file", rates.display().to_string()),
    ]
}

/// One final notice with its letter as the worker composes it: its size,
/// and the rate one core composes them at.
fn composed(rates: &std::path::Path) -> (usize, f64) {
    let env: Vec<(String, String)> = extra(rates)
        .into_iter()
        .map(|(k, v)| {
            (
                format!("INVOICE_REMINDER__{}", k.replace('.', "__").to_uppercase()),
                v,
            )
        })
        .collect();
    let settings = Settings::load(&ConfigSource { path: None, env }).expect("letter settings");
    let templates = Templates::load(
        &settings.templates,
        &settings.company,
        &settings.late_payment,
        &settings.reminders.stages,
    )
    .expect("templates");
    let stages = &settings.reminders.stages;
    let today = NaiveDate::from_ymd_opt(2026, 11, 30).expect("date");
    let customer = Customer {
        name: "Customer 7".into(),
        email: Recipients::parse("customer7@example.test").expect("an address"),
        locale: None,
        id: None,
        timezone: None,
        holiday_calendar: None,
    };
    let invoice = |i: usize| Invoice {
        id: InvoiceId::from(i as i64),
        number: format!("INV-{i}"),
        amount: Money::from_minor(10_000 + i as i64, Currency::parse("EUR").expect("EUR")),
        due_date: today - chrono::Days::new(21 + (i % 14) as u64),
        payment_url: None,
        late_payment_regime: None,
    };
    let compose = |i: usize| {
        let invoice = invoice(i);
        let step = stages
            .due_step(invoice.due_date, today)
            .expect("owes a step");
        assert!(
            stages.stage(step).letter,
            "the final stage has letter = true"
        );
        let message_id = mail::message_id(&invoice.id, &step.key, "bench.test");
        mail::compose(
            &templates,
            stages,
            &settings.smtp,
            &invoice,
            &customer,
            step,
            message_id,
            &[],
            today,
        )
        .expect("a final notice with its letter")
        .formatted()
        .len()
    };
    let bytes = compose(0);
    let started = Instant::now();
    let mut total = 0usize;
    for i in 0..COMPOSED {
        total = total.wrapping_add(compose(i));
    }
    let rate = COMPOSED as f64 / started.elapsed().as_secs_f64();
    assert!(total > 0);
    (bytes, rate)
}

/// Runs the case on today's worker's database and prints it.
pub async fn run(new: &Worker, sink: &Sink, rounds: usize) {
    let rates = rates_file();
    let (bytes, per_core) = tokio::task::block_in_place(|| composed(&rates));
    println!(
        "letters: a final notice with its letter is {bytes} bytes; one core composes {per_core:.0}/s (claim, templates, PDF)"
    );
    let mut ratios = Vec::new();
    for round in 0..rounds.max(1) {
        new.db.reset_all().await;
        seed_overdue(&new.db.pool, &new.db.schema, REMINDERS, 0).await;
        // Every invoice owes `final` (21 to 34 days late).
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {}.invoices SET due_date = current_date - 21 - (id % 14)::int",
            new.db.schema
        )))
        .execute(&new.db.pool)
        .await
        .expect("make every invoice owe final");
        let run = new
            .run_once(sink.port, REMINDERS as usize, &extra(&rates), false)
            .await;
        let source =
            tokio::task::block_in_place(|| sink.smtp_source(REMINDERS as usize, bytes, false));
        ratios.push(run.rate / source);
        println!(
            "letters, round {}: {REMINDERS} final notices with letters {:.0}/s, smtp-source -l {bytes} {source:.0}/s: {:.2}x (CPU {:.1} s, peak RSS {:.1} MiB)",
            round + 1,
            run.rate,
            run.rate / source,
            run.cpu_secs,
            run.rss_kib as f64 / 1024.0
        );
    }
    new.db.reset_all().await;
    ratios.sort_by(f64::total_cmp);
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or_default();
    println!(
        "letters: the tick with letters at {median:.2}x smtp-source at the message's size (median); target >= 0.8x: {}",
        if median >= 0.8 { "PASS" } else { "FAIL" }
    );
}
