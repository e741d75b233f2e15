//! The customer's own day (docs/send-window.md, "The customer's zone and
//! calendar"): the source's optional `timezone` and `holiday_calendar`
//! decide, per row, which step is owed (the customer's local date at the
//! database clock), when their send window is open (their wall clock, their
//! holidays) and how business-day stages count; a zone no one knows is
//! `bad_timezone` (skipped), a calendar no one knows `unknown_calendar`
//! (sent by the window's days and hours alone).

use std::time::Duration;

use chrono::{DateTime, Datelike, Timelike, Utc, Weekday};
use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::relay::{Relay, RelayOptions};
use crate::common::{World, assert_no_duplicate_mail, cli, clock_at, stdout};

/// One customer in `zone` (and `calendar`), with one invoice due on `due`.
async fn customer(
    world: &World,
    name: &str,
    zone: Option<&str>,
    calendar: Option<&str>,
    due: &str,
) -> i64 {
    sqlx::query_scalar(
        "WITH c AS (
             INSERT INTO customers (name, email, timezone, holiday_calendar)
             VALUES ($1, lower($1) || '@example.test', $2, $3) RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT id, 'INV-' || id, 12345, 'EUR', $4::date FROM c RETURNING id",
    )
    .bind(name)
    .bind(zone)
    .bind(calendar)
    .bind(due)
    .fetch_one(world.pool())
    .await
    .unwrap()
}

async fn tick(world: &World) -> TickOutcome {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap()
}

/// The steps claimed so far, as (invoice id, period), in claim order.
async fn claims(world: &World) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT invoice_id::bigint, period FROM reminders ORDER BY id")
        .fetch_all(world.pool())
        .await
        .unwrap()
}

