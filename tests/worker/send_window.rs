//! The send window (`[send_window]`, docs/send-window.md): nothing is
//! claimed while it is closed, by its days or its hours on the zone's wall
//! clock (daylight-saving changes included); the first tick after it opens
//! sends each reminder once; a window that closes while letters wait for
//! the relay sends none after it and uses no attempt; a holiday of the
//! window's calendar closes the whole day; `explain` says when it opens.

use std::time::Duration;

use invoice_reminder::tick::{TickOutcome, run_tick};
use tokio_util::sync::CancellationToken;

use crate::common::relay::{Relay, RelayOptions};
use crate::common::{self, World, cli, clock_at, stdout};

/// `count` customers, each with one invoice due 1 January 2027 (in its
/// `overdue` step from 4 January to 21 January).
async fn invoices(world: &World, count: i64) -> Vec<i64> {
    invoices_due(world, count, "2027-01-01").await
}

/// `count` customers, each with one invoice due on `due`.
async fn invoices_due(world: &World, count: i64, due: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "WITH c AS (
             INSERT INTO customers (name, email)
             SELECT 'Customer ' || g, 'window' || g || '@example.test'
               FROM generate_series(1, $1::bigint) g
             RETURNING id)
         INSERT INTO invoices (customer_id, number, amount_cents, currency, due_date)
         SELECT id, 'INV-' || id, 12345, 'EUR', $2::date FROM c RETURNING id",
    )
    .bind(count)
    .bind(due)
    .fetch_all(world.pool())
    .await
    .unwrap()
}

/// Weekdays 09:00-17:00 in Berlin.
fn office_hours(world: &mut World) {
    world
        .set("send_window.days", "Mon-Fri")
        .set("send_window.hours", "09:00-17:00")
        .set("send_window.timezone", "Europe/Berlin");
}

async fn tick(world: &World) -> TickOutcome {
    let ctx = world.context().await;
    run_tick(&ctx, &CancellationToken::new()).await.unwrap()
}

