//! Source views generated from a seed, and what each row must come to.
//!
//! The view's column types are drawn among those the contract accepts
//! ([`Shape`]); its rows are made by `rows` from known values, so what
//! each must come to is known before any tick runs ([`Expected`]): a valid
//! row owes its due step (exactly one mail, its Message-ID computed here
//! with the library) or owes nothing (no mail, no report); an invalid row
//! has exactly one defect and is reported with its label.

use std::collections::{BTreeMap, BTreeSet};

use chrono::NaiveDate;
use invoice_reminder::config::Settings;
use invoice_reminder::domain::InvoiceId;

use super::rng::Rng;
use super::rows::Generator;

/// The SQL type of the view's amount column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AmountType {
    /// `amount_minor` of this integer type.
    Minor(&'static str),
    /// `amount` (major units) of this type (`fz.money` is a domain over
    /// numeric).
    Major(&'static str),
}

impl AmountType {
    pub(super) fn column(self) -> &'static str {
        match self {
            Self::Minor(_) => "amount_minor",
            Self::Major(_) => "amount",
        }
    }

    pub(super) fn sql_type(self) -> &'static str {
        match self {
            Self::Minor(t) | Self::Major(t) => t,
        }
    }

    pub(super) fn decimal(self) -> bool {
        matches!(self, Self::Major("numeric") | Self::Major("fz.money"))
    }

    /// The largest value the column's type holds.
    pub(super) fn type_max(self) -> i64 {
        match self.sql_type() {
            "smallint" => i64::from(i16::MAX),
            "integer" => i64::from(i32::MAX),
            _ => i64::MAX,
        }
    }
}

/// The view's column types, drawn per seed among those the contract allows.
#[derive(Debug, Clone)]
pub struct Shape {
    pub invoice_id: &'static str,
    /// `text`-like, or `bigint`/`integer` (then numbers are integers).
    pub invoice_number: &'static str,
    pub customer_name: &'static str,
    pub email: &'static str,
    pub currency: &'static str,
    pub amount: AmountType,
    /// The schema citext is installed in (`public`, or one of its own, off
    /// the worker's search_path, as Supabase installs extensions).
    pub citext_schema: &'static str,
}

impl Shape {
    pub(super) fn draw(rng: &mut Rng) -> Self {
        Self {
            invoice_id: *rng.pick(&["text", "varchar", "varchar(40)", "character(24)", "citext"]),
            invoice_number: *rng.pick(&["text", "varchar", "bigint", "integer"]),
            customer_name: *rng.pick(&["text", "varchar", "citext"]),
            email: *rng.pick(&["text", "varchar", "varchar(2000)", "citext"]),
            currency: *rng.pick(&["text", "varchar", "citext"]),
            amount: *rng.pick(&[
                AmountType::Minor("bigint"),
                AmountType::Minor("integer"),
                AmountType::Minor("smallint"),
                AmountType::Major("numeric"),
                AmountType::Major("fz.money"),
                AmountType::Major("bigint"),
                AmountType::Major("integer"),
                AmountType::Major("smallint"),
            ]),
            citext_schema: *rng.pick(&["public", "fz_ext"]),
        }
    }

    pub(super) fn numeric_numbers(&self) -> bool {
        matches!(self.invoice_number, "bigint" | "integer")
    }

    /// The schema, its loosely typed table and the view over it.
    pub fn ddl(&self) -> String {
        let typed = |t: &str| match t {
            "citext" => format!("{}.citext", self.citext_schema),
            other => other.to_owned(),
        };
        format!(
            "CREATE SCHEMA IF NOT EXISTS {ext};
             CREATE EXTENSION IF NOT EXISTS citext SCHEMA {ext};
             CREATE SCHEMA fz;
             CREATE DOMAIN fz.money AS numeric;
             CREATE TABLE fz.rows (
                 n serial PRIMARY KEY, invoice_id text, invoice_number text, customer_name text,
                 email text, locale text, currency text, due_date date, is_paid boolean,
                 paused boolean, paused_until date, payment_url text, amount text,
                 customer_id text);
             CREATE VIEW fz.source AS
             SELECT invoice_id::{id} AS invoice_id, invoice_number::{number} AS invoice_number,
                    customer_name::{name} AS customer_name, email::{email} AS email,
                    locale, currency::{currency} AS currency, due_date, is_paid, paused,
                    paused_until, payment_url::varchar AS payment_url,
                    amount::{amount_type} AS {amount_column}, customer_id
               FROM fz.rows;",
            ext = self.citext_schema,
            id = typed(self.invoice_id),
            number = self.invoice_number,
            name = typed(self.customer_name),
            email = typed(self.email),
            currency = typed(self.currency),
            amount_type = self.amount.sql_type(),
            amount_column = self.amount.column(),
        )
    }
}

