//! A billing system's own tables, as a team adopting the worker has them:
//! UUID keys, amounts in decimal major units, "paid" as a status, a hold
//! date, exposed to the worker by one view (README, "Using your own
//! invoices"). And a view of the user's own over the demo tables, for
//! scenarios whose checks read the demo tables.

use sqlx::PgPool;
use uuid::Uuid;

use super::World;

/// The README's UUID-keyed example, verbatim in spirit: `billing.accounts`,
/// `billing.invoices` and the view `billing.reminder_invoices`, with the
/// index the README advises.
pub const UUID_SCHEMA: &str = r#"
CREATE SCHEMA billing;
CREATE TABLE billing.accounts (
    id    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name  text NOT NULL,
    email text,
    lang  text
);
CREATE TABLE billing.invoices (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id uuid NOT NULL REFERENCES billing.accounts (id),
    ref        text NOT NULL,
    total      numeric(12, 2) NOT NULL,
    currency   char(3) NOT NULL,
    due_on     date NOT NULL,
    status     text NOT NULL DEFAULT 'open'
               CHECK (status IN ('open', 'paid', 'void', 'disputed')),
    hold_until date
);
CREATE VIEW billing.reminder_invoices AS
SELECT i.id::text                       AS invoice_id,
       i.ref                            AS invoice_number,
       a.name                           AS customer_name,
       a.email                          AS email,
       a.lang                           AS locale,
       i.total                          AS amount,
       i.currency                       AS currency,
       i.due_on                         AS due_date,
       i.status IN ('paid', 'void')     AS is_paid,
       i.status = 'disputed'            AS paused,
       i.hold_until                     AS paused_until,
       NULL::text                       AS payment_url
  FROM billing.invoices i
  JOIN billing.accounts a ON a.id = i.account_id;
CREATE INDEX invoices_reminder_scan
    ON billing.invoices (due_on, (id::text) COLLATE "C")
 WHERE status NOT IN ('paid', 'void');
CREATE INDEX invoices_key ON billing.invoices ((id::text));
"#;

/// Creates the UUID-keyed billing schema and points the world's replicas at
/// its view.
pub async fn use_uuid_billing(world: &mut World) {
    sqlx::raw_sql(UUID_SCHEMA)
        .execute(world.pool())
        .await
        .expect("create the billing schema");
    world.set("source.relation", "billing.reminder_invoices");
}

/// `count` open invoices, each of its own account, due `due_days_ago` days
/// before the database's today, of `total` EUR; returns their ids.
pub async fn insert_billing_invoices(
    pool: &PgPool,
    count: i64,
    due_days_ago: i32,
    total: &str,
) -> Vec<Uuid> {
    sqlx::query_scalar(
        "WITH a AS (
             INSERT INTO billing.accounts (name, email, lang)
             SELECT 'Account ' || g, 'account' || g || '-' || md5(random()::text) || '@example.test',
                    CASE WHEN g % 3 = 0 THEN 'de' END
               FROM generate_series(1, $1::bigint) g
             RETURNING id
         )
         INSERT INTO billing.invoices (account_id, ref, total, currency, due_on)
         SELECT id, 'B-' || left(id::text, 8), $3::numeric, 'EUR', current_date - $2 FROM a
         RETURNING id",
    )
    .bind(count)
    .bind(due_days_ago)
    .bind(total)
    .fetch_all(pool)
    .await
    .expect("insert billing invoices")
}

/// A view of the user's own, in schema `erp`, over the demo tables: keys as
/// text, amounts in major units, "paid" as a boolean expression. The demo
/// tables' checks (tally, audit, the sink's invoice ids) keep working.
pub async fn use_user_view_over_demo_tables(world: &mut World) {
    sqlx::raw_sql(
        "CREATE SCHEMA erp;
         CREATE VIEW erp.open_invoices AS
         SELECT i.id::text                    AS invoice_id,
                i.number                      AS invoice_number,
                c.name                        AS customer_name,
                c.email::varchar(200)         AS email,
                c.locale                      AS locale,
                i.amount_cents / 100.0        AS amount,
                i.currency                    AS currency,
                i.due_date                    AS due_date,
                i.paid_at IS NOT NULL         AS is_paid,
                c.reminders_paused            AS paused,
                i.reminders_paused_until      AS paused_until,
                'https://pay.example.test/' || i.number AS payment_url
           FROM invoice_reminder.invoices i
           JOIN invoice_reminder.customers c ON c.id = i.customer_id;",
    )
    .execute(world.pool())
    .await
    .expect("create the user's view");
    world.set("source.relation", "erp.open_invoices");
}
