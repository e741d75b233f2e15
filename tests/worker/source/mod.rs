//! The source: reminding from the user's own billing tables through a view
//! (the source contract), and our tables in a schema of their own. The
//! modules below treat every row as untrusted input: bad rows (`untrusted`),
//! bad dates (`dates`), and customer mode's scan (`customer_order`).

mod customer_order;
mod dates;
mod untrusted;

use invoice_reminder::db;
use invoice_reminder::domain::InvoiceId;
use invoice_reminder::tick::{TickOutcome, run_tick};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::common::billing::{self, insert_billing_invoices};
use crate::common::{self, TestDb, World, cli};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test]
async fn invoices_with_uuid_keys_decimal_amounts_and_a_status_column_are_reminded_through_a_view() {
    let mut world = World::new().await;
    billing::use_uuid_billing(&mut world).await;
    let open = insert_billing_invoices(world.pool(), 3, 10, "1234.50").await;
    let paid = insert_billing_invoices(world.pool(), 1, 10, "99.00").await;
    let disputed = insert_billing_invoices(world.pool(), 1, 10, "5.00").await;
    sqlx::query("UPDATE billing.invoices SET status = 'paid' WHERE id = $1")
        .bind(paid[0])
        .execute(world.pool())
        .await
        .unwrap();
    sqlx::query("UPDATE billing.invoices SET status = 'disputed' WHERE id = $1")
        .bind(disputed[0])
        .execute(world.pool())
        .await
        .unwrap();
    let ctx = world.context().await;

    let outcome = run_tick(&ctx, &CancellationToken::new()).await.unwrap();
    let again = run_tick(&ctx, &CancellationToken::new()).await.unwrap();

    let TickOutcome::Done(summary) = outcome else {
        panic!("expected Done, got {outcome:?}");
    };
    assert_eq!(summary.counts.sent, 3);
    assert!(matches!(again, TickOutcome::Done(s) if s.counts.claimed == 0));
    let mut mailed: Vec<String> = world
        .sink
        .received()
        .iter()
        .map(|m| m.header("X-Invoice-Id").unwrap().trim().to_owned())
        .collect();
    mailed.sort();
    let mut expected: Vec<String> = open.iter().map(ToString::to_string).collect();
    expected.sort();
    assert_eq!(
        mailed, expected,
        "the open invoices, by their UUID, once each"
    );
    let mail = &world.sink.received()[0];
    assert!(
        mail.body.contains("1,234.50 EUR") || mail.body.contains("1.234,50 EUR"),
        "{}",
        mail.body
    );
    let message_id = mail.header("Message-ID").unwrap();
    assert!(
        message_id.contains(&format!(
            "invoice-{}.overdue@",
            mail.header("X-Invoice-Id").unwrap().trim()
        )),
        "{message_id}"
    );
    let recorded: Vec<String> =
        sqlx::query_scalar("SELECT invoice_id FROM reminders WHERE status = 'sent' ORDER BY 1")
            .fetch_all(world.pool())
            .await
            .unwrap();
    assert_eq!(recorded, expected);
}

#[tokio::test]
async fn an_invoice_paid_after_the_scan_and_before_the_claim_is_not_mailed() {
    let mut world = World::new().await;
    billing::use_uuid_billing(&mut world).await;
    let ids = insert_billing_invoices(world.pool(), 3, 10, "10.00").await;
    let ctx = world.context().await;
    db::source::check(&ctx.db).await.unwrap();
    let (window, owed) = common::window(world.pool(), "overdue").await;
    let page = db::invoices::fetch_owed_page(&ctx.db, &window, &owed, None, 100)
        .await
        .unwrap();
    assert_eq!(page.owed.len(), 3, "the scan saw all three unpaid");

    // Paid in the billing system between the scan and the claim.
    sqlx::query("UPDATE billing.invoices SET status = 'paid' WHERE id = $1")
        .bind(ids[1])
        .execute(world.pool())
        .await
        .unwrap();
    let run = common::start_unlocked_run(&ctx.db).await;
    let keys: Vec<InvoiceId> = page.owed.into_iter().filter_map(|k| k.invoice_id).collect();
    let claimed = db::claims::claim_steps(&ctx.db, &keys, &owed, run, None)
        .await
        .unwrap();

    let mut claimed: Vec<String> = claimed
        .claimed
        .into_iter()
        .filter_map(|c| c.source.invoice_id.map(|id| id.0))
        .collect();
    claimed.sort();
    let mut unpaid = vec![ids[0].to_string(), ids[2].to_string()];
    unpaid.sort();
    assert_eq!(claimed, unpaid);
}

