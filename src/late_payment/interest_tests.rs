//! Claims against figures worked out by hand (docs/late-payment.md shows
//! the first one's working).

use chrono::NaiveDate;

use super::*;
use crate::domain::{Currency, Money};
use crate::late_payment::rates::SHIPPED;
use crate::late_payment::{CustomTerms, Law, Regime};

fn day(y: i32, m: u32, d: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, d).unwrap_or_default()
}

fn money(minor: i64, code: &str) -> Money {
    Money::from_minor(
        minor,
        Currency::parse(code).unwrap_or_else(|e| panic!("{e}")),
    )
}

fn claim(regime: Regime, amount: Money, due: NaiveDate, send: NaiveDate) -> Claim {
    let rates = Rates::parse(SHIPPED, "rates.toml").unwrap_or_else(|e| panic!("{e}"));
    let law = Law::of(regime, &CustomTerms::default()).unwrap_or_else(|| panic!("no law"));
    price(&law, &rates, &amount, due, send).unwrap_or_else(|e| panic!("{e}"))
}

/// (days, rate, interest) of each period.
fn working(c: &Claim) -> Vec<(i64, String, i64)> {
    c.periods
        .iter()
        .map(|p| (p.days, p.rate_percent.to_string(), p.interest_minor))
        .collect()
}

#[test]
fn euro_interest_across_1_july_is_two_periods_rounded_once() {
    // 1,000.00 EUR due 20 June 2025, sent 10 July 2025:
    // 10 days at 3.15 + 8 = 11.15 %: 1000 x 0.1115 x 10 / 365 = 3.054794...
    // 10 days at 2.15 + 8 = 10.15 %: 1000 x 0.1015 x 10 / 365 = 2.780821...
    // 5.835616... -> 5.84 EUR; rounded per period it would be 3.05 + 2.78 = 5.83.
    let c = claim(
        Regime::Eu,
        money(100_000, "EUR"),
        day(2025, 6, 20),
        day(2025, 7, 10),
    );
    assert_eq!(
        working(&c),
        vec![(10, "11.15".into(), 305), (10, "10.15".into(), 278)]
    );
    assert_eq!(c.periods[0].from, day(2025, 6, 21));
    assert_eq!(c.periods[1].to, day(2025, 7, 10));
    assert_eq!((c.days, c.interest_minor), (20, 584));
    assert_eq!((c.compensation_minor, c.total_minor), (4_000, 4_584));
    assert_eq!(c.now_due_minor(&money(100_000, "EUR")), 104_584);
}

#[test]
fn german_business_and_consumer_claims_differ_in_points_and_the_flat_sum() {
    // 500.00 EUR, 30 days in the second half of 2025 (base rate 1.27 %).
    let (due, send) = (day(2025, 8, 31), day(2025, 9, 30));
    // 500 x 0.1027 x 30 / 365 = 4.220547... -> 4.22, and 40 EUR.
    let b2b = claim(Regime::DeB2b, money(50_000, "EUR"), due, send);
    assert_eq!((b2b.interest_minor, b2b.compensation_minor), (422, 4_000));
    // 500 x 0.0627 x 30 / 365 = 2.576712... -> 2.58, and nothing.
    let b2c = claim(Regime::DeB2c, money(50_000, "EUR"), due, send);
    assert_eq!((b2c.interest_minor, b2c.compensation_minor), (258, 0));
    assert_eq!(working(&b2c), vec![(30, "6.27".into(), 258)]);
}

#[test]
fn french_interest_is_the_ecb_rate_plus_ten_points() {
    // 1,000.00 EUR x 12.15 % x 30 / 365 = 9.986301... -> 9.99, and 40 EUR.
    let c = claim(
        Regime::Fr,
        money(100_000, "EUR"),
        day(2025, 9, 30),
        day(2025, 10, 30),
    );
    assert_eq!((c.interest_minor, c.compensation_minor), (999, 4_000));
}

#[test]
fn uk_compensation_steps_at_one_thousand_and_ten_thousand_pounds() {
    let (due, send) = (day(2025, 9, 30), day(2025, 10, 30));
    let comp = |minor| claim(Regime::Uk, money(minor, "GBP"), due, send).compensation_minor;
    assert_eq!(comp(99_999), 4_000);
    assert_eq!(comp(100_000), 7_000);
    assert_eq!(comp(999_999), 7_000);
    assert_eq!(comp(1_000_000), 10_000);
    // 1,000.00 GBP x (4.25 + 8) % x 30 / 365 = 10.068493... -> 10.07.
    assert_eq!(
        claim(Regime::Uk, money(100_000, "GBP"), due, send).interest_minor,
        1_007
    );
}

#[test]
fn an_invoice_in_another_currency_gets_interest_and_no_compensation() {
    let c = claim(
        Regime::Eu,
        money(100_000, "USD"),
        day(2025, 9, 30),
        day(2025, 10, 30),
    );
    // 1,000.00 USD x 10.15 % x 30 / 365 = 8.342465... -> 8.34.
    assert_eq!(
        (c.interest_minor, c.compensation_minor, c.total_minor),
        (834, 0, 834)
    );
}

#[test]
fn exactly_half_a_minor_unit_rounds_away_from_zero() {
    // 456.25 EUR x 10.15 % x 184 / 365 = 23.345 EUR exactly -> 23.35.
    let c = claim(
        Regime::Eu,
        money(45_625, "EUR"),
        day(2025, 6, 30),
        day(2025, 12, 31),
    );
    assert_eq!(working(&c), vec![(184, "10.15".into(), 2_335)]);
    assert_eq!(c.interest_minor, 2_335);
}

#[test]
fn compensation_is_claimed_once_whatever_the_number_of_reminders() {
    let amount = || money(100_000, "EUR");
    let due = day(2025, 7, 31);
    let claims: Vec<Claim> = [day(2025, 8, 21), day(2025, 9, 4), day(2025, 9, 18)]
        .into_iter()
        .map(|send| claim(Regime::Eu, amount(), due, send))
        .collect();
    for c in &claims {
        assert_eq!(c.compensation_minor, 4_000);
        assert_eq!(c.total_minor, c.interest_minor + 4_000);
    }
    // Interest grows with the days; the flat sum does not.
    assert!(claims[0].interest_minor < claims[2].interest_minor);
}

#[test]
fn a_send_date_past_the_rates_is_out_of_date_and_no_lateness_claims_nothing() {
    let rates = Rates::parse(SHIPPED, "rates.toml").unwrap_or_default();
    let law = Law::of(Regime::Uk, &CustomTerms::default()).unwrap_or_else(|| panic!("no law"));
    let amount = money(100_000, "GBP");
    assert_eq!(
        price(&law, &rates, &amount, day(2025, 12, 1), day(2026, 1, 5)),
        Err(PriceError::RatesOutOfDate {
            series: "boe".into(),
            half: HalfYear::of(day(2026, 1, 1)),
        })
    );
    assert!(missing_today(&law, &rates, day(2026, 1, 5)).is_some());
    assert!(missing_today(&law, &rates, day(2025, 12, 31)).is_none());
    let on_time = price(&law, &rates, &amount, day(2025, 12, 1), day(2025, 12, 1));
    assert!(on_time.is_ok_and(|c| c.total_minor == 0 && c.periods.is_empty()));
}

#[test]
fn regimes_are_read_by_name_and_none_has_no_law() {
    assert_eq!(" DE-B2B ".parse::<Regime>(), Ok(Regime::DeB2b));
    assert!("de".parse::<Regime>().is_err());
    assert!(Law::of(Regime::None, &CustomTerms::default()).is_none());
}
