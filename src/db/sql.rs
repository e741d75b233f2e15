//! Statement text with the configured names put in.
//!
//! Statements name our tables `{ir}.reminders`, `{ir}.job_runs`, ... and
//! the invoice source `{src}` (aliased `s`); [`Names::sql`] replaces them
//! with the quoted `database.schema` and the quoted, schema-qualified
//! `source.relation`. Nothing goes through `search_path`, so statements
//! mean the same through a transaction pooler (which carries no session
//! settings) and in a database whose `public` schema has tables of the same
//! names. `{amount}` becomes the source's amount column, whichever of the
//! two the contract allows it has ([`AmountColumn`], learned by the
//! start-up check in `source`).

use std::sync::OnceLock;

use crate::config::{RelationName, Settings, SqlName};

/// Which amount column the source has (exactly one of the two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmountColumn {
    /// `amount_minor`: an integer in the currency's minor units.
    Minor,
    /// `amount`: a numeric in major units, converted by the worker.
    Major,
}

impl AmountColumn {
    /// Two columns every statement that reads amounts selects: the minor
    /// units, or the major amount as exact decimal text.
    fn select(self) -> &'static str {
        match self {
            Self::Minor => "s.amount_minor::bigint AS amount_minor, NULL::text AS amount_major",
            Self::Major => "NULL::bigint AS amount_minor, s.amount::text AS amount_major",
        }
    }

    /// The amount column of the row `s`, as it is (to test for NULL).
    fn value(self) -> &'static str {
        match self {
            Self::Minor => "s.amount_minor",
            Self::Major => "s.amount",
        }
    }
}

/// Our schema and the source relation, quoted once.
#[derive(Debug)]
pub struct Names {
    schema: SqlName,
    schema_sql: String,
    source: RelationName,
    source_sql: String,
    amount: OnceLock<AmountColumn>,
    /// Whether the source has the optional `late_payment_regime` column
    /// (set with the amount; the demo view has it).
    regime_column: OnceLock<bool>,
    /// Whether the source has the optional `timezone` and
    /// `holiday_calendar` columns (set with the amount).
    zone_column: OnceLock<bool>,
    calendar_column: OnceLock<bool>,
    /// Statements read the source's `customer_id` (customer mode);
    /// otherwise `{customer}` is NULL, and the source need not have the
    /// column.
    reads_customer: bool,
}

impl Names {
    pub fn new(schema: &SqlName, source: &RelationName) -> Self {
        Self {
            schema: schema.clone(),
            schema_sql: schema.quoted(),
            source: source.clone(),
            source_sql: source.qualified(schema),
            amount: OnceLock::new(),
            regime_column: OnceLock::new(),
            zone_column: OnceLock::new(),
            calendar_column: OnceLock::new(),
            reads_customer: false,
        }
    }

    /// The same names, with `{customer}` reading the source's
    /// `customer_id` (`on`) or NULL.
    pub fn reading_customer(mut self, on: bool) -> Self {
        self.reads_customer = on;
        self
    }

    /// Whether statements read the source's `customer_id`.
    pub fn reads_customer(&self) -> bool {
        self.reads_customer
    }

    pub fn from_settings(settings: &Settings) -> Self {
        Self::new(&settings.database.schema, &settings.source.relation)
            .reading_customer(settings.reminders.group_by.statements())
    }

    /// The defaults (`invoice_reminder`, `reminder_source`, `amount_minor`),
    /// for tools and tests that use the demo tables.
    pub fn defaults() -> Self {
        let names = Self::new(
            &SqlName::parse("invoice_reminder").unwrap_or_else(|_| unreachable!()),
            &RelationName::parse("reminder_source").unwrap_or_else(|_| unreachable!()),
        );
        names.set_amount(AmountColumn::Minor);
        names.set_regime_column(true);
        names.set_local_columns(true, true);
        names
    }

    pub fn schema(&self) -> &SqlName {
        &self.schema
    }

    pub fn source(&self) -> &RelationName {
        &self.source
    }

    /// `"schema"."relation"`, quoted.
    pub fn source_sql(&self) -> &str {
        &self.source_sql
    }

    /// Records what the start-up check found; later calls are ignored
    /// (the shape of a running source does not change under us).
    pub fn set_amount(&self, amount: AmountColumn) {
        let _ = self.amount.set(amount);
    }

    /// Records whether the source has `late_payment_regime`; later calls
    /// are ignored.
    pub fn set_regime_column(&self, present: bool) {
        let _ = self.regime_column.set(present);
    }

