//! SQL names from the settings: `database.schema` (where our tables live)
//! and `source.relation` (where invoices come from). Checked once at
//! start-up and only ever used quoted, so any name PostgreSQL accepts is
//! safe in a statement, and none can change what a statement does.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

use super::types::string_like;

/// PostgreSQL truncates identifiers longer than this (NAMEDATALEN - 1).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// One SQL identifier, as written (case kept: `Billing` is not `billing`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlName(pub(crate) String);

impl SqlName {
    pub fn parse(name: &str) -> Result<Self, String> {
        if name.is_empty() {
            return Err("must not be empty".into());
        }
        if name.len() > MAX_IDENTIFIER_BYTES {
            return Err(format!(
                "{name:?} is longer than PostgreSQL's {MAX_IDENTIFIER_BYTES}-byte identifier limit"
            ));
        }
        if name.chars().any(char::is_control) {
            return Err(format!("{name:?} contains a control character"));
        }
        if name.contains(['{', '}']) {
            return Err(format!(
                "{name:?} contains a brace; use a name without {{ or }}"
            ));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as a quoted identifier: `"invoice_reminder"`, with any
    /// `"` doubled.
    pub fn quoted(&self) -> String {
        format!("\"{}\"", self.0.replace('"', "\"\""))
    }
}

impl fmt::Display for SqlName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SqlName {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        Self::parse(&string_like(de)?).map_err(D::Error::custom)
    }
}

/// `source.relation`: `name` (looked up in `database.schema`) or
/// `schema.name`. Written without quotes; a name containing a dot cannot be
/// given (rename it or wrap it in a view).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelationName {
    pub schema: Option<SqlName>,
    pub name: SqlName,
}

impl RelationName {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = text.split('.');
        let (first, second) = (parts.next().unwrap_or_default(), parts.next());
        if parts.next().is_some() {
            return Err(format!(
                "{text:?} has more than one dot; write `relation` or `schema.relation`"
            ));
        }
        Ok(match second {
            None => Self {
                schema: None,
                name: SqlName::parse(first)?,
            },
            Some(name) => Self {
                schema: Some(SqlName::parse(first)?),
                name: SqlName::parse(name)?,
            },
        })
    }

    /// The quoted, schema-qualified name; an unqualified one is in `schema`.
    pub fn qualified(&self, schema: &SqlName) -> String {
        format!(
            "{}.{}",
            self.schema.as_ref().unwrap_or(schema).quoted(),
            self.name.quoted()
        )
    }
}

impl fmt::Display for RelationName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

impl<'de> Deserialize<'de> for RelationName {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        Self::parse(&string_like(de)?).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_with_inner_quotes_doubled() {
        let name = SqlName::parse("we\"ird Name").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(name.quoted(), "\"we\"\"ird Name\"");
    }

    #[test]
    fn a_relation_is_looked_up_in_the_schema_unless_qualified() {
        let schema = SqlName::parse("invoice_reminder").unwrap_or_else(|e| panic!("{e}"));
        let plain = RelationName::parse("reminder_source").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            plain.qualified(&schema),
            "\"invoice_reminder\".\"reminder_source\""
        );
        let own = RelationName::parse("billing.Due").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(own.qualified(&schema), "\"billing\".\"Due\"");
    }

    #[test]
    fn empty_long_and_doubly_dotted_names_are_refused() {
        assert!(SqlName::parse("").is_err());
        assert!(SqlName::parse(&"x".repeat(64)).is_err());
        assert!(RelationName::parse("a.b.c").is_err());
        assert!(RelationName::parse("a.").is_err());
    }

    #[test]
    fn names_with_braces_are_refused() {
        assert!(SqlName::parse("a{src}b").is_err_and(|e| e.contains("brace")));
        assert!(RelationName::parse("erp.{ir}").is_err());
    }
}
