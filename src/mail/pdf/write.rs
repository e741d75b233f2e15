//! The PDF file of laid-out pages: first each face used (a Type0 font over
//! a CIDFontType2 font with the subset program, deflated, and a ToUnicode
//! map), padded to a whole number of base64 lines; then each page, an A4
//! page object with one content stream (its rules, then its text shown in
//! CIDs); a catalog, and an info dictionary with the title. Objects are
//! numbered in the order they are written and nothing depends on the clock
//! or on hash order: the same pages, the same bytes.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use flate2::Compression;
use flate2::write::ZlibEncoder;
use pdf_writer::types::{CidFontType, FontFlags, SystemInfo, UnicodeCmap};
use pdf_writer::{Chunk, Content, Filter, Finish, Name, Pdf, Rect, Ref, Settings, Str, TextStr};

use super::font::{Fonts, Style, Subset};
use super::layout::{PAGE_HEIGHT, PAGE_WIDTH, Page};
use super::{EncodedHead, PdfError, PdfFile};

/// The rules' width, in points.
const RULE_WIDTH: f32 = 0.6;

/// Hands out object numbers from 1 up.
struct Ids {
    next: i32,
}

impl Ids {
    fn next(&mut self) -> Result<Ref, PdfError> {
        let id = self.next;
        self.next = id.checked_add(1).ok_or(PdfError::TooLong)?;
        // From 1 up and checked: `Ref::new`'s panic (for 0 and below)
        // cannot happen.
        Ok(Ref::new(id))
    }
}

/// A face the letter uses: its resource name, font object and subset.
struct Embedded<'f> {
    style: Style,
    name: Name<'static>,
    font: Ref,
    subset: Subset<'f>,
}

/// The PDF file of `pages`, titled `title`.
///
/// The file opens with its fonts: the header, each face's objects and a
/// pad object, as many bytes as a whole number of base64 lines
/// ([`BASE64_LINE`]). That opening depends only on the subsets, so it is
/// made once per process with its base64 text ([`Head`]) and copied into
/// every letter that uses the same subsets.
pub(super) fn document(pages: &[Page], fonts: &Fonts, title: &str) -> Result<PdfFile, PdfError> {
    let mut ids = Ids { next: 1 };
    let mut embedded = Vec::new();
    for (style, name) in [(Style::Regular, Name(b"F1")), (Style::Bold, Name(b"F2"))] {
        let mut used = pages
            .iter()
            .flat_map(|p| &p.texts)
            .filter(|t| t.style == style)
            .flat_map(|t| t.text.chars())
            .peekable();
        if used.peek().is_some() {
            let face = fonts.get(style);
            // The bold face sets the title alone: the same words in every
            // letter of a language.
            let subset =
                if style == Style::Regular && used.clone().all(|c| face.shared().contains(&c)) {
                    Subset::shared(face)
                } else {
                    Subset::new(face, &used.collect())
                };
            embedded.push(Embedded {
                style,
                name,
                font: ids.next()?,
                subset,
            });
            // The font's four other objects (`write_font`).
            for _ in 0..4 {
                ids.next()?;
            }
        }
    }
    let head = head(&embedded, &mut ids)?;

    let mut pdf = Pdf::with_settings(Settings { pretty: false });
    pdf.extend(&head.chunk);
    let catalog = ids.next()?;
    let tree = ids.next()?;
    let info = ids.next()?;
    pdf.catalog(catalog).pages(tree);
    pdf.document_info(info).title(TextStr(title));

    let mut kids = Vec::with_capacity(pages.len());
    for page in pages {
        let id = ids.next()?;
        let content = ids.next()?;
        kids.push(id);
        let mut writer = pdf.page(id);
        writer
            .media_box(Rect::new(0.0, 0.0, PAGE_WIDTH, PAGE_HEIGHT))
            .parent(tree)
            .contents(content);
        {
            let mut resources = writer.resources();
            let mut names = resources.fonts();
            for e in &embedded {
                names.pair(e.name, e.font);
            }
        }
        writer.finish();
        // Not deflated: a page's operators are a few kilobytes, and
        // setting up a compressor per letter cost more than the bytes it
        // saved on the way to the relay.
        pdf.stream(content, &content_stream(page, &embedded));
    }
    let count = i32::try_from(kids.len()).map_err(|_| PdfError::TooLong)?;
    pdf.pages(tree).kids(kids).count(count);
    let bytes = pdf.finish();
    let encoded = head
        .encoded
        .as_ref()
        .filter(|_| bytes.get(..head.bytes.len()) == Some(head.bytes.as_slice()))
        .map(Arc::clone);
    Ok(PdfFile { bytes, encoded })
}

