//! A source `email` cell, parsed once where its row enters: one address, or
//! several separated by commas (a view's `string_agg` over a contacts
//! table), each a valid address, repeats dropped, at most
//! [`MAX_RECIPIENTS`]. A [`Recipients`] value always holds at least one
//! address; nothing above parses a cell again.

use lettre::Address;

use super::text::sanitize;

/// The most addresses one `email` cell may hold.
pub const MAX_RECIPIENTS: usize = 20;

/// The addresses a reminder goes to, with the cell they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipients {
    /// The cell as the source wrote it (templates show it, trimmed).
    cell: String,
    /// Its addresses, in the cell's order, never empty.
    addresses: Vec<Address>,
}

impl Recipients {
    /// The addresses in `cell`. Each must parse; repeats (compared
    /// case-insensitively) are dropped, the first kept. An empty cell, an
    /// empty list, more than [`MAX_RECIPIENTS`] or one bad address is an
    /// error naming it.
    pub fn parse(cell: &str) -> Result<Self, String> {
        let mut addresses: Vec<Address> = Vec::new();
        for part in cell.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let address: Address = part.parse().map_err(|e: lettre::address::AddressError| {
                format!("{:?} is not an email address: {e}", sanitize(part, 100))
            })?;
            let seen = addresses
                .iter()
                .any(|a| AsRef::<str>::as_ref(a).eq_ignore_ascii_case(address.as_ref()));
            if !seen {
                addresses.push(address);
            }
        }
        if addresses.is_empty() {
            return Err("the customer has no email address".to_owned());
        }
        if addresses.len() > MAX_RECIPIENTS {
            return Err(format!(
                "{} addresses in one email cell; at most {MAX_RECIPIENTS}",
                addresses.len()
            ));
        }
        Ok(Self {
            cell: cell.to_owned(),
            addresses,
        })
    }

    /// Recipients made of addresses already parsed (some of a cell's, or
    /// several cells' together), written as a cell of them joined by `, `;
    /// None for an empty list.
    pub fn of(addresses: Vec<Address>) -> Option<Self> {
        if addresses.is_empty() {
            return None;
        }
        let cell = addresses
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        Some(Self { cell, addresses })
    }

    /// The cell as the source wrote it.
    pub fn cell(&self) -> &str {
        &self.cell
    }

    /// The addresses, in the cell's order (at least one).
    pub fn addresses(&self) -> &[Address] {
        &self.addresses
    }
}

/// The addresses of `cells` (source `email` cells; a cell that does not
/// parse has none), lower-cased, sorted, each once: what the suppression
/// list is asked about, in the form its answers are compared in.
pub fn lowercase_addresses<'a>(cells: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut all: Vec<String> = cells
        .filter_map(|cell| Recipients::parse(cell).ok())
        .flat_map(|r| {
            r.addresses()
                .iter()
                .map(|a| a.to_string().to_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(cell: &str) -> Result<Vec<String>, String> {
        Recipients::parse(cell).map(|r| r.addresses().iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_cell_holds_one_address_or_a_list_without_repeats() {
        assert_eq!(
            parsed("a@example.test"),
            Ok(vec!["a@example.test".to_owned()])
        );
        assert_eq!(
            parsed(" a@example.test, b@example.test ,A@EXAMPLE.TEST,"),
            Ok(vec![
                "a@example.test".to_owned(),
                "b@example.test".to_owned()
            ])
        );
        assert_eq!(
            parsed(" , "),
            Err("the customer has no email address".to_owned())
        );
        assert!(
            parsed("a@example.test, nope")
                .is_err_and(|e| e.contains("\"nope\" is not an email address"))
        );
        let many = (0..=MAX_RECIPIENTS)
            .map(|i| format!("u{i}@example.test"))
            .collect::<Vec<_>>();
        assert!(parsed(&many.join(",")).is_err_and(|e| e.contains("at most 20")));
    }

    #[test]
    fn recipients_made_of_addresses_read_as_a_cell_of_them() {
        let list = Recipients::parse("a@example.test, b@example.test")
            .map(|r| r.addresses().to_vec())
            .unwrap_or_default();
        let joined = Recipients::of(list).map(|r| r.cell().to_owned());
        assert_eq!(joined.as_deref(), Some("a@example.test, b@example.test"));
        assert_eq!(Recipients::of(Vec::new()), None);
    }
}
