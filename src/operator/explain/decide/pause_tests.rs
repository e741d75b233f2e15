//! Pauses in `explain`'s decision: a pause that ends today, and a console
//! pause that holds an unpaid invoice back while "paid" speaks first.

use super::tests::{
    days_ago, days_ahead, decided, facts, late_payment, next, noon, source, stages, today,
};
use super::*;

#[test]
fn paused_until_today_still_pauses_and_the_next_reminder_is_tomorrow() {
    let mut s = source(10);
    s.paused_until = Some(today());
    s.flags_owe = false;
    let e = decided(vec![s], vec![]);
    assert_eq!(e.reason, Reason::Paused);
    assert_eq!(e.until, Some(Until::Date(today())));
    assert_eq!(next(&e), Some(("overdue", days_ahead(1))));
}

#[test]
fn a_console_pause_holds_an_unpaid_invoice_back_with_no_next_date_and_paid_speaks_first() {
    let decided_paused = |source: SourceFacts| {
        let stages = stages();
        let pause = crate::db::pauses::ConsolePause {
            invoice_id: None,
            customer_id: Some("C-1".into()),
            reason: "disputed".into(),
            paused_by: "olga".into(),
            paused_at: noon(days_ago(1)),
        };
        decide(
            Facts {
                sources: vec![source],
                console_pause: Some(pause),
                ..facts(vec![], vec![])
            },
            Rules {
                stages: &stages,
                min_days_between: 2,
                max_attempts: 5,
                late_payment: &late_payment(),
            },
        )
    };
    let mut held = source(10);
    held.flags_owe = false;
    let e = decided_paused(held.clone());
    assert_eq!(e.reason, Reason::PausedInConsole);
    assert!(
        e.reason_detail
            .contains("its customer C-1 was paused in the console by olga")
    );
    assert_eq!(next(&e), None);
    held.is_paid = Some(true);
    assert_eq!(decided_paused(held).reason, Reason::Paid);
}