/// The opening every letter with the same subsets shares: its font
/// objects as a chunk, and the file's first bytes (the header, then that
/// chunk) with their base64 text.
struct Head {
    chunk: Chunk,
    /// The header and the chunk: what `encoded` encodes.
    bytes: Vec<u8>,
    /// None if the opening did not come out a whole number of lines.
    encoded: Option<Arc<EncodedHead>>,
}

/// Bytes of a file per line of base64 text in a message: 57, which
/// encode to 76 characters.
const BASE64_LINE: usize = 57;

/// Opening chunks made this process, by the subsets they embed. At most
/// [`KEPT_SUBSETS`], then started afresh.
type KeptHeads = Mutex<HashMap<Vec<(&'static str, Vec<u16>)>, Arc<Head>>>;
static KEPT_HEADS: OnceLock<KeptHeads> = OnceLock::new();

/// The opening for `embedded`, made once per process; `ids` moves past
/// its pad object.
fn head(embedded: &[Embedded], ids: &mut Ids) -> Result<Arc<Head>, PdfError> {
    let pad = ids.next()?;
    let key: Vec<_> = embedded.iter().map(|e| e.subset.key()).collect();
    let kept = KEPT_HEADS.get_or_init(KeptHeads::default);
    if let Some(head) = kept.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(Arc::clone(head));
    }
    let header = Pdf::with_settings(Settings { pretty: false })
        .as_bytes()
        .to_vec();
    let mut chunk = Chunk::with_settings(Settings { pretty: false });
    for e in embedded {
        write_font(&mut chunk, e)?;
    }
    // The pad object's own bytes, then as many spaces in its string as
    // make the opening a whole number of base64 lines.
    let mut empty = Chunk::with_settings(Settings { pretty: false });
    empty.indirect(pad).primitive(Str(b""));
    let before = header
        .len()
        .saturating_add(chunk.len())
        .saturating_add(empty.len());
    let spaces = BASE64_LINE
        .checked_sub(before.checked_rem(BASE64_LINE).unwrap_or(0))
        .and_then(|n| n.checked_rem(BASE64_LINE))
        .unwrap_or(0);
    chunk.indirect(pad).primitive(Str(&vec![b' '; spaces]));
    let mut bytes = header;
    bytes.extend_from_slice(chunk.as_bytes());
    // Without its text (not whole lines), each letter is encoded whole.
    let mut base64 = String::new();
    let encoded = (bytes.len().is_multiple_of(BASE64_LINE)
        && email_encoding::body::base64::encode(&bytes, &mut base64).is_ok())
    .then(|| {
        Arc::new(EncodedHead {
            len: bytes.len(),
            base64,
        })
    });
    let head = Arc::new(Head {
        chunk,
        bytes,
        encoded,
    });
    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
    if kept.len() >= KEPT_SUBSETS {
        kept.clear();
    }
    kept.insert(key, Arc::clone(&head));
    Ok(head)
}

/// A page's drawing operators: its rules, then its text.
fn content_stream(page: &Page, embedded: &[Embedded]) -> Vec<u8> {
    let mut content = Content::with_settings(Settings { pretty: false });
    if !page.rules.is_empty() {
        content.set_line_width(RULE_WIDTH);
        for rule in &page.rules {
            content.move_to(rule.x1, rule.y).line_to(rule.x2, rule.y);
        }
        content.stroke();
    }
    if !page.texts.is_empty() {
        content.begin_text();
        let mut current = None;
        for text in &page.texts {
            let Some(e) = embedded.iter().find(|e| e.style == text.style) else {
                continue;
            };
            if current != Some((text.style, text.size.to_bits())) {
                content.set_font(e.name, text.size);
                current = Some((text.style, text.size.to_bits()));
            }
            content.set_text_matrix([1.0, 0.0, 0.0, 1.0, text.x, text.y]);
            content.show(Str(&e.subset.encode(&text.text)));
        }
        content.end_text();
    }
    content.finish().into_vec()
}