/// One row of `fz.rows`, every column as the view reads it (text casts).
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub invoice_id: Option<String>,
    pub invoice_number: Option<String>,
    pub customer_name: Option<String>,
    pub email: Option<String>,
    pub locale: Option<String>,
    pub currency: Option<String>,
    pub due_date: Option<NaiveDate>,
    pub is_paid: Option<bool>,
    pub paused: Option<bool>,
    pub paused_until: Option<NaiveDate>,
    pub payment_url: Option<String>,
    pub amount: Option<String>,
    /// Customer mode's `customer_id` (None in invoice mode).
    pub customer_id: Option<String>,
}

/// How audit names a problem row: by its key, or by its number when the
/// key is NULL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Named {
    Id(String),
    Number(String),
}

/// What the seed's rows must come to.
#[derive(Debug, Default)]
pub struct Expected {
    /// Message-ID (without brackets) -> (invoice key, step): each valid
    /// owed row, mailed exactly once by the end (invoice mode).
    pub mails: BTreeMap<String, (String, String)>,
    /// (invoice key, step) of each valid owed row to be mailed (either
    /// mode; customer mode checks these in the statements' headers).
    pub owed: BTreeSet<(String, String)>,
    /// (invoice key, step) of each valid owed row whose every address is
    /// suppressed (customer mode): recorded `skipped`, never mailed.
    pub suppressed: BTreeSet<(String, String)>,
    /// The addresses to suppress before the first tick.
    pub suppress: Vec<String>,
    /// Each invalid row (each repeated key once) with its problem label.
    pub problems: BTreeSet<(Named, &'static str)>,
    /// Keys of valid rows that owe nothing today (no mail, no report).
    pub quiet: BTreeSet<String>,
}

/// A generated source: its shape, its rows (in insertion order) and what
/// they must come to.
pub struct Source {
    pub shape: Shape,
    pub rows: Vec<Row>,
    pub expected: Expected,
}

/// Customer mode's customers: each with the address cell all its valid
/// rows share, drawn with a skew so a few customers have many invoices.
struct Customers {
    emails: Vec<String>,
    /// Indexes of the customers whose every address is suppressed.
    suppressed: BTreeSet<usize>,
}

impl Customers {
    fn draw(g: &mut Generator<'_>) -> Self {
        let count = g.rng().range(3, 12) as usize;
        let emails = (0..count)
            .map(|_| g.valid_not_owed().email.unwrap_or_default())
            .collect();
        let mut suppressed = BTreeSet::new();
        for _ in 0..g.rng().below(3) {
            suppressed.insert(g.rng().below(count as u64) as usize);
        }
        Self { emails, suppressed }
    }

    /// A customer for the next row: low indexes more often.
    fn pick(&self, rng: &mut Rng) -> usize {
        let n = self.emails.len() as u64;
        rng.below(n).min(rng.below(n)) as usize
    }