async fn reminder_rows(world: &World) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM reminders")
        .fetch_one(world.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn ticks_every_fifteen_minutes_across_an_opening_send_each_reminder_once_in_its_first_open_window()
 {
    let mut world = World::new().await;
    office_hours(&mut world);
    let ids = invoices(&world, 5).await;

    // Saturday noon and Sunday evening in Berlin: closed by the day.
    for instant in ["2027-01-09T11:00:00Z", "2027-01-10T20:00:00Z"] {
        clock_at(&world, instant).await;
        let outcome = tick(&world).await;
        assert!(
            matches!(outcome, TickOutcome::OutsideWindow { .. }),
            "{instant}: {outcome:?}"
        );
    }
    // Monday from 07:00 to 10:45 Berlin time (06:00-09:45 UTC), every 15
    // minutes: the 09:00 tick is the first inside, the later ones find
    // nothing owed.
    let mut sent_at = Vec::new();
    for quarter in 0..16 {
        let minutes = 6 * 60 + quarter * 15;
        let instant = format!("2027-01-11T{:02}:{:02}:00Z", minutes / 60, minutes % 60);
        clock_at(&world, &instant).await;
        let before = world.sink.count();
        let outcome = tick(&world).await;
        if minutes < 8 * 60 {
            assert!(
                matches!(outcome, TickOutcome::OutsideWindow { .. }),
                "{instant}: {outcome:?}"
            );
            assert_eq!(reminder_rows(&world).await, 0, "claimed at {instant}");
        }
        if world.sink.count() > before {
            sent_at.push(instant);
        }
    }

    assert_eq!(sent_at, ["2027-01-11T08:00:00Z"]);
    let mut mailed = world.sink.invoice_ids();
    mailed.sort_unstable();
    assert_eq!(mailed, ids);
    common::assert_no_duplicate_mail(&world.sink);
}

#[tokio::test]
async fn the_end_of_the_hours_is_outside_the_window_and_the_start_inside() {
    let mut world = World::new().await;
    office_hours(&mut world);
    invoices(&world, 2).await;

    // Monday 17:00:00 in Berlin is 16:00 UTC: closed.
    clock_at(&world, "2027-01-11T16:00:00Z").await;
    assert!(matches!(
        tick(&world).await,
        TickOutcome::OutsideWindow { .. }
    ));
    // 08:59:59 on Tuesday: still closed; 09:00:00: open.
    clock_at(&world, "2027-01-12T07:59:59Z").await;
    assert!(matches!(
        tick(&world).await,
        TickOutcome::OutsideWindow { .. }
    ));
    assert_eq!(world.sink.count(), 0);
    clock_at(&world, "2027-01-12T08:00:00Z").await;
    assert!(matches!(tick(&world).await, TickOutcome::Done(_)));
    assert_eq!(world.sink.count(), 2);
}

#[tokio::test]
async fn nine_oclock_is_nine_local_on_both_sides_of_a_daylight_saving_change() {
    let mut world = World::new().await;
    world
        .set("send_window.hours", "09:00-17:00")
        .set("send_window.timezone", "Europe/Berlin")
        // The invoices are due 1 January; March is in their final notice's
        // repeats, so a step is owed on both days.
        .set("reminders.min_days_between", 0);
    invoices(&world, 1).await;

    // 07:30 UTC is 08:30 CET on Saturday 27 March 2027 (closed) and 09:30
    // CEST on Sunday 28 March, after the change (open).
    clock_at(&world, "2027-03-27T07:30:00Z").await;
    assert!(matches!(
        tick(&world).await,
        TickOutcome::OutsideWindow { .. }
    ));
    clock_at(&world, "2027-03-28T07:30:00Z").await;
    let outcome = tick(&world).await;
    assert!(matches!(outcome, TickOutcome::Done(_)), "{outcome:?}");
    assert_eq!(world.sink.count(), 1);
}

#[tokio::test]
async fn the_far_zones_are_mailed_by_their_own_wall_clock() {
    // Monday 11 January 2027, 20:00 UTC: 10:00 on Monday in Honolulu
    // (UTC-10) and 10:00 on Tuesday in Kiritimati (UTC+14); 04:00 UTC is
    // Sunday 18:00 in Honolulu and Monday 18:00 in Kiritimati.
    for zone in ["Pacific/Honolulu", "Pacific/Kiritimati"] {
        let mut world = World::new().await;
        world
            .set("send_window.days", "Mon-Fri")
            .set("send_window.hours", "09:00-17:00")
            .set("send_window.timezone", zone);
        invoices(&world, 1).await;
        clock_at(&world, "2027-01-11T04:00:00Z").await;
        assert!(
            matches!(tick(&world).await, TickOutcome::OutsideWindow { .. }),
            "{zone}"
        );
        clock_at(&world, "2027-01-11T20:00:00Z").await;
        assert!(matches!(tick(&world).await, TickOutcome::Done(_)), "{zone}");
        assert_eq!(world.sink.count(), 1, "{zone}");
    }
}

#[tokio::test]
async fn a_window_that_closes_while_letters_wait_for_the_relay_sends_none_after_it_and_uses_no_attempt()
 {
    // The relay greets only after three seconds; the window closes one
    // second after the tick's clock reading.
    let relay = Relay::start(RelayOptions {
        hold_greeting: Some(Duration::from_secs(3)),
        ..RelayOptions::default()
    })
    .await;
    let mut world = World::new().await;
    office_hours(&mut world);
    world.set("smtp.port", relay.port);
    invoices(&world, 20).await;
    clock_at(&world, "2027-01-11T15:59:59Z").await;

    let outcome = tick(&world).await;

    let TickOutcome::WindowClosed(summary) = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(summary.counts.sent, 0, "{summary:?}");
    assert!(summary.counts.handed_back > 0, "{summary:?}");
    assert_eq!(relay.messages(), 0);
    assert_eq!(
        reminder_rows(&world).await,
        0,
        "every claim went back unattempted"
    );
    let outcome: String =
        sqlx::query_scalar("SELECT outcome FROM job_runs ORDER BY id DESC LIMIT 1")
            .fetch_one(world.pool())
            .await
            .unwrap();
    assert_eq!(outcome, "window_closed");

    // Tuesday 09:00: each goes once.
    clock_at(&world, "2027-01-12T08:00:00Z").await;
    assert!(matches!(tick(&world).await, TickOutcome::Done(_)));
    assert_eq!(relay.messages(), 20);
}

#[tokio::test]
async fn explain_says_the_window_is_closed_why_and_when_it_opens_on_the_customers_clock() {
    let mut world = World::new().await;
    office_hours(&mut world);
    let id = invoices(&world, 1).await[0];
    clock_at(&world, "2027-01-09T11:00:00Z").await;

    let out = cli(&world, &["explain", "--invoice", &id.to_string(), "--json"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["reason"], "waiting_for_send_window");
    assert_eq!(json["window_closed_because"], "day");
    assert_eq!(json["window_opens"], "2027-01-11T09:00:00+01:00");
    assert_eq!(json["timezone"], "Europe/Berlin");
    assert_eq!(json["today"], "2027-01-09");
    assert_eq!(json["next_date"], "2027-01-11");

    let text = stdout(&cli(&world, &["explain", "--invoice", &id.to_string()]).await);
    assert!(
        text.contains(
            "waiting for the send window: opens Mon 2027-01-11 09:00 Europe/Berlin (weekend)"
        ),
        "{text}"
    );

    let plan = stdout(&cli(&world, &["run-once", "--dry-run"]).await);
    assert!(
        plan.contains("the send window is closed: nothing is claimed before it opens at 2027-01-11T09:00:00+01:00"),
        "{plan}"
    );

    // Monday 18:00 in Berlin: closed by the hours, opens Tuesday.
    clock_at(&world, "2027-01-11T17:00:00Z").await;
    let out = cli(&world, &["explain", "--invoice", &id.to_string(), "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["window_closed_because"], "hours");
    assert_eq!(json["window_opens"], "2027-01-12T09:00:00+01:00");

    // Inside the window it will go today, and nothing of the window shows.
    clock_at(&world, "2027-01-11T10:00:00Z").await;
    let out = cli(&world, &["explain", "--invoice", &id.to_string(), "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(json["reason"], "will_send_today");
    assert!(json["window_opens"].is_null(), "{json}");
}

#[tokio::test]
async fn bad_days_or_hours_stop_the_start_up_naming_the_key() {
    for (key, value) in [
        ("send_window.days", "Mon-Fry"),
        ("send_window.hours", "17:00-09:00"),
        ("send_window.timezone", "Europe/Atlantis"),
        ("send_window.calendar", "DE-XX"),
    ] {
        let mut world = World::new().await;
        world.set(key, value);
        let out = cli(&world, &["run-once"]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key}: {stderr}");
        assert!(stderr.contains(key), "{key}: {stderr}");
    }
}

#[tokio::test]
async fn a_holiday_of_the_calendar_closes_the_whole_day_and_another_states_does_not() {
    // Wednesday 6 January 2027, 10:00 in Berlin: Epiphany in Bavaria, a
    // working day in Berlin.
    for (calendar, mailed) in [("DE-BY", 0), ("DE-BE", 1)] {
        let mut world = World::new().await;
        office_hours(&mut world);
        world.set("send_window.calendar", calendar);
        let id = invoices(&world, 1).await[0];
        clock_at(&world, "2027-01-06T09:00:00Z").await;

        let outcome = tick(&world).await;

        assert_eq!(world.sink.count(), mailed, "{calendar}: {outcome:?}");
        if mailed == 0 {
            assert!(matches!(outcome, TickOutcome::OutsideWindow { .. }));
            let out = cli(&world, &["explain", "--invoice", &id.to_string(), "--json"]).await;
            let json: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
            assert_eq!(json["reason"], "waiting_for_send_window");
            assert_eq!(json["window_closed_because"], "holiday");
            assert_eq!(json["window_opens"], "2027-01-07T09:00:00+01:00");
        }
    }
}

#[tokio::test]
async fn easter_closes_good_friday_and_easter_monday_and_the_window_opens_on_tuesday() {
    let mut world = World::new().await;
    office_hours(&mut world);
    world.set("send_window.calendar", "DE");
    let id = invoices(&world, 1).await[0];
    // Easter Monday, 29 March 2027, 10:00 CEST.
    clock_at(&world, "2027-03-29T08:00:00Z").await;

    assert!(matches!(
        tick(&world).await,
        TickOutcome::OutsideWindow { .. }
    ));

    let text = stdout(&cli(&world, &["explain", "--invoice", &id.to_string()]).await);
    assert!(
        text.contains("opens Tue 2027-03-30 09:00 Europe/Berlin (a holiday in DE)"),
        "{text}"
    );
    clock_at(&world, "2027-03-30T07:00:00Z").await;
    assert!(matches!(tick(&world).await, TickOutcome::Done(_)));
    assert_eq!(world.sink.count(), 1);
}

#[tokio::test]
async fn business_day_stages_count_open_days_over_easter_and_the_weekend() {
    let mut world = World::new().await;
    world
        .set("send_window.days", "Mon-Fri")
        .set("send_window.timezone", "Europe/Berlin")
        .set("send_window.calendar", "DE")
        .set(
            "reminders.stages",
            "[{name=overdue,days=1,template=overdue,business_days=true},\
              {name=final,days=3,template=final,business_days=true}]",
        );
    // Due Thursday 25 March 2027: Good Friday and Easter Monday are closed,
    // so 1 business day is Tuesday 30 March and 3 is Thursday 1 April.
    invoices_due(&world, 1, "2027-03-25").await;
    let mut mailed = Vec::new();
    for day in [
        "03-26", "03-27", "03-28", "03-29", "03-30", "03-31", "04-01", "04-02",
    ] {
        clock_at(&world, &format!("2027-{day}T10:00:00Z")).await;
        let before = world.sink.count();
        tick(&world).await;
        for m in world.sink.received().iter().skip(before) {
            mailed.push((day, m.period().unwrap_or_default()));
        }
    }
    assert_eq!(
        mailed,
        [
            ("03-30", "overdue".to_owned()),
            ("04-01", "final".to_owned())
        ]
    );
}