/// The objects of one face: the Type0 font, its CIDFontType2 font, the
/// font descriptor, the subset program and the ToUnicode map.
/// They take the four numbers after the Type0 font's.
fn write_font(pdf: &mut Chunk, e: &Embedded) -> Result<(), PdfError> {
    let [cid_font, descriptor, program, to_unicode] =
        [1, 2, 3, 4].map(|n| Ref::new(e.font.get().saturating_add(n)));
    let base_name = e.subset.base_name();
    let base = Name(base_name.as_bytes());
    let system_info = SystemInfo {
        registry: Str(b"Adobe"),
        ordering: Str(b"Identity"),
        supplement: 0,
    };

    pdf.type0_font(e.font)
        .base_font(base)
        .encoding_predefined(Name(b"Identity-H"))
        .descendant_font(cid_font)
        .to_unicode(to_unicode);

    let mut cid = pdf.cid_font(cid_font);
    cid.subtype(CidFontType::Type2)
        .base_font(base)
        .system_info(system_info)
        .font_descriptor(descriptor)
        .default_width(0.0)
        .cid_to_gid_map_predefined(Name(b"Identity"));
    cid.widths().consecutive(0, e.subset.widths());
    cid.finish();

    let m = e.subset.metrics();
    let [x1, y1, x2, y2] = m.bbox;
    pdf.font_descriptor(descriptor)
        .name(base)
        .flags(FontFlags::SYMBOLIC)
        .bbox(Rect::new(x1, y1, x2, y2))
        .italic_angle(m.italic_angle)
        .ascent(m.ascent)
        .descent(m.descent)
        .cap_height(m.cap_height)
        .stem_v(m.stem_v)
        .font_file2(program);

    let packed = packed_font(&e.subset, system_info)?;
    pdf.stream(program, &packed.program)
        .filter(Filter::FlateDecode)
        .pair(Name(b"Length1"), packed.length);
    pdf.stream(to_unicode, &packed.to_unicode)
        .filter(Filter::FlateDecode);
    Ok(())
}

/// A subset's font program and ToUnicode map, compressed.
struct Packed {
    program: Vec<u8>,
    /// The program's length before compression.
    length: i32,
    to_unicode: Vec<u8>,
}

/// Subsets made this process, by face and glyphs: making and compressing
/// a program is most of a letter's cost, and most letters share one
/// (`font::shared_chars`). At most [`KEPT_SUBSETS`], then started afresh.
type Kept = Mutex<HashMap<(&'static str, Vec<u16>), Arc<Packed>>>;
static KEPT: OnceLock<Kept> = OnceLock::new();
const KEPT_SUBSETS: usize = 64;

/// `subset`'s packed program and map, made once per process.
fn packed_font(subset: &Subset<'_>, system_info: SystemInfo<'_>) -> Result<Arc<Packed>, PdfError> {
    let key = subset.key();
    let kept = KEPT.get_or_init(Kept::default);
    if let Some(packed) = kept.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(Arc::clone(packed));
    }
    let font_file = subset.program()?;
    let length = i32::try_from(font_file.len()).map_err(|_| PdfError::TooLong)?;
    let mut cmap = UnicodeCmap::new(Name(b"Custom"), system_info);
    for (cid, c) in subset.chars() {
        cmap.pair(cid, c);
    }
    let packed = Arc::new(Packed {
        program: deflate(&font_file)?,
        length,
        to_unicode: deflate(cmap.finish().as_slice())?,
    });
    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
    if kept.len() >= KEPT_SUBSETS {
        kept.clear();
    }
    kept.insert(key, Arc::clone(&packed));
    Ok(packed)
}

/// `data` zlib-compressed (FlateDecode), as small as the default level
/// makes it: the font programs, made once.
fn deflate(data: &[u8]) -> Result<Vec<u8>, PdfError> {
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
    encoder
        .write_all(data)
        .map_err(|e| PdfError::Compress(e.to_string()))?;
    encoder
        .finish()
        .map_err(|e| PdfError::Compress(e.to_string()))
}
