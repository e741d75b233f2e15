//! The letter's typeface, DejaVu Sans and DejaVu Sans Bold, compiled in
//! from `assets/fonts/` (their licence is `assets/fonts/LICENSE-DejaVu.txt`):
//! which character the letter prints for each one it is given, how wide
//! text is, and the [`Subset`] of glyphs one letter embeds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use subsetter::GlyphRemapper;
use ttf_parser::{Face, GlyphId};

use super::PdfError;

const REGULAR: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
const BOLD: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans-Bold.ttf");

/// What the letter prints for a character the font has no glyph for.
pub(super) const REPLACEMENT: char = '?';

/// The two faces a letter is set in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Style {
    Regular,
    Bold,
}

/// Both faces, parsed.
pub(super) struct Fonts {
    regular: Font,
    bold: Font,
}

/// The faces, parsed once per process.
static LOADED: OnceLock<Result<Fonts, String>> = OnceLock::new();

impl Fonts {
    /// The faces compiled into the binary, parsed on first use.
    pub(super) fn get_or_load() -> Result<&'static Self, PdfError> {
        LOADED
            .get_or_init(|| Self::load().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| PdfError::Font(e.clone()))
    }

    /// Parses the faces compiled into the binary.
    pub(super) fn load() -> Result<Self, PdfError> {
        Ok(Self {
            regular: Font::parse(REGULAR, "DejaVuSans")?,
            bold: Font::parse(BOLD, "DejaVuSans-Bold")?,
        })
    }

    /// The face for `style`.
    pub(super) fn get(&self, style: Style) -> &Font {
        match style {
            Style::Regular => &self.regular,
            Style::Bold => &self.bold,
        }
    }
}

/// One face: its file, parsed, and its PostScript name.
pub(super) struct Font {
    face: Face<'static>,
    data: &'static [u8],
    name: &'static str,
    units_per_em: f32,
    /// The glyph of each character below [`LOOKED_UP`] (0: none), looked
    /// up once: a letter asks for every character several times.
    glyphs: Vec<u16>,
    /// [`shared_chars`] of this face.
    shared: BTreeSet<char>,
    /// Their subset's numbering, made on first use.
    shared_mapping: OnceLock<Arc<Mapping>>,
}

/// Characters below this have their glyph looked up once, at load.
const LOOKED_UP: u32 = 0x3000;

/// A face's metrics for its PDF font descriptor, in thousandths of an em.
pub(super) struct Metrics {
    pub(super) bbox: [f32; 4],
    pub(super) italic_angle: f32,
    pub(super) ascent: f32,
    pub(super) descent: f32,
    pub(super) cap_height: f32,
    pub(super) stem_v: f32,
}

impl Font {
    fn parse(data: &'static [u8], name: &'static str) -> Result<Self, PdfError> {
        let face = Face::parse(data, 0).map_err(|e| PdfError::Font(format!("{name}: {e}")))?;
        let units_per_em = f32::from(face.units_per_em()).max(1.0);
        let glyphs = (0..LOOKED_UP)
            .map(|u| {
                char::from_u32(u)
                    .and_then(|c| face.glyph_index(c))
                    .map_or(0, |g| g.0)
            })
            .collect();
        let mut font = Self {
            face,
            data,
            name,
            units_per_em,
            glyphs,
            shared: BTreeSet::new(),
            shared_mapping: OnceLock::new(),
        };
        font.shared = shared_chars(&font);
        Ok(font)
    }

    /// What the letter prints for `c`: `c` itself where the face has a
    /// glyph for it; a space for any breaking white space (a tab, a line
    /// separator); a no-break space for one the face lacks; nothing for an
    /// invisible bidi or zero-width control; [`REPLACEMENT`] for any other
    /// control character and for every character the face lacks.
    pub(super) fn printable(&self, c: char) -> Option<char> {
        if is_invisible(c) {
            return None;
        }
        if is_no_break_space(c) {
            return Some(if self.glyph(c).is_some() { c } else { '\u{a0}' });
        }
        if c.is_whitespace() {
            return Some(' ');
        }
        if c.is_control() || self.glyph(c).is_none() {
            return Some(REPLACEMENT);
        }
        Some(c)
    }

