//! Where each line of a letter goes: its blocks in order down A4 pages,
//! each text wrapped within its column (`lines.rs`), a new page when the
//! next line does not fit, a table's header again on each page the table
//! continues on, and "n / m" at the foot of each page when there is more
//! than one.

use super::LetterPage;
use super::font::{Fonts, Style};
use super::lines::{fold, natural, share, wrap};

/// A4, in points.
pub(super) const PAGE_WIDTH: f32 = 595.276;
/// A4, in points.
pub(super) const PAGE_HEIGHT: f32 = 841.89;
/// The text's left edge: 25 mm.
pub(super) const LEFT: f32 = 70.866;
/// The text's right edge: 20 mm from the page's.
pub(super) const RIGHT: f32 = PAGE_WIDTH - 56.693;
/// The text's width.
const WIDTH: f32 = RIGHT - LEFT;
/// The top of the first line: 20 mm down.
const TOP: f32 = PAGE_HEIGHT - 56.693;
/// No line's box goes below this: 25 mm up.
const BOTTOM: f32 = 70.866;
/// The page number's baseline.
const FOOTER: f32 = 36.0;
/// The body's size, in points.
const SIZE: f32 = 10.5;
const TITLE_SIZE: f32 = 12.5;
const FOOTER_SIZE: f32 = 8.5;
/// Line height, as a multiple of the size.
const LEADING: f32 = 1.35;
/// Space between two columns, at most.
const GUTTER: f32 = 12.0;

/// One laid-out page: the text and the rules on it.
#[derive(Debug, Default)]
pub(super) struct Page {
    pub(super) texts: Vec<Text>,
    pub(super) rules: Vec<Rule>,
}

/// A run of printable text (see `Font::printable`) on one baseline.
#[derive(Debug)]
pub(super) struct Text {
    pub(super) x: f32,
    pub(super) y: f32,
    pub(super) style: Style,
    pub(super) size: f32,
    pub(super) text: String,
}

/// A thin horizontal line from `x1` to `x2` at height `y`.
#[derive(Debug)]
pub(super) struct Rule {
    pub(super) x1: f32,
    pub(super) x2: f32,
    pub(super) y: f32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// One cell of a row: where it goes and its lines, already wrapped.
struct Cell {
    x: f32,
    width: f32,
    align: Align,
    style: Style,
    lines: Vec<String>,
}

/// The pages of `letter`, at least one.
pub(super) fn lay_out(letter: &LetterPage, fonts: &Fonts) -> Vec<Page> {
    let mut c = Cursor::new(fonts);
    let line = SIZE * LEADING;
    c.section(line, !letter.creditor.is_empty());
    for text in &letter.creditor {
        c.paragraph(text, Style::Regular, SIZE, Align::Left);
    }
    c.section(line * 2.0, !letter.debtor.is_empty());
    for text in &letter.debtor {
        c.paragraph(text, Style::Regular, SIZE, Align::Left);
    }
    if !letter.place_date.is_empty() {
        c.section(line, true);
        c.paragraph(&letter.place_date, Style::Regular, SIZE, Align::Right);
    }
    if !letter.title.is_empty() {
        c.section(line * 2.0, true);
        // The heading stays with the first lines after it.
        c.ensure(TITLE_SIZE * LEADING + line * 3.0);
        c.paragraph(&letter.title, Style::Bold, TITLE_SIZE, Align::Left);
    }
    for text in &letter.intro {
        c.section(line * 0.6, true);
        c.paragraph(text, Style::Regular, SIZE, Align::Left);
    }
    if !letter.facts.is_empty() {
        c.section(line, true);
        c.facts(&letter.facts);
    }
    c.table(&letter.table_header, &letter.table_rows);
    if !letter.totals.is_empty() {
        c.section(line * 0.5, true);
        c.totals(&letter.totals);
    }
    for text in &letter.outro {
        c.section(line * 0.6, true);
        c.paragraph(text, Style::Regular, SIZE, Align::Left);
    }
    c.finish()
}

/// Lays lines down the pages: `y` is the top of the next line's box.
struct Cursor<'f> {
    fonts: &'f Fonts,
    done: Vec<Page>,
    page: Page,
    y: f32,
    /// Nothing has been put on this page yet.
    fresh: bool,
    /// Some section has been laid out.
    started: bool,
}

