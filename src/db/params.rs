//! Statement parameters bound by name.
//!
//! A statement that composes shared conditions (`owing`) says `$today`,
//! `$gap_days` or `$keys` in its text, never `$1`: [`Statement`] numbers
//! the names in the order they first appear and [`Params`] binds each
//! value under its name, so a condition written once can go into any
//! statement, in any position, without a statement binding the shared
//! values in the wrong order. A name used in the text without a value is
//! an error of the call (never a value bound in its place).
//!
//! A name is `$` followed by a lowercase letter, then lowercase letters,
//! digits and `_`. Names are numbered in our own statement text, before
//! the configured names go in (`sql::Names`), so a quoted identifier that
//! holds a `$` is never read as one. A statement uses names only, never
//! `$1`-style placeholders beside them.

use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::{Arguments as _, Encode, Type};

/// A value that can be bound to a statement.
pub trait Param: Sync {
    fn add_to(&self, args: &mut PgArguments) -> Result<(), BoxDynError>;
}

impl<T> Param for T
where
    T: for<'q> Encode<'q, Postgres> + Type<Postgres> + Sync,
{
    fn add_to(&self, args: &mut PgArguments) -> Result<(), BoxDynError> {
        args.add(self)
    }
}

/// Named values for one call.
#[derive(Default)]
pub struct Params<'a> {
    named: Vec<(&'static str, &'a dyn Param)>,
}

impl<'a> Params<'a> {
    pub fn new() -> Self {
        Self::default()
    }

    /// `value` under `name` (without the `$`); a later value under the
    /// same name wins.
    pub fn with(mut self, name: &'static str, value: &'a dyn Param) -> Self {
        self.named.push((name, value));
        self
    }

    /// These values and `more`'s.
    pub fn and(mut self, more: Params<'a>) -> Self {
        self.named.extend(more.named);
        self
    }

    /// These values, and `value` under `name` unless they have one.
    pub fn or(&self, name: &'static str, value: &'a dyn Param) -> Params<'a> {
        let mut named = Vec::with_capacity(self.named.len().saturating_add(1));
        named.push((name, value));
        named.extend(self.named.iter().copied());
        Params { named }
    }

    fn get(&self, name: &str) -> Option<&'a dyn Param> {
        self.named
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }
}

/// A statement's text with its names made positional, and the order they
/// are bound in.
#[derive(Debug, Clone)]
pub struct Numbered {
    sql: String,
    order: Vec<String>,
}

impl Numbered {
    /// Numbers each `$name` of `text` by its first appearance.
    pub fn new(text: &str) -> Self {
        let mut sql = String::with_capacity(text.len());
        let mut order: Vec<String> = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            let (before, from) = rest.split_at(at);
            sql.push_str(before);
            let after = from.get(1..).unwrap_or_default();
            let len = name_len(after);
            if len == 0 {
                sql.push('$');
                rest = after;
                continue;
            }
            let (name, tail) = after.split_at(len);
            let position = match order.iter().position(|n| n == name) {
                Some(i) => i,
                None => {
                    order.push(name.to_owned());
                    order.len().saturating_sub(1)
                }
            };
            sql.push('$');
            sql.push_str(&position.saturating_add(1).to_string());
            rest = tail;
        }
        sql.push_str(rest);
        Self { sql, order }
    }

    /// The positional text (our schema and the source not yet put in).
    pub fn text(&self) -> &str {
        &self.sql
    }

    /// The arguments for one call, in the statement's order.
    pub fn bind(&self, params: &Params<'_>) -> Result<PgArguments, BoxDynError> {
        let mut args = PgArguments::default();
        for name in &self.order {
            let value = params
                .get(name)
                .ok_or_else(|| format!("statement parameter ${name} has no value"))?;
            value.add_to(&mut args)?;
        }
        Ok(args)
    }
}

/// The length of the name at the start of `s` (0: none).
fn name_len(s: &str) -> usize {
    let mut bytes = s.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_lowercase() => {}
        _ => return 0,
    }
    1usize.saturating_add(
        bytes
            .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_')
            .count(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_numbered_by_their_first_appearance_and_reused() {
        let s = Numbered::new("SELECT $b, $a::date, $b, $ x, '$' FROM t WHERE c = $a_2");
        assert_eq!(
            s.sql,
            "SELECT $1, $2::date, $1, $ x, '$' FROM t WHERE c = $3"
        );
        assert_eq!(s.order, ["b", "a", "a_2"]);
    }

    #[test]
    fn a_name_without_a_value_is_an_error_naming_it() {
        let s = Numbered::new("SELECT $today, $gap_days");
        let today = 1i64;
        let err = s
            .bind(&Params::new().with("today", &today))
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("statement parameter $gap_days has no value")
        );
        let gap = 2i32;
        assert!(
            s.bind(&Params::new().with("today", &today).with("gap_days", &gap))
                .is_ok()
        );
    }
}