#[tokio::test]
async fn a_citext_column_is_accepted_when_the_extension_lives_in_a_schema_of_its_own() {
    // As Supabase and many DBAs install extensions: in `extensions`, not
    // on the worker's search_path (the type is then `extensions.citext`).
    let mut world = World::new().await;
    sqlx::raw_sql(
        "CREATE SCHEMA extensions;
         CREATE EXTENSION citext SCHEMA extensions;
         CREATE SCHEMA erp;
         CREATE VIEW erp.ci AS
         SELECT invoice_id::extensions.citext AS invoice_id, invoice_number,
                customer_name::extensions.citext AS customer_name,
                email::extensions.citext AS email, locale, amount_minor,
                currency::extensions.citext AS currency, due_date, is_paid, paused,
                paused_until, payment_url
           FROM invoice_reminder.reminder_source;",
    )
    .execute(world.pool())
    .await
    .unwrap();
    common::insert_overdue(world.pool(), 2).await;
    world.set("source.relation", "erp.ci");

    let check = cli(&world, &["check-source"]).await;
    let once = cli(&world, &["run-once"]).await;

    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    assert_eq!(once.status.code(), Some(0), "{}", stderr(&once));
    assert_eq!(world.sink.count(), 2);
}

#[tokio::test]
async fn a_view_missing_a_column_or_with_a_wrong_type_fails_start_up_with_exit_2_naming_it() {
    let mut world = World::new().await;
    sqlx::raw_sql(
        "CREATE SCHEMA erp;
         CREATE VIEW erp.no_paid AS
         SELECT invoice_id, invoice_number, customer_name, email, locale, amount_minor, currency,
                due_date, paused, paused_until, payment_url
           FROM invoice_reminder.reminder_source;
         CREATE VIEW erp.uuid_key AS
         SELECT gen_random_uuid() AS invoice_id, invoice_number, customer_name, email, locale,
                amount_minor, currency, due_date, is_paid, paused, paused_until, payment_url
           FROM invoice_reminder.reminder_source;",
    )
    .execute(world.pool())
    .await
    .unwrap();
    common::insert_overdue(world.pool(), 2).await;

    world.set("source.relation", "erp.no_paid");
    for command in [
        &["run-once"][..],
        &["check-source"],
        &["run-once", "--dry-run"],
    ] {
        let out = cli(&world, command).await;
        assert_eq!(out.status.code(), Some(2), "{command:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("source.relation") && err.contains("\"is_paid\" is missing"),
            "{err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
    world.set("source.relation", "erp.uuid_key");
    let out = cli(&world, &["run-once"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("\"invoice_id\" has type uuid"),
        "{}",
        stderr(&out)
    );
    world.set("source.relation", "erp.nowhere");
    let out = cli(&world, &["run-once"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("\"erp\".\"nowhere\" does not exist"),
        "{}",
        stderr(&out)
    );
    assert_eq!(world.sink.count(), 0);
}

#[tokio::test]
async fn check_source_warns_of_a_sequential_scan_over_a_large_table_until_the_advised_index_exists()
{
    let mut world = World::new().await;
    billing::use_uuid_billing(&mut world).await;
    sqlx::raw_sql("DROP INDEX billing.invoices_reminder_scan")
        .execute(world.pool())
        .await
        .unwrap();
    insert_billing_invoices(world.pool(), 20_000, -30, "10.00").await;
    insert_billing_invoices(world.pool(), 50, 10, "10.00").await;
    sqlx::raw_sql("ANALYZE billing.invoices; ANALYZE billing.accounts")
        .execute(world.pool())
        .await
        .unwrap();

    let before = cli(&world, &["check-source"]).await;
    sqlx::raw_sql(
        "CREATE INDEX invoices_reminder_scan ON billing.invoices (due_on, (id::text) COLLATE \"C\")
          WHERE status NOT IN ('paid', 'void');
         ANALYZE billing.invoices;",
    )
    .execute(world.pool())
    .await
    .unwrap();
    let after = cli(&world, &["check-source"]).await;

    let before_text = common::stdout(&before);
    assert_eq!(before.status.code(), Some(0), "{}", stderr(&before));
    assert!(before_text.contains("contract: ok"), "{before_text}");
    assert!(
        before_text.contains("warning: the scan reads billing.invoices")
            && before_text.contains("CREATE INDEX"),
        "{before_text}"
    );
    let after_text = common::stdout(&after);
    assert!(!after_text.contains("warning"), "{after_text}");
    assert!(
        after_text.contains("invoices_reminder_scan"),
        "{after_text}"
    );
}

/// Every relation and function in `public` of the test database.
async fn public_objects(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public'
         UNION ALL
         SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'public'
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Our tables, views, sequences and functions by schema.
async fn ours(pool: &PgPool, schema: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relkind IN ('r', 'v', 'S')
         UNION ALL
         SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = $1
         ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap()
}

const OUR_OBJECTS: [&str; 10] = [
    "_sqlx_migrations",
    "customers",
    "customers_id_seq",
    "invoice_reminder_clock",
    "invoices",
    "invoices_id_seq",
    "job_runs",
    "job_runs_id_seq",
    "lock_fence_seq",
    "lock_fences",
];

#[tokio::test]
async fn migrate_creates_everything_in_its_schema_and_nothing_in_public_even_beside_a_public_invoices_table()
 {
    let db = TestDb::create_empty().await;
    sqlx::raw_sql(
        "CREATE TABLE public.invoices (id uuid PRIMARY KEY, total numeric NOT NULL, state text);
         INSERT INTO public.invoices VALUES (gen_random_uuid(), 12.5, 'open');",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let before = public_objects(&db.pool).await;
    let world = World::on(db).await;

    let migrated = cli(&world, &["migrate"]).await;
    let again = cli(&world, &["migrate"]).await;
    let seeded = cli(&world, &["seed", "--customers", "5", "--invoices", "20"]).await;
    let ticked = cli(&world, &["run-once"]).await;

    for out in [&migrated, &again, &seeded, &ticked] {
        assert!(out.status.success(), "{}", stderr(out));
    }
    assert_eq!(
        public_objects(world.pool()).await,
        before,
        "public is untouched"
    );
    let (rows, state): (i64, String) =
        sqlx::query_as("SELECT count(*), min(state) FROM public.invoices")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!((rows, state.as_str()), (1, "open"));
    let mut expected: Vec<&str> = OUR_OBJECTS.to_vec();
    expected.extend([
        "reminder_source",
        "reminders",
        "message_archive",
        "reminders_id_seq",
        "suppressions",
        "webhook_ids",
        "relay_pace",
        "console_sessions",
        "console_activity",
        "console_activity_id_seq",
        "console_pauses",
        "payment_events",
        "payment_holds",
        "payment_links",
    ]);
    expected.sort();
    assert_eq!(ours(world.pool(), "invoice_reminder").await, expected);
    assert!(world.sink.count() > 0, "the demo ran in our schema");
}

#[tokio::test]
async fn an_install_from_before_the_schema_is_moved_into_it_with_its_reminders() {
    let db = TestDb::create_empty().await;
    // What the previous version's `migrate` left: migrations 1-4 in public.
    let previous =
        sqlx::migrate::Migrator::with_migrations(db::MIGRATOR.iter().take(4).cloned().collect());
    previous.run(&db.pool).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO public.customers (name, email) VALUES ('Old', 'old@example.test');
         INSERT INTO public.invoices (customer_id, number, amount_cents, currency, due_date)
              VALUES (1, 'OLD-1', 100, 'EUR', current_date - 10);
         INSERT INTO public.reminders (invoice_id, period, status, message_id)
              VALUES (1, 'overdue', 'sent', 'invoice-1.overdue@example.test');",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let world = World::on(db).await;

    let migrated = cli(&world, &["migrate"]).await;
    let ticked = cli(&world, &["run-once"]).await;

    assert!(migrated.status.success(), "{}", stderr(&migrated));
    assert!(ticked.status.success(), "{}", stderr(&ticked));
    assert_eq!(public_objects(world.pool()).await, Vec::<String>::new());
    let kept: (String, String) =
        sqlx::query_as("SELECT invoice_id, status FROM invoice_reminder.reminders")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(kept, ("1".to_owned(), "sent".to_owned()));
    assert_eq!(
        world.sink.count(),
        0,
        "the step already sent is not sent again"
    );
    let versions: i64 =
        sqlx::query_scalar("SELECT count(*) FROM invoice_reminder._sqlx_migrations")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(versions, db::MIGRATOR.iter().count() as i64);
}
