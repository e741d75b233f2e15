//! Holiday calendars of one's own (`send_window.calendars_dir`,
//! docs/send-window.md): an `.ics` file is a calendar named by its file,
//! one named like a built-in calendar adds its days to it, and a folder or
//! file that cannot be read stops the start-up naming the key, the file
//! and its line.

use std::path::PathBuf;

use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::{World, cli, clock_at, stdout};

/// A folder of its own holding `files` (name, content).
fn calendars_dir(files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("calendars-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

/// The company's closing days: every 15 March, and 2 to 6 August 2027.
const CLOSING_DAYS: &str = "BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//Example Ltd//Closing days//EN\r
BEGIN:VEVENT\r
UID:founders-day@example.com\r
SUMMARY:Founders' day\r
DTSTART;VALUE=DATE:20270315\r
RRULE:FREQ=YEARLY\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:summer-2027@example.com\r
SUMMARY:Summer closing\r
DTSTART;VALUE=DATE:20270802\r
DTEND;VALUE=DATE:20270807\r
END:VEVENT\r
END:VCALENDAR\r
";

/// One customer with one invoice due 1 March 2027 (owing `overdue` from 4
/// March to 21 March).
async fn invoice(world: &World) -> i64 {
    sqlx::query_scalar(
        "WITH c AS (
             INSERT INTO customers (name, email)
             VALUES ('Customer', 'calendar@example.test') RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT id, 'INV-' || id, 12345, 'EUR', '2027-03-01' FROM c RETURNING id",
    )
    .fetch_one(world.pool())
    .await
    .unwrap()
}

fn weekdays_in_munich(world: &mut World, calendar: &str, dir: &std::path::Path) {
    world
        .set("send_window.days", "Mon-Fri")
        .set("send_window.hours", "09:00-17:00")
        .set("send_window.timezone", "Europe/Berlin")
        .set("send_window.calendar", calendar)
        .set("send_window.calendars_dir", dir.display());
}

async fn tick(world: &World) -> TickOutcome {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap()
}

#[tokio::test]
async fn a_file_named_like_a_built_in_calendar_adds_its_days_and_keeps_the_built_in_ones() {
    let dir = calendars_dir(&[("DE-BY.ics", CLOSING_DAYS)]);
    // Monday 15 March 2027, 10:00 in Munich: the file's founders' day.
    let mut world = World::new().await;
    weekdays_in_munich(&mut world, "DE-BY", &dir);
    let id = invoice(&world).await;
    clock_at(&world, "2027-03-15T09:00:00Z").await;

    let outcome = tick(&world).await;

    assert!(
        matches!(outcome, TickOutcome::OutsideWindow { .. }),
        "{outcome:?}"
    );
    assert_eq!(world.sink.count(), 0);
    let out = cli(&world, &["explain", "--invoice", &id.to_string(), "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["window_closed_because"], "holiday");
    assert_eq!(json["window_opens"], "2027-03-16T09:00:00+01:00");
    // The built-in days stay: Epiphany (Wednesday 6 January 2027) is
    // closed in Bavaria with the file as without it.
    let ctx = world.context().await;
    let window = ctx.settings.send_window();
    assert!(window.open.closed_because(ymd(2027, 1, 6)).is_some());
    assert!(window.open.closed_because(ymd(2027, 8, 4)).is_some());
    assert!(window.open.closed_because(ymd(2027, 8, 9)).is_none());

    clock_at(&world, "2027-03-16T08:00:00Z").await;
    assert!(matches!(tick(&world).await, TickOutcome::Done(_)));
    assert_eq!(world.sink.count(), 1);
}

#[tokio::test]
async fn a_file_of_its_own_name_is_a_calendar_the_window_can_name() {
    let dir = calendars_dir(&[
        ("acme-closures.ics", CLOSING_DAYS),
        ("README.txt", "not a calendar"),
    ]);
    let mut world = World::new().await;
    weekdays_in_munich(&mut world, "acme-closures", &dir);
    invoice(&world).await;
    // Monday 15 March 2027 is closed by the file; Epiphany is not a
    // holiday of this calendar, which has no built-in days.
    clock_at(&world, "2027-03-15T09:00:00Z").await;
    assert!(matches!(
        tick(&world).await,
        TickOutcome::OutsideWindow { .. }
    ));
    let ctx = world.context().await;
    assert!(
        ctx.settings
            .send_window()
            .open
            .closed_because(ymd(2027, 1, 6))
            .is_none()
    );
}

#[tokio::test]
async fn a_bad_calendar_file_or_folder_stops_the_start_up_naming_the_key_the_file_and_the_line() {
    let timed = CLOSING_DAYS.replace("DTSTART;VALUE=DATE:20270315", "DTSTART:20270315T090000Z");
    let dir = calendars_dir(&[("DE-BY.ics", &timed)]);
    let mut world = World::new().await;
    weekdays_in_munich(&mut world, "DE-BY", &dir);
    let out = cli(&world, &["run-once"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("send_window.calendars_dir"), "{stderr}");
    assert!(stderr.contains("DE-BY.ics"), "{stderr}");
    assert!(stderr.contains("line 7"), "{stderr}");

    let file = dir.join("DE-BY.ics");
    for (key, value) in [
        ("send_window.calendars_dir", file.display().to_string()),
        ("send_window.calendar", "acme-closures".to_owned()),
    ] {
        let mut world = World::new().await;
        world.set(key, value.clone());
        let out = cli(&world, &["run-once"]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key}={value}: {stderr}");
        assert!(stderr.contains(key), "{key}={value}: {stderr}");
    }
}

fn ymd(y: i32, m: u32, d: u32) -> chrono::NaiveDate {
    chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap()
}

#[tokio::test]
async fn a_customers_own_calendar_can_be_a_file_and_closes_only_that_customers_day() {
    let dir = calendars_dir(&[("acme-closures.ics", CLOSING_DAYS)]);
    let mut world = World::new().await;
    weekdays_in_munich(&mut world, "", &dir);
    let customers: Vec<i64> = sqlx::query_scalar(
        "WITH c AS (
             INSERT INTO customers (name, email, holiday_calendar)
             VALUES ('Acme', 'acme@example.test', 'acme-closures'),
                    ('Other', 'other@example.test', NULL) RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT id, 'INV-' || id, 12345, 'EUR', '2027-03-01' FROM c RETURNING customer_id",
    )
    .fetch_all(world.pool())
    .await
    .unwrap();
    assert_eq!(customers.len(), 2);
    let mailed = |world: &World| {
        world
            .sink
            .received()
            .into_iter()
            .flat_map(|m| m.to)
            .collect::<Vec<_>>()
    };

    // Monday 15 March 2027, 10:00 in Munich: Acme's founders' day.
    clock_at(&world, "2027-03-15T09:00:00Z").await;
    assert!(matches!(tick(&world).await, TickOutcome::Done(_)));
    assert_eq!(mailed(&world), ["other@example.test"]);

    // Tuesday: Acme's day is open again; Other is not mailed twice.
    clock_at(&world, "2027-03-16T08:00:00Z").await;
    assert!(matches!(tick(&world).await, TickOutcome::Done(_)));
    assert_eq!(mailed(&world), ["other@example.test", "acme@example.test"]);
}