    /// Records whether the source has `timezone` and `holiday_calendar`;
    /// later calls are ignored.
    pub fn set_local_columns(&self, timezone: bool, calendar: bool) {
        let _ = self.zone_column.set(timezone);
        let _ = self.calendar_column.set(calendar);
    }

    /// Whether rows may name their own zone or calendar: then the send
    /// window is decided per row, never once for all.
    pub fn local_columns(&self) -> bool {
        self.has_zone() || self.has_calendar()
    }

    fn has_zone(&self) -> bool {
        self.zone_column.get().copied().unwrap_or(false)
    }

    fn has_calendar(&self) -> bool {
        self.calendar_column.get().copied().unwrap_or(false)
    }

    /// `template` with the conditions of a row's own day put in, before
    /// its parameters are numbered (their text holds named parameters):
    /// `{zone}` (the row's zone when both the database and the worker know
    /// it, `$zones`: `db::zones`, else `$tz`),
    /// `{today}` (the row's date at `$now` in that zone), `{zone_ok}` (the
    /// row names no zone, or one the database knows), `{calendar}` (the
    /// row's calendar, upper case, else `$calendar`), `{group}` (its
    /// calendar group, `$groups`) and `{open}` (its send window is open at
    /// `$now`). Without the source's `timezone` column every row is in
    /// `$tz` and its date is `$today`; without `holiday_calendar`, in
    /// `$calendar`.
    pub fn local<'t>(&self, template: &'t str) -> std::borrow::Cow<'t, str> {
        if !template.contains("{zone")
            && !template.contains("{today}")
            && !template.contains("{calendar}")
            && !template.contains("{group}")
            && !template.contains("{open}")
        {
            return std::borrow::Cow::Borrowed(template);
        }
        // A row whose own column is NULL is in the window's zone or
        // calendar: its parts are then the statement's parameters alone,
        // which PostgreSQL works out once per statement (folded into the
        // plan, or an InitPlan), not once per row and window.
        let zone_row = "COALESCE(CASE WHEN $zones::jsonb ? btrim(s.timezone::text) THEN btrim(s.timezone::text) END, $tz::text)";
        let today_in = |zone: &str| format!("(($now::timestamptz AT TIME ZONE {zone})::date)");
        let (zone, today, zone_ok) = if self.has_zone() {
            (
                format!("(CASE WHEN s.timezone IS NULL THEN $tz::text ELSE {zone_row} END)"),
                format!(
                    "(CASE WHEN s.timezone IS NULL THEN {} ELSE {} END)",
                    today_in("$tz::text"),
                    today_in(zone_row)
                ),
                "(NULLIF(btrim(s.timezone::text), '') IS NULL OR $zones::jsonb ? btrim(s.timezone::text))",
            )
        } else {
            ("$tz::text".to_owned(), "$today::date".to_owned(), "TRUE")
        };
        let calendar_row =
            "COALESCE(upper(NULLIF(btrim(s.holiday_calendar::text), '')), $calendar::text)";
        let group_of = |calendar: &str| format!("COALESCE($groups::jsonb ->> {calendar}, '')");
        let (calendar, group) = if self.has_calendar() {
            (
                format!(
                    "(CASE WHEN s.holiday_calendar IS NULL THEN $calendar::text ELSE {calendar_row} END)"
                ),
                format!(
                    "(CASE WHEN s.holiday_calendar IS NULL THEN {} ELSE {} END)",
                    group_of("$calendar::text"),
                    group_of(calendar_row)
                ),
            )
        } else {
            ("$calendar::text".to_owned(), group_of("$calendar::text"))
        };
        // The local clock read once (a subquery kept whole by `OFFSET 0`):
        // "ISO day, HHMM, date", the day, the minute of the day and the
        // date cut from it.
        let open_in = |zone: &str, calendar: &str| {
            let minute = "(substr(x.t, 2, 2)::int * 60 + substr(x.t, 4, 2)::int)";
            format!(
                "(SELECT substr(x.t, 1, 1)::int = ANY($open_days::int[]) \
                 AND {minute} >= $open_from::int AND {minute} < $open_to::int \
                 AND NOT ($closed::jsonb ? ({calendar} || ' ' || substr(x.t, 6))) \
                 FROM (SELECT to_char(($now::timestamptz AT TIME ZONE {zone}), \
                 'IDHH24MIYYYY-MM-DD') AS t OFFSET 0) x)"
            )
        };
        // Without either column every row is in the window's zone and
        // calendar, and the tick checks the window once for all
        // (`tick::clock`): nothing is asked per row.
        let open = match self.local_columns() {
            true => format!(
                "(CASE WHEN {} THEN {} ELSE {} END)",
                match (self.has_zone(), self.has_calendar()) {
                    (true, true) => "s.timezone IS NULL AND s.holiday_calendar IS NULL",
                    (true, false) => "s.timezone IS NULL",
                    _ => "s.holiday_calendar IS NULL",
                },
                open_in("$tz::text", "$calendar::text"),
                open_in(&zone, &calendar)
            ),
            false => "TRUE".to_owned(),
        };
        template
            .replace("{open}", &open)
            .replace("{today}", &today)
            .replace("{group}", &group)
            .replace("{zone_ok}", zone_ok)
            .replace("{zone}", &zone)
            .replace("{calendar}", &calendar)
            .into()
    }

    /// Whether the start-up check has run.
    pub fn source_checked(&self) -> bool {
        self.amount.get().is_some()
    }

    /// `template` with `{ir}`, `{src}`, `{amount}`, `{amount_value}`,
    /// `{customer}` and `{regime}`
    /// filled in, in one pass over the template: text put in is never read
    /// again, so a name can never expand another placeholder (and the
    /// settings refuse names with braces besides).
    pub fn sql(&self, template: &str) -> sqlx::AssertSqlSafe<String> {
        let amount = self.amount.get().copied().unwrap_or(AmountColumn::Minor);
        let mut out = String::with_capacity(template.len() + 64);
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open..];
            let (value, len) = match after {
                a if a.starts_with("{ir}") => (self.schema_sql.as_str(), "{ir}".len()),
                a if a.starts_with("{src}") => (self.source_sql.as_str(), "{src}".len()),
                a if a.starts_with("{amount}") => (amount.select(), "{amount}".len()),
                a if a.starts_with("{amount_value}") => (amount.value(), "{amount_value}".len()),
                a if a.starts_with("{regime}") => (
                    if self.regime_column.get().copied().unwrap_or(false) {
                        "NULLIF(btrim(s.late_payment_regime::text), '')"
                    } else {
                        "NULL::text"
                    },
                    "{regime}".len(),
                ),
                a if a.starts_with("{timezone}") => (
                    if self.has_zone() {
                        "NULLIF(btrim(s.timezone::text), '')"
                    } else {
                        "NULL::text"
                    },
                    "{timezone}".len(),
                ),
                a if a.starts_with("{holiday_calendar}") => (
                    if self.has_calendar() {
                        "NULLIF(btrim(s.holiday_calendar::text), '')"
                    } else {
                        "NULL::text"
                    },
                    "{holiday_calendar}".len(),
                ),
                a if a.starts_with("{customer}") => (
                    if self.reads_customer {
                        "s.customer_id::text"
                    } else {
                        "NULL::text"
                    },
                    "{customer}".len(),
                ),
                _ => ("{", 1),
            };
            out.push_str(value);
            rest = &after[len..];
        }
        out.push_str(rest);
        // Only quoted identifiers from the settings and fixed text go in.
        sqlx::AssertSqlSafe(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_the_schema_and_the_source_quoted() {
        let names = Names::new(
            &SqlName::parse("Billing Ops").unwrap_or_else(|e| panic!("{e}")),
            &RelationName::parse("erp.due").unwrap_or_else(|e| panic!("{e}")),
        );
        names.set_amount(AmountColumn::Major);
        let sqlx::AssertSqlSafe(sql) = names.sql("SELECT {amount} FROM {src} s, {ir}.reminders r");
        assert_eq!(
            sql,
            "SELECT NULL::bigint AS amount_minor, s.amount::text AS amount_major \
             FROM \"erp\".\"due\" s, \"Billing Ops\".reminders r"
        );
    }

    #[test]
    fn a_schema_name_holding_a_placeholder_is_never_expanded_inside_its_quotes() {
        // Built directly: the settings refuse such a name (config::names).
        let names = Names::new(
            &SqlName("a{src}b".into()),
            &RelationName::parse("due").unwrap_or_else(|e| panic!("{e}")),
        );
        let sqlx::AssertSqlSafe(sql) = names.sql("SELECT 1 FROM {ir}.reminders, {src} s");
        assert_eq!(
            sql,
            "SELECT 1 FROM \"a{src}b\".reminders, \"a{src}b\".\"due\" s"
        );
    }
}
