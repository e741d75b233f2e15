//! The rows of a generated source. A valid row is made only from values
//! the contract accepts (each checked here against the library's own
//! parsers, so the tables below cannot drift from its rules); an invalid
//! row is a valid one with exactly **one** defect from known-bad values,
//! so its problem label is known (with two defects it would depend on the
//! order of the checks). Keys and the numbers of NULL-key rows are
//! distinct, so audit's report can be matched row by row.

use chrono::{Days, NaiveDate};
use invoice_reminder::domain::{Currency, Money, Recipients};

fn parse_recipients(cell: &str) -> Result<Recipients, String> {
    Recipients::parse(cell)
}

fn minor_units(code: &str) -> Result<u16, String> {
    Currency::parse(code).map(|c| c.minor_units())
}

fn major_to_minor(amount: &str, code: &str) -> Result<i64, String> {
    Money::from_major(amount, Currency::parse(code)?).map(|m| m.minor())
}

use super::rng::Rng;
use super::source::{AmountType, Row, Shape};

/// (code, minor-unit exponent) of the currencies valid rows use.
const CURRENCIES: &[(&str, u32)] = &[("EUR", 2), ("JPY", 0), ("KWD", 3), ("USD", 2)];

/// Values no ISO 4217 lookup accepts.
const BAD_CURRENCIES: &[&str] = &["XYZ", "EURO", "", "€", "E", "12", "eu r", "ZZZ", "EUR;"];

/// The one defect an invalid row has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Defect {
    RepeatedKey,
    NullKey,
    NullEmail,
    NullDueDate,
    NullCurrency,
    NullAmount,
    BadCurrency,
    BadAddress,
    BadAmount,
}

impl Defect {
    fn label(self) -> &'static str {
        match self {
            Self::RepeatedKey => "repeated_key",
            Self::NullKey => "null_key",
            Self::NullEmail | Self::NullDueDate | Self::NullCurrency | Self::NullAmount => {
                "missing_field"
            }
            Self::BadCurrency => "bad_currency",
            Self::BadAddress => "bad_address",
            Self::BadAmount => "bad_amount",
        }
    }
}

/// Draws rows for one shape.
pub struct Generator<'a> {
    rng: &'a mut Rng,
    shape: Shape,
    today: NaiveDate,
    /// Makes every key and number distinct.
    n: u64,
}

impl<'a> Generator<'a> {
    pub fn new(rng: &'a mut Rng, shape: Shape, today: NaiveDate) -> Self {
        Self {
            rng,
            shape,
            today,
            n: 0,
        }
    }

    pub fn rng(&mut self) -> &mut Rng {
        self.rng
    }

    fn next_n(&mut self) -> u64 {
        self.n += 1;
        self.n
    }

    fn date(&self, days_after_today: i64) -> NaiveDate {
        let magnitude = Days::new(days_after_today.unsigned_abs());
        if days_after_today >= 0 {
            self.today.checked_add_days(magnitude)
        } else {
            self.today.checked_sub_days(magnitude)
        }
        .expect("a date in range")
    }