    /// Gives `row` customer `c`, and (`valid`) its address cell.
    fn assign(&self, row: &mut Row, c: usize, valid: bool) {
        row.customer_id = Some(format!("cust-{c}"));
        if valid {
            row.email = self.emails.get(c).cloned();
        }
    }
}

/// Draws a source for `seed`: `today` is the database's date, `settings`
/// gives the stages and the Message-ID domain; `by_customer`: rows carry a
/// customer (a few with many invoices, some with every address suppressed,
/// a few valid rows with none).
pub fn generate(rng: &mut Rng, today: NaiveDate, settings: &Settings, by_customer: bool) -> Source {
    let shape = Shape::draw(rng);
    let mut g = Generator::new(rng, shape.clone(), today);
    let mut rows = Vec::new();
    let mut expected = Expected::default();
    let stages = &settings.reminders.stages;
    let domain = &settings.smtp.message_id_domain;
    let customers = by_customer.then(|| Customers::draw(&mut g));

    let owed = g.rng().range(20, 60);
    // Sometimes one key is the empty string: a key like any other.
    let empty_key = g.rng().chance(30);
    for i in 0..owed {
        let (mut row, age) = g.valid_owed();
        if empty_key && i == 0 {
            row.invoice_id = Some(String::new());
        }
        let key = row.invoice_id.clone().expect("a valid row has a key");
        let step = stages
            .due_step(invoice_reminder::stages::shift(today, -age), today)
            .unwrap_or_else(|| panic!("age {age} owes no step"))
            .key
            .to_string();
        if let Some(customers) = &customers {
            if g.rng().chance(5) {
                // No customer: customer mode reports it, never mails it.
                expected.problems.insert((Named::Id(key), "missing_field"));
                rows.push(row);
                continue;
            }
            let c = customers.pick(g.rng());
            customers.assign(&mut row, c, true);
            if customers.suppressed.contains(&c) {
                expected.suppressed.insert((key, step));
                rows.push(row);
                continue;
            }
        }
        let id = invoice_reminder::mail::message_id(
            &InvoiceId(key.clone()),
            &step.as_str().into(),
            domain,
        );
        expected.owed.insert((key.clone(), step.clone()));
        expected.mails.insert(id, (key, step));
        rows.push(row);
    }
    let quiet = g.rng().range(4, 15);
    for _ in 0..quiet {
        let mut row = g.valid_not_owed();
        if let Some(customers) = &customers {
            let c = customers.pick(g.rng());
            customers.assign(&mut row, c, true);
        }
        expected
            .quiet
            .insert(row.invoice_id.clone().expect("a valid row has a key"));
        rows.push(row);
    }
    if let Some(customers) = &customers {
        for c in &customers.suppressed {
            let cell = customers.emails.get(*c).cloned().unwrap_or_default();
            let addresses =
                invoice_reminder::domain::Recipients::parse(&cell).expect("a valid cell");
            expected
                .suppress
                .extend(addresses.addresses().iter().map(ToString::to_string));
        }
    }
    let invalid = g.rng().range(8, 30);
    for _ in 0..invalid {
        let (label, mut bad_rows) = g.invalid();
        if let Some(customers) = &customers {
            for row in &mut bad_rows {
                let c = customers.pick(g.rng());
                customers.assign(row, c, false);
            }
        }
        let first = &bad_rows[0];
        let named = match &first.invoice_id {
            Some(id) => Named::Id(id.clone()),
            None => Named::Number(first.invoice_number.clone().expect("a numbered row")),
        };
        assert!(
            expected.problems.insert((named, label)),
            "two invalid rows share a name"
        );
        rows.extend(bad_rows);
    }
    // Shuffle, so that no order of the table is assumed (Fisher-Yates).
    for i in (1..rows.len()).rev() {
        let j = g.rng().below(i as u64 + 1) as usize;
        rows.swap(i, j);
    }
    Source {
        shape,
        rows,
        expected,
    }
}

/// Inserts `rows` into `fz.rows`.
pub async fn insert(pool: &sqlx::PgPool, rows: &[Row]) {
    let mut tx = pool.begin().await.expect("begin");
    for r in rows {
        sqlx::query(
            "INSERT INTO fz.rows (invoice_id, invoice_number, customer_name, email, locale, currency,
                                  due_date, is_paid, paused, paused_until, payment_url, amount,
                                  customer_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(&r.invoice_id)
        .bind(&r.invoice_number)
        .bind(&r.customer_name)
        .bind(&r.email)
        .bind(&r.locale)
        .bind(&r.currency)
        .bind(r.due_date)
        .bind(r.is_paid)
        .bind(r.paused)
        .bind(r.paused_until)
        .bind(&r.payment_url)
        .bind(&r.amount)
        .bind(&r.customer_id)
        .execute(&mut *tx)
        .await
        .unwrap_or_else(|e| panic!("insert {r:?}: {e}"));
    }
    tx.commit().await.expect("commit");
}