    /// The width in points of `text` at `size`, as printed (see
    /// [`Font::printable`]).
    pub(super) fn width(&self, text: &str, size: f32) -> f32 {
        text.chars()
            .filter_map(|c| self.printable(c))
            .map(|c| self.advance(c))
            .sum::<f32>()
            * size
    }

    /// The width in points of the printable character `c` at `size`.
    pub(super) fn char_width(&self, c: char, size: f32) -> f32 {
        self.advance(c) * size
    }

    /// The face's metrics for a font descriptor.
    pub(super) fn metrics(&self) -> Metrics {
        let bbox = self.face.global_bounding_box();
        let weight = f32::from(self.face.weight().to_number());
        Metrics {
            bbox: [
                self.to_milli(bbox.x_min),
                self.to_milli(bbox.y_min),
                self.to_milli(bbox.x_max),
                self.to_milli(bbox.y_max),
            ],
            italic_angle: self.face.italic_angle(),
            ascent: self.to_milli(self.face.ascender()),
            descent: self.to_milli(self.face.descender()),
            cap_height: self.to_milli(self.face.capital_height().unwrap_or(self.face.ascender())),
            // The usual estimate from the weight class (as typst makes it).
            stem_v: 10.0 + 0.244 * (weight - 50.0),
        }
    }

    /// The glyph for `c`, if the face has one (`.notdef` is none).
    fn glyph(&self, c: char) -> Option<GlyphId> {
        match usize::try_from(u32::from(c))
            .ok()
            .and_then(|i| self.glyphs.get(i))
        {
            Some(0) => None,
            Some(g) => Some(GlyphId(*g)),
            None => self.face.glyph_index(c).filter(|g| g.0 != 0),
        }
    }

    /// The characters of the subset letters share ([`shared_chars`]).
    pub(super) fn shared(&self) -> &BTreeSet<char> {
        &self.shared
    }

    /// The advance of `c`, in ems.
    fn advance(&self, c: char) -> f32 {
        self.glyph(c).map_or(0.0, |g| self.glyph_advance(g))
    }

    fn glyph_advance(&self, glyph: GlyphId) -> f32 {
        self.face
            .glyph_hor_advance(glyph)
            .map_or(0.0, |a| f32::from(a) / self.units_per_em)
    }

    fn to_milli(&self, units: i16) -> f32 {
        f32::from(units) * 1000.0 / self.units_per_em
    }
}

/// Bidi embeddings, overrides and isolates, zero-width characters, the
/// soft hyphen and variation selectors: invisible, and meaningless without
/// shaping and bidi, so dropped.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{61c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
    )
}

/// The characters of the shared subset of the regular face: printable
/// ASCII, Latin-1, the euro and pound signs, typographic quotes, dashes
/// and the spaces ICU puts in amounts. A letter whose regular text uses
/// only these embeds this one subset, so its font program is made and
/// compressed once per process (`write`), whatever the names and figures.
fn shared_chars(font: &Font) -> BTreeSet<char> {
    let extra = [
        '\u{152}', '\u{153}', '\u{160}', '\u{161}', '\u{178}', '\u{17d}', '\u{17e}', '\u{2007}',
        '\u{2009}', '\u{202f}', '\u{2013}', '\u{2014}', '\u{2018}', '\u{2019}', '\u{201a}',
        '\u{201c}', '\u{201d}', '\u{201e}', '\u{2022}', '\u{2026}', '\u{20ac}',
    ];
    (' '..='~')
        .chain('\u{a0}'..='\u{ff}')
        .chain(extra)
        .filter(|c| font.glyph(*c).is_some())
        .collect()
}

/// Spaces a line must not break at (ICU puts them between an amount and
/// its currency).
fn is_no_break_space(c: char) -> bool {
    matches!(c, '\u{a0}' | '\u{2007}' | '\u{202f}')
}

/// The glyphs one letter uses of one face, numbered as the subset font
/// numbers them: the CIDs its text is shown with (CID = new glyph id).
pub(super) struct Subset<'f> {
    font: &'f Font,
    mapping: Arc<Mapping>,
}

/// A subset's numbering: its glyphs as CIDs, and each CID's character.
pub(super) struct Mapping {
    remapper: GlyphRemapper,
    /// Each CID's character, for the ToUnicode map, in CID order.
    chars: BTreeMap<u16, char>,
}