    /// A distinct key, as billing systems write them. Short enough for
    /// `character(24)`; never two keys equal but for case (`citext`).
    fn key(&mut self) -> String {
        let n = self.next_n();
        let r = self.rng.next_u64();
        let wide = self.shape.invoice_id != "character(24)";
        match self.rng.below(if wide { 9 } else { 8 }) {
            0 => n.to_string(),
            1 => format!("INV-{n:05}"),
            2 => format!("inv/{n}"),
            3 => format!("é{n}"),
            4 => format!("k {n}#"),
            5 => format!("{n}-{:x}", r & 0xffff),
            6 => format!(" {n}"),
            7 => format!("cr\r\nlf{n}"),
            _ => format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{n:012}",
                r >> 32,
                (r >> 16) & 0xffff,
                r & 0xfff,
                (r >> 12) & 0xfff
            ),
        }
    }

    /// A distinct invoice number (for rows whose key is NULL, audit names
    /// them by it).
    fn distinct_number(&mut self) -> String {
        let n = self.next_n();
        if self.shape.numeric_numbers() {
            return (1_000_000 + n).to_string();
        }
        match self.rng.below(4) {
            0 => format!("NK-{n}"),
            1 => format!("Rechnung Nº {n} — Straße"),
            2 => format!("{n}\r\nX-Injected: yes"),
            _ => format!("L{n}-{}", "9".repeat(200)),
        }
    }

    fn number(&mut self) -> Option<String> {
        if self.rng.chance(5) {
            return None;
        }
        if self.shape.numeric_numbers() {
            let max = if self.shape.invoice_number == "integer" {
                i64::from(i32::MAX)
            } else {
                i64::MAX
            };
            return Some(self.rng.pick(&[0, 7, 20_260_042, max, -1]).to_string());
        }
        let n = self.n;
        Some(match self.rng.below(6) {
            0 => format!("INV-{n}"),
            1 => String::new(),
            2 => format!("Nº {n} — ü 🧾"),
            3 => format!("{n}\r\nBcc: evil@evil.test"),
            4 => format!("INV {n}/8?x=1#y"),
            _ => "0".repeat(500),
        })
    }

    fn name(&mut self) -> Option<String> {
        let long = self.rng.range(200, 5000) as usize;
        match self.rng.below(9) {
            0 => None,
            1 => Some(String::new()),
            2 => Some("Ada Lovelace".into()),
            3 => Some("Zoë Ñandú 🧾".into()),
            4 => Some("Eve\r\nBcc: evil@evil.test".into()),
            5 => Some("Line\nBreak\rCarriage\t Tab".into()),
            6 => Some("N".repeat(long)),
            7 => Some("Ελένη 山田 محمد ".repeat(long / 20)),
            _ => Some("\"Quoted, Name\" <x@evil.test>".into()),
        }
    }

    /// One `email` cell that parses: one address or several, repeats
    /// differing in case, spaces and empty parts.
    fn good_email(&mut self) -> String {
        let n = self.n;
        let cell = match self.rng.below(7) {
            0 => format!("c{n}@example.test"),
            1 => format!("  c{n}@example.test  "),
            2 => format!("C{n}@Example.Test, c{n}@example.test"),
            3 => format!("a{n}@example.test,b{n}@example.test,A{n}@EXAMPLE.TEST"),
            4 => format!("c{n}+tag@example.test,"),
            5 => format!("first.last{n}@sub.example.test, ,x{n}@example.test"),
            _ => (0..20)
                .map(|i| format!("r{i}.{n}@example.test"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        assert!(parse_recipients(&cell).is_ok(), "meant as valid: {cell:?}");
        cell
    }

    fn bad_email(&mut self) -> String {
        let n = self.n;
        let cell = match self.rng.below(11) {
            0 => String::new(),
            1 => "   ".into(),
            2 => " , ,".into(),
            3 => "not an address".into(),
            4 => format!("c{n}@example.test, nope"),
            5 => "@example.test".into(),
            6 => format!("c{n}@"),
            7 => format!("c{n}@example.test;d{n}@example.test"),
            8 => format!("Name <c{n}@example.test>"),
            9 => format!("c{n}@example.test\r\nBcc: evil@evil.test"),
            _ => (0..21)
                .map(|i| format!("r{i}.{n}@example.test"))
                .collect::<Vec<_>>()
                .join(","),
        };
        assert!(parse_recipients(&cell).is_err(), "meant as bad: {cell:?}");
        cell
    }

    fn locale(&mut self) -> Option<String> {
        self.rng
            .pick(&[
                None,
                Some(""),
                Some("en"),
                Some("de"),
                Some("de-CH"),
                Some("de_AT"),
                Some("fr-FR"),
                Some("EN"),
                Some("not a locale!"),
            ])
            .map(str::to_owned)
    }

    fn payment_url(&mut self) -> Option<String> {
        let n = self.n;
        match self.rng.below(6) {
            0 | 1 => None,
            2 => Some(String::new()),
            3 => Some(format!("https://pay.example.test/i/{n}?a=b#c")),
            4 => Some("javascript:alert(1)".into()),
            _ => Some(format!("/relative/{n}")),
        }
    }

    /// A currency as a row writes it (any case, maybe padded) and its
    /// exponent.
    fn currency(&mut self) -> (String, u32) {
        let (code, exponent) = *self.rng.pick(CURRENCIES);
        let written = match self.rng.below(5) {
            0 => code.to_ascii_lowercase(),
            1 => format!(" {} ", code.to_ascii_lowercase()),
            2 => format!("{}{}", &code[..1], code[1..].to_ascii_lowercase()),
            _ => code.to_owned(),
        };
        assert!(minor_units(&written).is_ok(), "meant as valid: {written:?}");
        (written, exponent)
    }

    /// An amount the column's type holds and that fits i64 minor units of
    /// a currency with `exponent` decimals.
    fn good_amount(&mut self, exponent: u32) -> String {
        let amount = self.shape.amount;
        let scale = 10i64.pow(exponent);
        let max = amount.type_max();
        let text = match amount {
            AmountType::Minor(_) => {
                let m = *self.rng.pick(&[0, 1, 12_345, max, max - 1, -1, -12_345]);
                let m = if self.rng.chance(30) {
                    self.rng.range(0, max.min(1_000_000_000_000))
                } else {
                    m
                };
                m.to_string()
            }
            _ if amount.decimal() => {
                // Minor units written as a major amount, exact or with more
                // decimals than the currency has (rounded half away).
                let minor =
                    *self
                        .rng
                        .pick(&[0, 1, 12_345, 99_999_999, i64::MAX, i64::MAX - 1, -12_345]);
                let sign = if minor < 0 { "-" } else { "" };
                let whole = minor.unsigned_abs() / scale.unsigned_abs();
                let fraction = minor.unsigned_abs() % scale.unsigned_abs();
                let mut text = if exponent == 0 {
                    format!("{sign}{whole}")
                } else {
                    format!(
                        "{sign}{whole}.{fraction:0width$}",
                        width = exponent as usize
                    )
                };
                if minor.abs() < 1_000_000_000 && self.rng.chance(40) {
                    text.push_str(if exponent == 0 { ".4" } else { "5" });
                }
                text
            }
            _ => {
                // An integer major amount: its minor units must fit.
                let top = max.min(i64::MAX / scale);
                self.rng.pick(&[0, 1, 5, 1000, top, -5]).to_string()
            }
        };
        if let AmountType::Major(_) = amount {
            let code = CURRENCIES
                .iter()
                .find(|(_, e)| *e == exponent)
                .map(|(c, _)| *c)
                .expect("a currency");
            assert!(
                major_to_minor(&text, code).is_ok(),
                "meant as valid: {text} {code}"
            );
        }
        text
    }

    /// A valid row that owes its due step today, and its age in days.
    pub fn valid_owed(&mut self) -> (Row, i64) {
        let key = self.key();
        let age = match self.rng.below(7) {
            0 => self.rng.range(-3, 2),
            1 => self.rng.range(3, 20),
            2 => self.rng.range(21, 34),
            3 => self.rng.range(35, 48),
            4 => self.rng.range(49, 200),
            5 => self.rng.range(1000, 5000),
            _ => self.rng.range(-3, 60),
        };
        let (currency, exponent) = self.currency();
        let paused_until = match self.rng.below(4) {
            0 => {
                let days = self.rng.range(1, 30);
                Some(self.date(-days))
            }
            _ => None,
        };
        let row = Row {
            invoice_id: Some(key),
            invoice_number: self.number(),
            customer_name: self.name(),
            email: Some(self.good_email()),
            locale: self.locale(),
            amount: Some(self.good_amount(exponent)),
            currency: Some(currency),
            due_date: Some(self.date(-age)),
            is_paid: Some(false),
            paused: *self.rng.pick(&[None, Some(false)]),
            paused_until,
            payment_url: self.payment_url(),
            customer_id: None,
        };
        (row, age)
    }

    /// A valid row that owes nothing today.
    pub fn valid_not_owed(&mut self) -> Row {
        let (mut row, _) = self.valid_owed();
        match self.rng.below(6) {
            0 => row.is_paid = Some(true),
            1 => row.is_paid = None,
            2 => row.paused = Some(true),
            3 => row.paused_until = Some(self.today),
            4 => {
                let days = self.rng.range(1, 30);
                row.paused_until = Some(self.date(days));
            }
            _ => {
                let days = self.rng.range(4, 60);
                row.due_date = Some(self.date(days));
            }
        }
        row
    }

    /// An invalid row (several, for a repeated key) with exactly one
    /// defect, and the problem label audit must give it.
    pub fn invalid(&mut self) -> (&'static str, Vec<Row>) {
        let mut defects = vec![
            Defect::RepeatedKey,
            Defect::NullKey,
            Defect::NullEmail,
            Defect::NullDueDate,
            Defect::NullCurrency,
            Defect::NullAmount,
            Defect::BadCurrency,
            Defect::BadAddress,
        ];
        let bad_amount_possible =
            self.shape.amount.decimal() || self.shape.amount == AmountType::Major("bigint");
        if bad_amount_possible {
            defects.push(Defect::BadAmount);
        }
        let defect = *self.rng.pick(&defects);
        let (mut row, _) = self.valid_owed();
        match defect {
            Defect::RepeatedKey => {
                let copies = self.rng.range(1, 2);
                let mut rows = vec![row.clone()];
                for _ in 0..copies {
                    // Another row for the same key: valid by itself, maybe
                    // disagreeing on everything else, maybe paid or paused.
                    let (mut other, _) = self.valid_owed();
                    other.invoice_id = row.invoice_id.clone();
                    match self.rng.below(4) {
                        0 => other.is_paid = Some(true),
                        1 => other.paused = Some(true),
                        _ => {}
                    }
                    rows.push(other);
                }
                return (defect.label(), rows);
            }
            Defect::NullKey => {
                row.invoice_id = None;
                row.invoice_number = Some(self.distinct_number());
            }
            Defect::NullEmail => row.email = None,
            Defect::NullDueDate => row.due_date = None,
            Defect::NullCurrency => row.currency = None,
            Defect::NullAmount => row.amount = None,
            Defect::BadCurrency => {
                let bad = *self.rng.pick(BAD_CURRENCIES);
                assert!(minor_units(bad).is_err(), "meant as bad: {bad:?}");
                row.currency = Some(bad.to_owned());
            }
            Defect::BadAddress => row.email = Some(self.bad_email()),
            Defect::BadAmount => {
                let (code, exponent) = *self.rng.pick(&[("EUR", 2u32), ("KWD", 3)]);
                let over = i64::MAX / 10i64.pow(exponent) + 1;
                let amount = if self.shape.amount.decimal() {
                    self.rng
                        .pick(&[
                            "NaN".to_owned(),
                            "Infinity".to_owned(),
                            "-Infinity".to_owned(),
                            format!("1{}", "0".repeat(30)),
                            format!("-{over}"),
                            over.to_string(),
                        ])
                        .clone()
                } else {
                    over.to_string()
                };
                assert!(
                    major_to_minor(&amount, code).is_err(),
                    "meant as bad: {amount} {code}"
                );
                row.currency = Some(code.to_ascii_lowercase());
                row.amount = Some(amount);
            }
        }
        (defect.label(), vec![row])
    }
}
