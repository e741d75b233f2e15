//! The source contract: the columns the worker reads invoices through, and
//! the check that `source.relation` has them.
//!
//! The relation (usually a view over the user's billing tables) must have
//! every column of [`CONTRACT`] with one of its accepted types, and exactly
//! one of `amount_minor` and `amount`. The check reads the catalog, so an
//! empty relation passes; it runs before the first tick touches the source
//! (`run` checks when it first reaches the database), and a relation that
//! does not satisfy it is a configuration error naming the column.

use sqlx::FromRow;

use super::Db;
use super::conn::on_db;
use super::sql::AmountColumn;

/// One column of the contract.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ContractColumn {
    pub name: &'static str,
    /// Types accepted, as PostgreSQL names them (`format_type`; a domain
    /// counts as its base type).
    pub types: &'static [&'static str],
    pub nullable: bool,
    pub meaning: &'static str,
}

const TEXT: &[&str] = &["text", "character varying", "character", "citext"];

/// Every column but the amount (see [`AMOUNT_COLUMNS`]).
pub const CONTRACT: &[ContractColumn] = &[
    ContractColumn {
        name: "invoice_id",
        types: TEXT,
        nullable: false,
        meaning: "your key for the invoice, as text (cast a uuid or bigint: id::text); reminders.invoice_id holds it",
    },
    ContractColumn {
        name: "invoice_number",
        types: &[
            "text",
            "character varying",
            "character",
            "bigint",
            "integer",
        ],
        nullable: false,
        meaning: "the number the customer knows the invoice by",
    },
    ContractColumn {
        name: "customer_name",
        types: TEXT,
        nullable: false,
        meaning: "who the reminder is addressed to",
    },
    ContractColumn {
        name: "email",
        types: TEXT,
        nullable: false,
        meaning: "where it goes; an invalid or empty address discards the reminder with the reason",
    },
    ContractColumn {
        name: "locale",
        types: TEXT,
        nullable: true,
        meaning: "BCP 47 tag (de, de-CH) choosing the template and the formats; NULL: templates.default_locale",
    },
    ContractColumn {
        name: "currency",
        types: TEXT,
        nullable: false,
        meaning: "ISO 4217 code (EUR, JPY, KWD)",
    },
    ContractColumn {
        name: "due_date",
        types: &["date"],
        nullable: false,
        meaning: "when payment is due; the stages count days from it",
    },
    ContractColumn {
        name: "is_paid",
        types: &["boolean"],
        nullable: false,
        meaning: "true once no reminder may be sent (paid, voided, written off); NULL counts as true",
    },
    ContractColumn {
        name: "paused",
        types: &["boolean"],
        nullable: true,
        meaning: "true: no reminders for now (a dispute, a customer on hold); NULL counts as false",
    },
    ContractColumn {
        name: "paused_until",
        types: &["date"],
        nullable: true,
        meaning: "no reminders up to and including this date, compared with the customer's today: their timezone's date, else send_window.timezone's, else schedule.timezone's",
    },
    ContractColumn {
        name: "payment_url",
        types: TEXT,
        nullable: true,
        meaning: "a link for this invoice; when present it wins over company.payment_url",
    },
];

/// Exactly one of these: the amount in minor units, or in major units.
pub const AMOUNT_COLUMNS: &[ContractColumn] = &[
    ContractColumn {
        name: "amount_minor",
        types: &["bigint", "integer", "smallint"],
        nullable: false,
        meaning: "the amount due in the currency's minor units (cents): 1234.50 EUR is 123450",
    },
    ContractColumn {
        name: "amount",
        types: &["numeric", "bigint", "integer", "smallint"],
        nullable: false,
        meaning: "the amount due in major units (1234.50); converted with ISO 4217's minor units, rounding half away from zero",
    },
];

/// A column the relation has.
#[derive(Debug, Clone, PartialEq, Eq, FromRow, serde::Serialize)]
pub struct FoundColumn {
    pub name: String,
    /// `format_type` of the column's type (its base type for a domain),
    /// without a schema: `citext` wherever the extension is installed.
    pub data_type: String,
}

