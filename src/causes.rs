//! How an error reaches the operator: its causes, outermost first, each
//! printed once, joined by `": "`.
//!
//! Two things made a database error unreadable: a layer whose message
//! repeats its source's text (sqlx's `error returned from database: X`
//! with `X` as its source; a `thiserror` variant that writes `{0}` and
//! also names it as its source), and PostgreSQL's internal source line
//! (`... does not exist at line 948`, a line of PostgreSQL's C code, not of
//! anything the user wrote). Here a database error is shown as
//! PostgreSQL's message alone, and a layer's text that repeats the cause
//! below it is cut, so each cause appears once.

use std::error::Error;
use std::fmt;

/// `error` and its causes, for a log line or stderr.
pub struct Causes<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Causes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&shown(self.0))
    }
}

/// An anyhow error with its causes (what `{e:#}` printed, each cause once).
pub fn of_anyhow(e: &anyhow::Error) -> String {
    shown(e.as_ref())
}

/// `error` and its causes, outermost first, each cause once.
pub fn shown(error: &(dyn Error + 'static)) -> String {
    // (the text a layer prints by itself, the text to show for it)
    let mut layers: Vec<(String, String)> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let raw = e.to_string();
        match e.downcast_ref::<sqlx::Error>() {
            // Its source is the same database error again: stop here.
            Some(sqlx::Error::Database(db)) => {
                layers.push((raw, db.message().to_owned()));
                next = None;
            }
            _ => {
                let own = without_source_line(&raw);
                layers.push((raw, own));
                next = e.source();
            }
        }
    }
    let mut parts: Vec<String> = Vec::with_capacity(layers.len());
    for (i, (_, own)) in layers.iter().enumerate() {
        let mut text = own.clone();
        // Cut what the causes below already say.
        for (raw, below) in layers.iter().skip(i + 1) {
            for repeated in [raw.as_str(), below.as_str()] {
                text = cut(&text, repeated);
            }
        }
        if !text.is_empty() {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// `text` without `repeated` and the separator that joined it (`": "`, or
/// the parentheses around it).
fn cut(text: &str, repeated: &str) -> String {
    if repeated.is_empty() || !text.contains(repeated) {
        return text.to_owned();
    }
    let mut out = text.to_owned();
    for form in [
        format!(" ({repeated})"),
        format!(": {repeated}"),
        repeated.to_owned(),
    ] {
        if out.contains(&form) {
            out = out.replacen(&form, "", 1);
            break;
        }
    }
    out.trim().trim_end_matches(':').trim_end().to_owned()
}

/// `... at line 948` (PostgreSQL's source line, as sqlx prints it) removed.
fn without_source_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" at line ") {
        let after = &rest[at + " at line ".len()..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            out.push_str(&rest[..at + " at line ".len()]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("failed to set up the lock backend: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn a_layer_that_repeats_its_source_is_shown_once() {
        let io = std::io::Error::other("connection refused");
        let e = anyhow::Error::new(Repeats(io)).context("failed to start");
        assert_eq!(
            of_anyhow(&e),
            "failed to start: failed to set up the lock backend: connection refused"
        );
    }

    #[test]
    fn postgres_source_lines_are_left_out() {
        assert_eq!(
            without_source_line("database \"x\" does not exist at line 948"),
            "database \"x\" does not exist"
        );
        assert_eq!(without_source_line("at line one"), "at line one");
    }
}
