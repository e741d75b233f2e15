//! Figures that explain the end-to-end rate but are not its limit (they are
//! our own code): the worker's statements alone (db-only), its mailer alone
//! (smtp-only), the straightforward loop (naive), and what one message costs
//! to build. These call the library, the rest of the bench runs binaries.

use std::time::{Duration, Instant};

use chrono::NaiveDate;
use futures::StreamExt;
use invoice_reminder::config::Settings;
use invoice_reminder::db;
use invoice_reminder::db::Db;
use invoice_reminder::db::owing::OwingDay;
use invoice_reminder::domain::{
    Attempted, Currency, Customer, Delivery, Invoice, InvoiceId, Money, Proof, Recipients,
    ReminderId,
};
use invoice_reminder::mail::{self, Mailer, Templates};
use lettre::transport::smtp::client::AsyncSmtpConnection;
use lettre::transport::smtp::extension::ClientId;
use sqlx::PgPool;

/// What a straightforward implementation does: per invoice, one INSERT,
/// one fresh SMTP connection, one UPDATE, one after the other.
pub async fn naive_loop(pool: &PgPool, settings: &Settings, smtp_port: u16) -> f64 {
    let today = db::today(&Db::plain(pool.clone()), settings.schedule.timezone)
        .await
        .expect("today");
    let rows = overdue_rows(pool, today).await;
    let templates = templates(settings);
    let started = Instant::now();
    for (invoice, customer) in &rows {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO invoice_reminder.reminders (invoice_id, period, status)
             VALUES ($1, 'naive', 'sending') RETURNING id",
        )
        .bind(&invoice.id)
        .fetch_one(pool)
        .await
        .expect("insert");
        let mail = compose(settings, &templates, invoice, customer, today);
        // A fresh connection per message; TCP_NODELAY as the worker uses it,
        // so the comparison is about the design, not a socket option.
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", smtp_port))
            .await
            .expect("connect");
        tcp.set_nodelay(true).expect("nodelay");
        let mut conn =
            AsyncSmtpConnection::connect_with_transport(Box::new(tcp), &ClientId::default())
                .await
                .expect("greeting");
        conn.send(mail.envelope(), mail.formatted())
            .await
            .expect("send");
        conn.quit().await.expect("quit");
        sqlx::query(
            "UPDATE invoice_reminder.reminders SET status = 'sent', sent_at = now() WHERE id = $1",
        )
        .bind(id)
        .execute(pool)
        .await
        .expect("update");
    }
    rows.len() as f64 / started.elapsed().as_secs_f64()
}

/// Every overdue invoice as the worker would claim it (no claim made).
async fn overdue_rows(pool: &PgPool, today: NaiveDate) -> Vec<(Invoice, Customer)> {
    type Row = (i64, String, i64, String, NaiveDate, String, String);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT i.id, i.number, i.amount_cents, i.currency, i.due_date, c.name, c.email
           FROM invoice_reminder.invoices i JOIN invoice_reminder.customers c ON c.id = i.customer_id
          WHERE i.paid_at IS NULL AND i.due_date < $1 - 3 ORDER BY i.id",
    )
    .bind(today)
    .fetch_all(pool)
    .await
    .expect("overdue rows");
    rows.into_iter()
        .map(
            |(id, number, amount_cents, currency, due_date, name, email)| {
                (
                    Invoice {
                        id: InvoiceId::from(id),
                        number,
                        amount: Money::from_minor(
                            amount_cents,
                            Currency::parse(&currency).expect("a currency"),
                        ),
                        due_date,
                        payment_url: None,
                        late_payment_regime: None,
                    },
                    Customer {
                        name,
                        email: Recipients::parse(&email).expect("an address"),
                        locale: None,
                        id: None,
                        timezone: None,
                        holiday_calendar: None,
                    },
                )
            },
        )
        .collect()
}

