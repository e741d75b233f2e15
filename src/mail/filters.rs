//! The filters templates may use besides minijinja's own: `money`
//! (an amount in minor units, formatted for the render's `locale` with the
//! currency's own number of decimals) and `date` (the locale's long date, or
//! a strftime pattern). Errors name the bad value; they fail the render, and
//! at start-up the template.

use chrono::NaiveDate;
use minijinja::value::Value;
use minijinja::{Environment, State};

use super::format::Formats;

pub(super) fn add_filters(env: &mut Environment<'static>, formats: Formats) {
    let money_formats = formats.clone();
    env.add_filter(
        "money",
        move |state: &State, amount: i64, currency: String| -> Result<String, minijinja::Error> {
            money_formats
                .money(amount, &currency, tag(&state.lookup("locale")))
                .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e))
        },
    );
    env.add_filter(
        "date",
        move |state: &State,
              value: String,
              pattern: Option<String>|
              -> Result<String, minijinja::Error> {
            let invalid =
                |e: String| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e);
            let date: NaiveDate = value
                .parse()
                .map_err(|_| invalid(format!("{value:?} is not a date (YYYY-MM-DD)")))?;
            match pattern {
                None => formats
                    .long_date(date, tag(&state.lookup("locale")))
                    .map_err(invalid),
                Some(pattern) => {
                    use std::fmt::Write as _;
                    let mut out = String::new();
                    write!(out, "{}", date.format(&pattern))
                        .map_err(|_| invalid(format!("{pattern:?} is not a strftime pattern")))?;
                    Ok(out)
                }
            }
        },
    );
}

/// The render context's `locale` variable as written ("" when it is
/// missing: the root locale).
fn tag(locale: &Option<Value>) -> &str {
    locale.as_ref().and_then(Value::as_str).unwrap_or_default()
}