impl<'f> Cursor<'f> {
    fn new(fonts: &'f Fonts) -> Self {
        Self {
            fonts,
            done: Vec::new(),
            page: Page::default(),
            y: TOP,
            fresh: true,
            started: false,
        }
    }

    /// Space before a section that has content, unless it is the first or
    /// opens a page.
    fn section(&mut self, space: f32, has_content: bool) {
        if !has_content {
            return;
        }
        if self.started && !self.fresh {
            self.y -= space;
        }
        self.started = true;
    }

    /// A new page unless `height` fits on this one; true if it began one.
    /// A fresh page is never left: what does not fit on it overflows
    /// line by line instead.
    fn ensure(&mut self, height: f32) -> bool {
        if self.fresh || self.y - height >= BOTTOM {
            return false;
        }
        self.done.push(std::mem::take(&mut self.page));
        self.y = TOP;
        self.fresh = true;
        true
    }

    fn put(&mut self, x: f32, style: Style, size: f32, text: String) {
        if !text.is_empty() {
            let y = self.y - size;
            self.page.texts.push(Text {
                x,
                y,
                style,
                size,
                text,
            });
        }
        self.fresh = false;
    }

    /// `text` wrapped across the text's width.
    fn paragraph(&mut self, text: &str, style: Style, size: f32, align: Align) {
        let cell = self.cell_sized(text, LEFT, WIDTH, align, style, size);
        self.lines(&[cell], None, size);
    }

    fn cell(&self, text: &str, x: f32, width: f32, align: Align, style: Style) -> Cell {
        self.cell_sized(text, x, width, align, style, SIZE)
    }

    fn cell_sized(
        &self,
        text: &str,
        x: f32,
        width: f32,
        align: Align,
        style: Style,
        size: f32,
    ) -> Cell {
        let lines = wrap(self.fonts.get(style), text, size, width);
        Cell {
            x,
            width,
            align,
            style,
            lines,
        }
    }

    /// Cells side by side, kept on one page where they fit on half of one;
    /// when they go on to another, `header` is set again first.
    fn row(&mut self, cells: &[Cell], header: Option<&[Cell]>) {
        let count = cells.iter().map(|c| c.lines.len()).max().unwrap_or(0);
        let height = SIZE * LEADING * count as f32;
        if height <= (TOP - BOTTOM) * 0.5 && self.ensure(height) {
            self.repeat(header);
        }
        self.lines(cells, header, SIZE);
    }

    /// The cells' lines side by side, line by line down the pages; on each
    /// new page, `header` first.
    fn lines(&mut self, cells: &[Cell], header: Option<&[Cell]>, size: f32) {
        let line = size * LEADING;
        let count = cells.iter().map(|c| c.lines.len()).max().unwrap_or(0);
        for i in 0..count {
            if self.ensure(line) {
                self.repeat(header);
            }
            for cell in cells {
                let Some(text) = cell.lines.get(i) else {
                    continue;
                };
                let width = self.fonts.get(cell.style).width(text, size);
                let x = match cell.align {
                    Align::Left => cell.x,
                    Align::Right => cell.x + cell.width - width,
                };
                // A character wider than its column stays within the margins.
                let x = x.min(RIGHT - width).max(LEFT);
                self.put(x, cell.style, size, text.clone());
            }
            self.y -= line;
        }
    }

    fn repeat(&mut self, header: Option<&[Cell]>) {
        if let Some(header) = header {
            self.row(header, None);
            self.rule();
        }
    }

    /// A rule across the text's width, under the last line.
    fn rule(&mut self) {
        self.y -= 2.0;
        let y = self.y;
        self.page.rules.push(Rule {
            x1: LEFT,
            x2: RIGHT,
            y,
        });
        self.y -= 4.0;
    }

    /// Label and value rows: the labels in a column as wide as the widest
    /// (at most 45 % of the text's width), each value after its label.
    fn facts(&mut self, facts: &[(String, String)]) {
        let labels: Vec<&str> = facts.iter().map(|(l, _)| l.as_str()).collect();
        let label_width = natural(self.fonts.get(Style::Regular), &labels, SIZE).min(WIDTH * 0.45);
        let value_x = LEFT + label_width + GUTTER;
        for (label, value) in facts {
            let cells = [
                self.cell(label, LEFT, label_width, Align::Left, Style::Regular),
                self.cell(value, value_x, RIGHT - value_x, Align::Left, Style::Regular),
            ];
            self.row(&cells, None);
        }
    }