/// The worker's database statements alone, one after the other: page,
/// claim, mark started (`send_concurrency` rows at a time), record as sent.
pub async fn db_only(pool: &PgPool, settings: &Settings) -> f64 {
    let db = Db::new(pool.clone(), settings);
    let batch_size = settings.reminders.batch_size;
    let concurrency = settings.reminders.send_concurrency.get();
    db::source::check(&db).await.expect("source");
    let today = db::today(&db, settings.schedule.timezone)
        .await
        .expect("today");
    let owed = owed(settings, today);
    let run = db::runs::start_run(
        &db,
        db::runs::NewRun {
            replica_id: "bench",
            lock: None,
            run_date: "db-only",
            lease: None,
        },
    )
    .await
    .expect("run");
    let started = Instant::now();
    let mut total = 0usize;
    for window in settings.reminders.stages.windows(today) {
        let mut after = None;
        let one = OwingDay::new(
            today,
            "UTC",
            settings.reminders.min_days_between,
            std::slice::from_ref(&window),
        );
        loop {
            let page = db::invoices::fetch_owed_page(&db, &window, &owed, after, batch_size)
                .await
                .expect("page");
            let Some(last) = page.last else {
                break;
            };
            after = Some(last);
            let ids: Vec<InvoiceId> = page.owed.into_iter().filter_map(|k| k.invoice_id).collect();
            let claimed = db::claims::claim_steps(&db, &ids, &one, run, None)
                .await
                .expect("claim")
                .claimed;
            for chunk in claimed.chunks(concurrency) {
                let ids: Vec<ReminderId> = chunk.iter().map(|c| c.id).collect();
                let message_ids: Vec<String> = chunk
                    .iter()
                    .map(|c| {
                        let invoice = c.source.invoice_id.clone().unwrap_or_default();
                        mail::message_id(&invoice, &c.step, "bench.test")
                    })
                    .collect();
                db::deliveries::mark_started(&db, run, &ids, &message_ids)
                    .await
                    .expect("mark");
            }
            let deliveries: Vec<Attempted> = claimed
                .iter()
                .map(|c| {
                    let invoice = c.source.invoice_id.clone().unwrap_or_default();
                    let message_id = mail::message_id(&invoice, &c.step, "bench.test");
                    Attempted {
                        id: c.id,
                        step: c.step.clone(),
                        attempts_before: c.attempts,
                        message_id: message_id.clone(),
                        delivery: Delivery::Sent {
                            message_id,
                            proof: Proof {
                                reply: "250 2.0.0 Ok: queued".to_owned(),
                                sha256: [0; 32],
                                archived: None,
                                refused: Vec::new(),
                            },
                        },
                        invoice,
                    }
                })
                .collect();
            db::deliveries::record_deliveries(&db, run, 5, &deliveries)
                .await
                .expect("record");
            total += claimed.len();
        }
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// The worker's mailer alone: the default pool size and concurrency, no
/// database.
pub async fn smtp_only(pool: &PgPool, settings: &Settings, size: usize) -> f64 {
    let today = db::today(&Db::plain(pool.clone()), settings.schedule.timezone)
        .await
        .expect("today");
    let rows = overdue_rows(pool, today).await;
    assert_eq!(rows.len(), size);
    let templates = templates(settings);
    let mailer = Mailer::new(
        &settings.smtp,
        invoice_reminder::metrics::Metrics::default().smtp_duration(),
    );
    let started = Instant::now();
    let sent = futures::stream::iter(rows.iter())
        .map(|(invoice, customer)| {
            let mailer = mailer.clone();
            let templates = &templates;
            async move {
                let mail = compose(settings, templates, invoice, customer, today);
                let mut stopped = std::future::pending::<()>();
                mailer
                    .send(
                        &mail,
                        &invoice_reminder::mail::smtp::Open,
                        &mut stopped,
                        None,
                        &invoice_reminder::mail::smtp::Untold,
                    )
                    .await
                    .is_ok()
            }
        })
        .buffer_unordered(settings.reminders.send_concurrency.get())
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    assert_eq!(sent, size, "smtp-only sends failed");
    sent as f64 / started.elapsed().as_secs_f64()
}

/// The worker's templates, as `run-once` loads them.
fn templates(settings: &Settings) -> Templates {
    Templates::load(
        &settings.templates,
        &settings.company,
        &settings.late_payment,
        &settings.reminders.stages,
    )
    .expect("templates")
}

/// What a claim would present as "owing today".
pub fn owed(settings: &Settings, today: NaiveDate) -> OwingDay {
    OwingDay::new(
        today,
        "UTC",
        settings.reminders.min_days_between,
        &settings.reminders.stages.windows(today),
    )
}

/// The message the worker would send for this invoice today (its due step,
/// rendered from the default templates).
fn compose(
    settings: &Settings,
    templates: &Templates,
    invoice: &Invoice,
    customer: &Customer,
    today: NaiveDate,
) -> mail::OutgoingMail {
    let stages = &settings.reminders.stages;
    let step = stages
        .due_step(invoice.due_date, today)
        .expect("the invoice owes a step");
    mail::compose(
        templates,
        stages,
        &settings.smtp,
        invoice,
        customer,
        step,
        mail::message_id(&invoice.id, &step.key, &settings.smtp.message_id_domain),
        &[],
        today,
    )
    .expect("message")
}

/// What one message costs and weighs.
pub struct MessageCost {
    /// Rendering (HTML and text) and MIME building, one thread.
    pub per_message: Duration,
    /// The built message (headers and body), as handed to SMTP DATA.
    pub mean_bytes: usize,
}

/// Renders and builds `n` messages on one thread, over the steps the
/// backlog owes (due 10 to 39 days ago: `overdue` and `final`).
pub fn rendering_cost(settings: &Settings, n: usize) -> MessageCost {
    let templates = templates(settings);
    let today = NaiveDate::from_ymd_opt(2026, 11, 30).expect("date");
    let customer = Customer {
        name: "Customer 7".into(),
        email: Recipients::parse("customer7@example.test").expect("an address"),
        locale: None,
        id: None,
        timezone: None,
        holiday_calendar: None,
    };
    let mut bytes = 0usize;
    let started = Instant::now();
    for i in 0..n {
        let invoice = Invoice {
            id: InvoiceId::from(i as i64),
            number: format!("INV-{i}"),
            amount: Money::from_minor(
                12_345 + i as i64,
                Currency::parse("EUR").expect("a currency"),
            ),
            due_date: today - chrono::Days::new(10 + (i % 30) as u64),
            payment_url: None,
            late_payment_regime: None,
        };
        let mail = std::hint::black_box(compose(settings, &templates, &invoice, &customer, today));
        bytes += mail.formatted().len();
    }
    MessageCost {
        per_message: started.elapsed() / n as u32,
        mean_bytes: bytes / n.max(1),
    }
}