/// Why the source cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The relation is missing or does not have the contract's columns.
    #[error("source.relation: {0}")]
    Contract(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// The columns of `source.relation`, or None if it does not exist.
pub async fn columns(db: &Db) -> Result<Option<Vec<FoundColumn>>, sqlx::Error> {
    let relation = db.names().source_sql().to_owned();
    let exists: bool = on_db!(db, |c| sqlx::query_scalar(
        "SELECT to_regclass($1) IS NOT NULL"
    )
    .persistent(db.named())
    .bind(&relation)
    .fetch_one(&mut *c)
    .await)?;
    if !exists {
        return Ok(None);
    }
    // A type outside pg_catalog is named without its schema: format_type
    // would qualify it when the schema is not on our search_path (citext
    // installed in `extensions`, as Supabase does, is `extensions.citext`).
    on_db!(db, |c| sqlx::query_as(
        "SELECT a.attname::text AS name,
                CASE WHEN b.typnamespace = 'pg_catalog'::regnamespace
                     THEN format_type(b.oid, NULL) ELSE b.typname::text END AS data_type
           FROM pg_attribute a
           JOIN pg_type t ON t.oid = a.atttypid
           JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
          WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
          ORDER BY a.attnum"
    )
    .persistent(db.named())
    .bind(&relation)
    .fetch_all(&mut *c)
    .await)
    .map(Some)
}

/// Customer mode's extra column (`reminders.group_by = "customer"`).
pub const CUSTOMER_COLUMN: ContractColumn = ContractColumn {
    name: "customer_id",
    types: &[
        "text",
        "character varying",
        "character",
        "citext",
        "bigint",
        "integer",
        "uuid",
    ],
    nullable: false,
    meaning: "your key for the customer; with reminders.group_by = \"customer\" one mail lists every invoice of one customer_id",
};

/// The optional columns, read when the source has them (NULL otherwise):
/// the invoice's late-payment regime, its customer's zone and holiday
/// calendar.
pub const OPTIONAL_COLUMNS: &[ContractColumn] = &[
    ContractColumn {
        name: "late_payment_regime",
        types: TEXT,
        nullable: true,
        meaning: "optional: the late-payment regime of this invoice (none, eu, de-b2b, de-b2c, fr, uk, custom); NULL or empty: late_payment.regime",
    },
    ContractColumn {
        name: "timezone",
        types: TEXT,
        nullable: true,
        meaning: "optional: the customer's IANA zone (Europe/Berlin): their date decides the step, their clock the send window; NULL or empty: send_window.timezone",
    },
    ContractColumn {
        name: "holiday_calendar",
        types: TEXT,
        nullable: true,
        meaning: "optional: the customer's holiday calendar (DE-BY, or a file of send_window.calendars_dir); NULL or empty: send_window.calendar",
    },
];

/// Checks `found` against the contract, and (`customer_column`) customer
/// mode's `customer_id`: the amount column it has, or the first problem,
/// in one line naming the column.
pub fn verify_for(found: &[FoundColumn], customer_column: bool) -> Result<AmountColumn, String> {
    let amount = verify(found)?;
    for col in OPTIONAL_COLUMNS {
        if let Some(c) = found.iter().find(|c| c.name == col.name)
            && !col.types.contains(&c.data_type.as_str())
        {
            return Err(format!(
                "column {:?} has type {}; expected {}",
                col.name,
                c.data_type,
                col.types.join(" or ")
            ));
        }
    }
    if customer_column {
        let col = &CUSTOMER_COLUMN;
        match found.iter().find(|c| c.name == col.name) {
            None => {
                return Err(format!(
                    "column \"customer_id\" is missing (reminders.group_by = \"customer\" needs it: {})",
                    col.meaning
                ));
            }
            Some(c) if !col.types.contains(&c.data_type.as_str()) => {
                return Err(format!(
                    "column \"customer_id\" has type {}; expected {} (reminders.group_by = \"customer\")",
                    c.data_type,
                    col.types.join(" or ")
                ));
            }
            Some(_) => {}
        }
    }
    Ok(amount)
}

/// Checks `found` against the contract: the amount column it has, or the
/// first problem, in one line naming the column.
pub fn verify(found: &[FoundColumn]) -> Result<AmountColumn, String> {
    let type_of = |name: &str| {
        found
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.data_type.as_str())
    };
    let wrong = |col: &ContractColumn, found: &str| {
        format!(
            "column {:?} has type {found}; expected {} ({})",
            col.name,
            col.types.join(" or "),
            col.meaning
        )
    };
    for col in CONTRACT {
        match type_of(col.name) {
            None => {
                return Err(format!(
                    "column {:?} is missing ({}: {})",
                    col.name, col.types[0], col.meaning
                ));
            }
            Some(t) if !col.types.contains(&t) => return Err(wrong(col, t)),
            Some(_) => {}
        }
    }
    let [minor, major] = [&AMOUNT_COLUMNS[0], &AMOUNT_COLUMNS[1]];
    match (type_of(minor.name), type_of(major.name)) {
        (Some(_), Some(_)) => Err(
            "has both \"amount_minor\" and \"amount\"; expose exactly one (amount_minor in cents, or amount in major units)"
                .into(),
        ),
        (None, None) => Err(format!(
            "column \"amount_minor\" (or \"amount\") is missing ({}; or numeric in major units)",
            minor.types[0]
        )),
        (Some(t), None) if !minor.types.contains(&t) => Err(wrong(minor, t)),
        (None, Some(t)) if !major.types.contains(&t) => Err(wrong(major, t)),
        (Some(_), None) => Ok(AmountColumn::Minor),
        (None, Some(_)) => Ok(AmountColumn::Major),
    }
}