/// The steps `audit --json` lists as owed and not yet claimed, as
/// (invoice id, step).
async fn missing(world: &World) -> Vec<(i64, String)> {
    let out = cli(world, &["audit", "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    json["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let id = m["invoice_id"].as_str().unwrap_or_default();
            (
                id.parse().unwrap_or_default(),
                m["step"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn office_hours(world: &mut World) {
    world
        .set("send_window.days", "Mon-Fri")
        .set("send_window.hours", "09:00-17:00")
        .set("send_window.timezone", "Europe/Berlin");
}

async fn explain(world: &World, id: i64) -> serde_json::Value {
    let out = cli(world, &["explain", "--invoice", &id.to_string(), "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[tokio::test]
async fn customers_from_utc_minus_10_to_utc_plus_14_are_mailed_only_inside_their_own_window() {
    let mut world = World::new().await;
    office_hours(&mut world);
    let zones = [
        Some("Pacific/Honolulu"),
        Some("America/New_York"),
        None, // the window's: Europe/Berlin
        Some("Asia/Kolkata"),
        Some("Asia/Tokyo"),
        Some("Pacific/Kiritimati"),
    ];
    let mut ids = Vec::new();
    for (i, zone) in zones.iter().enumerate() {
        ids.push((
            customer(&world, &format!("Zone{i}"), *zone, None, "2026-12-20").await,
            zone.unwrap_or("Europe/Berlin"),
        ));
    }
    // Every hour from Sunday 10 January 2027 00:30 UTC to Tuesday 12:30
    // UTC: each customer's first hour of Monday 09:00-17:00 on their own
    // clock is somewhere in it.
    let start: DateTime<Utc> = "2027-01-10T00:30:00Z".parse().unwrap();
    let mut mailed_at: Vec<(i64, DateTime<Utc>)> = Vec::new();
    for hour in 0..61 {
        let at = start + chrono::TimeDelta::hours(hour);
        clock_at(&world, &at.to_rfc3339()).await;
        let before = world.sink.count();
        tick(&world).await;
        for m in world.sink.received().iter().skip(before) {
            mailed_at.push((m.invoice_id().unwrap(), at));
        }
    }
    assert_no_duplicate_mail(&world.sink);
    for (id, zone) in &ids {
        let tz: chrono_tz::Tz = zone.parse().unwrap();
        let at: Vec<&DateTime<Utc>> = mailed_at
            .iter()
            .filter(|(i, _)| i == id)
            .map(|(_, t)| t)
            .collect();
        assert_eq!(at.len(), 1, "{zone}: {mailed_at:?}");
        let local = at[0].with_timezone(&tz);
        assert_eq!(local.weekday(), Weekday::Mon, "{zone}: {local}");
        // The first tick of its window: 09:30 local, or 09:00-09:59 for
        // zones off the whole hour.
        assert_eq!(local.hour(), 9, "{zone}: {local}");
    }
}

#[tokio::test]
async fn kiritimati_owes_a_step_a_day_before_honolulu_and_a_minute_before_local_midnight_is_not_yet_the_next_day()
 {
    let mut world = World::new().await;
    world.set("reminders.min_days_between", 0);
    // Due Sunday 10 January 2027: `upcoming` from the 7th, `overdue` from
    // the 13th, each on the customer's own date.
    let kiritimati = customer(
        &world,
        "Kiri",
        Some("Pacific/Kiritimati"),
        None,
        "2027-01-10",
    )
    .await;
    let honolulu = customer(&world, "Hono", Some("Pacific/Honolulu"), None, "2027-01-10").await;

    // 09:59 UTC on the 12th: 23:59 on the 12th in Kiritimati, 23:59 on the
    // 11th in Honolulu: both owe `upcoming`.
    clock_at(&world, "2027-01-12T09:59:00Z").await;
    tick(&world).await;
    // 10:00 UTC: the 13th has begun in Kiritimati (UTC+14) only; the
    // survey of what is owed (`audit`) says so before the tick does.
    clock_at(&world, "2027-01-12T10:00:00Z").await;
    assert_eq!(missing(&world).await, [(kiritimati, "overdue".to_owned())]);
    tick(&world).await;
    let after_kiritimati = claims(&world).await;
    // A day later it has begun in Honolulu (UTC-10).
    clock_at(&world, "2027-01-13T09:59:00Z").await;
    assert_eq!(missing(&world).await, []);
    tick(&world).await;
    let before_honolulu = claims(&world).await;
    clock_at(&world, "2027-01-13T10:00:00Z").await;
    tick(&world).await;

    let mut first = after_kiritimati[..2].to_vec();
    first.sort();
    let mut upcoming = vec![
        (kiritimati, "upcoming".to_owned()),
        (honolulu, "upcoming".to_owned()),
    ];
    upcoming.sort();
    assert_eq!(first, upcoming);
    assert_eq!(after_kiritimati[2..], [(kiritimati, "overdue".to_owned())]);
    assert_eq!(before_honolulu.len(), 3, "{before_honolulu:?}");
    assert_eq!(
        claims(&world).await[3..],
        [(honolulu, "overdue".to_owned())]
    );
}

#[tokio::test]
async fn a_customers_own_calendar_closes_their_holiday_and_explain_says_so_on_their_clock() {
    let mut world = World::new().await;
    office_hours(&mut world);
    // Wednesday 6 January 2027, 10:00 in Berlin: Epiphany in Bavaria, a
    // working day in Berlin; 23:00 on Tuesday in Honolulu.
    let bavaria = customer(&world, "Bavaria", None, Some("DE-BY"), "2026-12-20").await;
    let berlin = customer(&world, "Berlin", None, Some("de-be"), "2026-12-20").await;
    let honolulu = customer(
        &world,
        "Hawaii",
        Some("Pacific/Honolulu"),
        Some("US"),
        "2026-12-20",
    )
    .await;
    clock_at(&world, "2027-01-06T09:00:00Z").await;

    tick(&world).await;

    assert_eq!(world.sink.invoice_ids(), [berlin]);
    let json = explain(&world, bavaria).await;
    assert_eq!(json["reason"], "waiting_for_send_window");
    assert_eq!(json["window_closed_because"], "holiday");
    assert_eq!(json["window_opens"], "2027-01-07T09:00:00+01:00");
    let json = explain(&world, honolulu).await;
    assert_eq!(json["timezone"], "Pacific/Honolulu");
    assert_eq!(json["window_closed_because"], "hours");
    assert_eq!(json["window_opens"], "2027-01-06T09:00:00-10:00");
    assert_eq!(json["today"], "2027-01-05");

    // 09:00 on Wednesday in Honolulu is 19:00 UTC.
    clock_at(&world, "2027-01-06T19:00:00Z").await;
    tick(&world).await;
    let mut mailed = world.sink.invoice_ids();
    mailed.sort_unstable();
    assert_eq!(mailed, [berlin.min(honolulu), berlin.max(honolulu)]);
}

#[tokio::test]
async fn business_days_count_by_the_customers_own_calendar() {
    let mut world = World::new().await;
    world
        .set("send_window.days", "Mon-Fri")
        .set("send_window.timezone", "Europe/Berlin")
        .set(
            "reminders.stages",
            "[{name=overdue,days=1,template=overdue,business_days=true},\
              {name=final,days=3,template=final,business_days=true}]",
        );
    // Due Tuesday 5 January 2027: 1 business day is Wednesday 6, but in
    // Bavaria (Epiphany) Thursday 7.
    let bavaria = customer(&world, "Bavaria", None, Some("DE-BY"), "2027-01-05").await;
    let berlin = customer(&world, "Berlin", None, Some("DE-BE"), "2027-01-05").await;
    let mut mailed = Vec::new();
    for day in ["01-06", "01-07", "01-08", "01-11"] {
        clock_at(&world, &format!("2027-{day}T10:00:00Z")).await;
        let before = world.sink.count();
        tick(&world).await;
        for m in world.sink.received().iter().skip(before) {
            mailed.push((day, m.invoice_id().unwrap(), m.period().unwrap_or_default()));
        }
    }
    assert_eq!(
        mailed,
        [
            ("01-06", berlin, "overdue".to_owned()),
            ("01-07", bavaria, "overdue".to_owned()),
            ("01-08", berlin, "final".to_owned()),
            ("01-11", bavaria, "final".to_owned()),
        ]
    );
}

#[tokio::test]
async fn a_zone_no_one_knows_is_bad_timezone_and_skipped_and_a_calendar_no_one_knows_goes_by_days_and_hours()
 {
    let world = World::new().await;
    let mars = customer(&world, "Mars", Some("Mars/Olympus"), None, "2026-12-20").await;
    let nowhere = customer(&world, "Nowhere", None, Some("XX-NOPE"), "2026-12-20").await;
    let fine = customer(
        &world,
        "Fine",
        Some("Europe/Paris"),
        Some("FR"),
        "2026-12-20",
    )
    .await;
    clock_at(&world, "2027-01-05T10:00:00Z").await;

    let outcome = tick(&world).await;

    let summary = outcome.summary().cloned().unwrap();
    let mut mailed = world.sink.invoice_ids();
    mailed.sort_unstable();
    assert_eq!(mailed, [nowhere.min(fine), nowhere.max(fine)]);
    assert_eq!(summary.counts.source_problems, 2, "{summary:?}");

    let audit = cli(&world, &["audit", "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&stdout(&audit)).unwrap();
    let problems: Vec<(String, String)> = json["source_problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["problem"].as_str().unwrap_or_default().to_owned(),
                p["invoice_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        problems.contains(&("bad_timezone".into(), mars.to_string())),
        "{json}"
    );
    let check = stdout(&cli(&world, &["check-source"]).await);
    assert!(
        check.contains("bad_timezone") && check.contains(&mars.to_string()),
        "{check}"
    );
    // The calendar's row was mailed, so it owes nothing now; a fresh one
    // shows in the listing.
    let again = customer(&world, "Again", None, Some("XX-NOPE"), "2026-12-20").await;
    let check = stdout(&cli(&world, &["check-source"]).await);
    assert!(
        check.contains("unknown_calendar") && check.contains(&again.to_string()),
        "{check}"
    );
}

#[tokio::test]
async fn without_the_zone_columns_the_window_is_checked_once_for_the_whole_tick() {
    let relay = crate::common::relay::Relay::start(crate::common::relay::RelayOptions {
        hold_greeting: Some(std::time::Duration::from_secs(3)),
        ..Default::default()
    })
    .await;
    let mut world = World::new().await;
    office_hours(&mut world);
    sqlx::raw_sql(
        "CREATE VIEW no_zones AS SELECT invoice_id, invoice_number, customer_name, email, locale,
                amount_minor, currency, due_date, is_paid, paused, paused_until, payment_url,
                customer_id, late_payment_regime FROM reminder_source",
    )
    .execute(world.pool())
    .await
    .unwrap();
    world
        .set("source.relation", "no_zones")
        .set("smtp.port", relay.port);
    for i in 0..5 {
        customer(&world, &format!("Flat{i}"), None, None, "2026-12-20").await;
    }

    // Saturday in Berlin: the tick ends before it records a run.
    clock_at(&world, "2027-01-09T11:00:00Z").await;
    assert!(matches!(
        tick(&world).await,
        TickOutcome::OutsideWindow { .. }
    ));
    // A minute before Monday's close, with a relay that greets late: the
    // tick stops at the close and hands everything back.
    clock_at(&world, "2027-01-11T15:59:59Z").await;
    let outcome = tick(&world).await;
    assert!(
        matches!(outcome, TickOutcome::WindowClosed(_)),
        "{outcome:?}"
    );
    assert_eq!(relay.messages(), 0);
    assert!(claims(&world).await.is_empty());
}

#[tokio::test]
async fn two_customers_whose_windows_close_at_different_moments_in_one_tick_each_stop_at_their_own()
{
    // The relay greets only after three seconds; Berlin's 17:00 comes one
    // second after the tick's clock reading, London's an hour later.
    let relay = Relay::start(RelayOptions {
        hold_greeting: Some(Duration::from_secs(3)),
        ..RelayOptions::default()
    })
    .await;
    let mut world = World::new().await;
    office_hours(&mut world);
    world.set("smtp.port", relay.port);
    let berlin = customer(&world, "Berlin", Some("Europe/Berlin"), None, "2027-01-01").await;
    let london = customer(&world, "London", Some("Europe/London"), None, "2027-01-01").await;
    clock_at(&world, "2027-01-11T15:59:59Z").await;

    let outcome = tick(&world).await;

    let TickOutcome::WindowClosed(summary) = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(summary.counts.sent, 1, "{summary:?}");
    assert_eq!(summary.counts.handed_back, 1, "{summary:?}");
    assert_eq!(relay.messages(), 1);
    assert_eq!(
        claims(&world).await,
        vec![(london, "overdue".to_owned())],
        "Berlin's claim went back unattempted; London's window was still open"
    );

    // Tuesday 09:00 in Berlin: Berlin goes once, London not again.
    clock_at(&world, "2027-01-12T08:00:00Z").await;
    assert!(matches!(tick(&world).await, TickOutcome::Done(_)));
    assert_eq!(relay.messages(), 2);
    let mut claimed = claims(&world).await;
    claimed.sort();
    let mut expected = vec![
        (berlin, "overdue".to_owned()),
        (london, "overdue".to_owned()),
    ];
    expected.sort();
    assert_eq!(claimed, expected);
}
