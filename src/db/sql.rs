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