impl Mapping {
    /// Glyphs are numbered in the face's order, and a glyph two characters
    /// share maps back to the smaller one.
    fn of(font: &Font, used: &BTreeSet<char>) -> Self {
        let mut by_glyph: BTreeMap<u16, char> = BTreeMap::new();
        for &c in used {
            if let Some(glyph) = font.glyph(c) {
                by_glyph.entry(glyph.0).or_insert(c);
            }
        }
        let mut remapper = GlyphRemapper::new();
        let chars = by_glyph
            .into_iter()
            .map(|(glyph, c)| (remapper.remap(glyph), c))
            .collect();
        Self { remapper, chars }
    }
}

impl<'f> Subset<'f> {
    /// The subset of `font` that prints `used` (printable characters, see
    /// [`Font::printable`]). Glyphs are numbered in the face's order, and
    /// a glyph two characters share maps back to the smaller one, so the
    /// same characters give the same subset.
    pub(super) fn new(font: &'f Font, used: &BTreeSet<char>) -> Self {
        Self {
            font,
            mapping: Arc::new(Mapping::of(font, used)),
        }
    }

    /// The subset of `font`'s shared characters ([`Font::shared`]),
    /// numbered once per face.
    pub(super) fn shared(font: &'f Font) -> Self {
        let mapping = font
            .shared_mapping
            .get_or_init(|| Arc::new(Mapping::of(font, &font.shared)));
        Self {
            font,
            mapping: Arc::clone(mapping),
        }
    }

    /// `text` as the 2-byte CIDs a content stream shows (Identity-H); a
    /// character outside the subset shows `.notdef`.
    pub(super) fn encode(&self, text: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len().saturating_mul(2));
        for c in text.chars() {
            let cid = self
                .font
                .glyph(c)
                .and_then(|g| self.mapping.remapper.get(g.0))
                .unwrap_or(0);
            out.extend_from_slice(&cid.to_be_bytes());
        }
        out
    }

    /// The subset font program: a TrueType file with only these glyphs
    /// (and those they are composed of).
    pub(super) fn program(&self) -> Result<Vec<u8>, PdfError> {
        subsetter::subset(self.font.data, 0, &self.mapping.remapper)
            .map_err(|e| PdfError::Subset(format!("{}: {e}", self.font.name)))
    }

    /// The face's name and the glyphs of the subset, in CID order: what
    /// makes its font program.
    pub(super) fn key(&self) -> (&'static str, Vec<u16>) {
        (
            self.font.name,
            self.mapping.remapper.remapped_gids().collect(),
        )
    }

    /// Each CID and the character it prints, in CID order.
    pub(super) fn chars(&self) -> impl Iterator<Item = (u16, char)> + '_ {
        self.mapping.chars.iter().map(|(&cid, &c)| (cid, c))
    }

    /// The advance of each CID from 0 up, in thousandths of an em (to a
    /// tenth: closer than any printer).
    pub(super) fn widths(&self) -> Vec<f32> {
        self.mapping
            .remapper
            .remapped_gids()
            .map(|g| (self.font.glyph_advance(GlyphId(g)) * 10_000.0).round() / 10.0)
            .collect()
    }

    /// The face's metrics.
    pub(super) fn metrics(&self) -> Metrics {
        self.font.metrics()
    }

    /// The subset's font name: a tag of six capitals derived from its
    /// glyphs (the same glyphs, the same tag), `+`, the face's name.
    pub(super) fn base_name(&self) -> String {
        // FNV-1a over the face's name and the glyph ids.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let glyphs = self
            .mapping
            .remapper
            .remapped_gids()
            .flat_map(u16::to_be_bytes);
        for byte in self.font.name.bytes().chain(glyphs) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut tag = String::with_capacity(self.font.name.len().saturating_add(7));
        for _ in 0..6 {
            let letter = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                .get(usize::try_from(hash.checked_rem(26).unwrap_or(0)).unwrap_or(0))
                .copied()
                .unwrap_or(b'A');
            tag.push(char::from(letter));
            hash = hash.checked_div(26).unwrap_or(0);
        }
        tag.push('+');
        tag.push_str(self.font.name);
        tag
    }
}