    /// Label and value rows under a rule, the values right-aligned in a
    /// column as wide as the widest (at most 40 % of the text's width).
    fn totals(&mut self, totals: &[(String, String)]) {
        self.ensure(SIZE * LEADING * 2.0 + 6.0);
        self.rule();
        let values: Vec<&str> = totals.iter().map(|(_, v)| v.as_str()).collect();
        let value_width = natural(self.fonts.get(Style::Regular), &values, SIZE).min(WIDTH * 0.4);
        let label_width = WIDTH - value_width - GUTTER;
        for (label, value) in totals {
            let cells = [
                self.cell(label, LEFT, label_width, Align::Left, Style::Regular),
                self.cell(
                    value,
                    RIGHT - value_width,
                    value_width,
                    Align::Right,
                    Style::Regular,
                ),
            ];
            self.row(&cells, None);
        }
    }

    /// The interest table: columns as wide as their content allows, every
    /// column but the first two right-aligned, a rule under the header.
    fn table(&mut self, header: &[String], rows: &[Vec<String>]) {
        let header = &fold(header);
        let rows: Vec<Vec<String>> = rows.iter().map(|r| fold(r)).collect();
        let columns = rows.iter().map(Vec::len).fold(header.len(), usize::max);
        if columns == 0 {
            return;
        }
        self.section(SIZE * LEADING, true);
        let gutter = (WIDTH / columns as f32 * 0.15).min(GUTTER);
        let (regular, bold) = (self.fonts.get(Style::Regular), self.fonts.get(Style::Bold));
        let natural: Vec<f32> = (0..columns)
            .map(|i| {
                let head = header
                    .get(i)
                    .map_or(0.0, |h| natural(bold, &[h.as_str()], SIZE));
                rows.iter()
                    .filter_map(|r| r.get(i))
                    .map(|t| natural(regular, &[t.as_str()], SIZE))
                    .fold(head, f32::max)
            })
            .collect();
        let widths = share(&natural, WIDTH - gutter * (columns as f32 - 1.0));
        let mut xs = Vec::with_capacity(columns);
        let mut x = LEFT;
        for w in &widths {
            xs.push(x);
            x += w + gutter;
        }
        let place = |texts: &[String], style: Style| -> Vec<Cell> {
            let empty = String::new();
            (0..columns)
                .filter_map(|i| Some((i, *xs.get(i)?, *widths.get(i)?)))
                .map(|(i, x, w)| {
                    let align = if i >= 2 { Align::Right } else { Align::Left };
                    self.cell(texts.get(i).unwrap_or(&empty), x, w, align, style)
                })
                .collect()
        };
        let head = place(header, Style::Bold);
        let has_header = header.iter().any(|h| !h.is_empty());
        let head_height =
            SIZE * LEADING * head.iter().map(|c| c.lines.len()).max().unwrap_or(0) as f32;
        // A header taller than a third of a page is set once only.
        let again = has_header && head_height <= (TOP - BOTTOM) / 3.0;
        let rows: Vec<Vec<Cell>> = rows.iter().map(|r| place(r, Style::Regular)).collect();
        if has_header {
            self.ensure(head_height + SIZE * LEADING * 2.0);
            self.repeat(Some(&head));
        }
        for row in &rows {
            self.row(row, again.then_some(head.as_slice()));
        }
    }

    /// The pages, numbered "n / m" when there is more than one.
    fn finish(mut self) -> Vec<Page> {
        self.done.push(self.page);
        let total = self.done.len();
        if total > 1 {
            let font = self.fonts.get(Style::Regular);
            for (n, page) in (1_usize..).zip(self.done.iter_mut()) {
                let text = format!("{n} / {total}");
                let x = (PAGE_WIDTH - font.width(&text, FOOTER_SIZE)) / 2.0;
                page.texts.push(Text {
                    x,
                    y: FOOTER,
                    style: Style::Regular,
                    size: FOOTER_SIZE,
                    text,
                });
            }
        }
        self.done
    }
}
