//! A formal late-payment claim letter as a PDF: [`render`] turns a
//! [`LetterPage`], whose text the caller has already formatted, into the
//! bytes of a PDF file.
//!
//! What every letter guarantees:
//! * **A4**: every page's MediaBox is 595.276 × 841.89 pt.
//! * **The shipped font, subset**: the text is set in DejaVu Sans and
//!   DejaVu Sans Bold, compiled into the binary from `assets/fonts/` (no
//!   system font, no network); each letter embeds only the glyphs it uses.
//! * **Extractable text**: each font carries a ToUnicode map, so
//!   `pdftotext` and copy-and-paste give back the text as written, "€",
//!   "£", "é", "ü" and "ß" included.
//! * **Deterministic**: the same page gives the same bytes; no date, no
//!   random file id, no hash-map order reaches the file.
//! * **Any input renders**: long text wraps within the margins, more text
//!   than a page holds continues on new pages (a long table under its
//!   header again; a row's cells past the twelfth are joined into it), a
//!   character the font lacks (an emoji, say) is printed
//!   as `?`, a control character too, and invisible bidi and zero-width
//!   controls are dropped. No input panics.
//!
//! Not done: shaping, kerning, hyphenation and bidi: right-to-left text is
//! set left to right in its logical order.
//!
//! `layout.rs` places the lines on pages, `lines.rs` breaks text into
//! lines and shares a width among columns, `font.rs` measures text and
//! subsets the font, `write.rs` writes the PDF objects; `tests.rs` reads
//! the files back with poppler's `pdftotext` and `pdfinfo`.

#![cfg_attr(
    not(test),
    deny(
        clippy::arithmetic_side_effects,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

use std::sync::Arc;

mod font;
mod layout;
mod lines;
mod write;

/// One letter's content, already formatted as text by the caller.
///
/// Every field may be empty; each non-empty part is set in this order:
/// creditor, debtor, date (right-aligned), title (bold), intro, facts,
/// table, totals, outro.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LetterPage {
    /// The sender block's lines (company name, address, email), top left.
    pub creditor: Vec<String>,
    /// The recipient block's lines (customer name, email), below it.
    pub debtor: Vec<String>,
    /// Place and date, e.g. "6 December 2026", right-aligned.
    pub place_date: String,
    /// The bold heading.
    pub title: String,
    /// Paragraphs before the table; long ones wrap, `\n` breaks a line.
    pub intro: Vec<String>,
    /// Label and value rows: invoice number, amount, due date.
    pub facts: Vec<(String, String)>,
    /// The interest table's header, e.g. `["From", "To", "Days", "Rate",
    /// "Interest"]`; bold, with a rule under it.
    pub table_header: Vec<String>,
    /// The table's rows, as wide as the header; every column but the first
    /// two is right-aligned.
    pub table_rows: Vec<Vec<String>>,
    /// Label and value rows with the values right-aligned: interest,
    /// compensation, total claimed, amount now due, pay by.
    pub totals: Vec<(String, String)>,
    /// Paragraphs after the totals (payment link, closing).
    pub outro: Vec<String>,
}

/// Why a letter could not be rendered. None of these depends on the
/// letter's text: each means the shipped font or the PDF writer failed.
#[derive(Debug, thiserror::Error)]
pub enum PdfError {
    /// The font compiled into the binary cannot be parsed.
    #[error("the letter's font cannot be read: {0}")]
    Font(String),
    /// The font could not be cut down to the glyphs the letter uses.
    #[error("the letter's font cannot be subset: {0}")]
    Subset(String),
    /// Compressing a stream failed.
    #[error("a stream of the letter cannot be compressed: {0}")]
    Compress(String),
    /// The letter needs more PDF objects than a file can number.
    #[error("the letter is too long for one PDF file")]
    TooLong,
}

/// A rendered letter: the bytes of its PDF file, and, when the file opens
/// with an opening shared with other letters, that opening's base64 text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdfFile {
    pub bytes: Vec<u8>,
    pub encoded: Option<Arc<EncodedHead>>,
}

/// The first `len` bytes of a file (a whole number of 57-byte lines) as a
/// message's base64 text: 76-character lines joined by CRLF, without a
/// CRLF after the last, as `email_encoding` writes them. A letter's
/// message encodes only the rest.
#[derive(Debug, PartialEq, Eq)]
pub struct EncodedHead {
    pub len: usize,
    pub base64: String,
}

/// The letter `page` as an A4 PDF file (see the module's documentation for
/// what the file guarantees).
pub fn render(page: &LetterPage) -> Result<PdfFile, PdfError> {
    let fonts = font::Fonts::get_or_load()?;
    let pages = layout::lay_out(page, fonts);
    write::document(&pages, fonts, &page.title)
}

#[cfg(test)]
mod tests;