/// Checks the source once and records its amount column; later calls
/// return at once. A relation that is missing, has the wrong columns or
/// cannot be read is [`SourceError::Contract`], naming it.
pub async fn check(db: &Db) -> Result<(), SourceError> {
    if db.names().source_checked() {
        return Ok(());
    }
    let relation = db.names().source_sql().to_owned();
    let Some(found) = columns(db).await? else {
        return Err(SourceError::Contract(format!(
            "relation {relation} does not exist (create the view, or run `invoice-reminder migrate` for the default one)"
        )));
    };
    let amount = verify_for(&found, db.names().reads_customer())
        .map_err(|e| SourceError::Contract(format!("{relation}: {e}")))?;
    // Readable by us (a grant missing on the view or a table under it)?
    let readable = on_db!(db, |c| sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT 1 FROM {relation} s LIMIT 0"
    )))
    .persistent(db.named())
    .execute(&mut *c)
    .await);
    match readable {
        Err(sqlx::Error::Database(e)) if e.code().is_some_and(|c| c == "42501") => {
            return Err(SourceError::Contract(format!(
                "{relation} cannot be read: {}",
                e.message()
            )));
        }
        Err(e) => return Err(e.into()),
        Ok(_) => {}
    }
    let has = |name: &str| found.iter().any(|c| c.name == name);
    let names = db.names();
    names.set_regime_column(has("late_payment_regime"));
    names.set_local_columns(has("timezone"), has("holiday_calendar"));
    if has("timezone") && !super::zones::recorded() {
        let theirs: Vec<String> = on_db!(db, |c| sqlx::query_scalar(
            "SELECT name FROM pg_timezone_names"
        )
        .persistent(db.named())
        .fetch_all(&mut *c)
        .await)?;
        super::zones::record(theirs);
    }
    db.names().set_amount(amount);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo() -> Vec<FoundColumn> {
        CONTRACT
            .iter()
            .chain(&AMOUNT_COLUMNS[..1])
            .map(|c| FoundColumn {
                name: c.name.into(),
                data_type: c.types[0].into(),
            })
            .collect()
    }

    #[test]
    fn the_demo_view_shape_passes_with_minor_units() {
        assert_eq!(verify(&demo()), Ok(AmountColumn::Minor));
    }

    #[test]
    fn a_missing_or_mistyped_column_is_named() {
        let mut cols = demo();
        cols.retain(|c| c.name != "is_paid");
        assert!(verify(&cols).is_err_and(|e| e.contains("\"is_paid\" is missing")));
        let mut cols = demo();
        if let Some(c) = cols.iter_mut().find(|c| c.name == "invoice_id") {
            c.data_type = "uuid".into();
        }
        assert!(verify(&cols).is_err_and(|e| e.contains("\"invoice_id\" has type uuid")));
    }

    #[test]
    fn exactly_one_amount_column_is_required() {
        let mut both = demo();
        both.push(FoundColumn {
            name: "amount".into(),
            data_type: "numeric".into(),
        });
        assert!(verify(&both).is_err_and(|e| e.contains("both")));
        let mut major = demo();
        major.retain(|c| c.name != "amount_minor");
        major.push(FoundColumn {
            name: "amount".into(),
            data_type: "numeric".into(),
        });
        assert_eq!(verify(&major), Ok(AmountColumn::Major));
        let mut none = demo();
        none.retain(|c| c.name != "amount_minor");
        assert!(verify(&none).is_err_and(|e| e.contains("missing")));
    }
}
