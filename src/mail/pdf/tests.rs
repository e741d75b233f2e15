//! The letter as a reader gets it: poppler's `pdftotext` and `pdfinfo`
//! (Debian's poppler-utils) read each rendered file back.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::font::Fonts;
use super::layout::{self, LEFT, PAGE_HEIGHT, RIGHT};
use super::{LetterPage, render};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A German claim with the characters a reader must get back.
fn sample() -> LetterPage {
    LetterPage {
        creditor: strings(&[
            "Schröder & Söhne AG",
            "Hauptstraße 5, 10115 Berlin",
            "buchhaltung@schroeder.example",
        ]),
        debtor: strings(&["Müller GmbH", "einkauf@mueller.example"]),
        place_date: "Berlin, 6. Dezember 2026".into(),
        title: "Zahlungsaufforderung: Verzugszinsen und Pauschale".into(),
        intro: strings(&[
            "Sehr geehrte Damen und Herren, trotz Fälligkeit ist die folgende Rechnung unbezahlt. \
             Wir berechnen Verzugszinsen nach § 288 BGB. Zinsen für den Zeitraum ab Fälligkeit \
             stehen in der Tabelle; die Pauschale für Beitreibungskosten entspricht £70.00 bei \
             Rechnungen in Pfund.",
        ]),
        facts: vec![
            ("Rechnungsnummer".into(), "RE-2026-0042".into()),
            ("Betrag".into(), "1.234,56 €".into()),
            ("Fällig am".into(), "1. Oktober 2026".into()),
        ],
        table_header: strings(&["Von", "Bis", "Tage", "Zinssatz", "Zinsen"]),
        table_rows: vec![
            strings(&["02.10.2026", "31.12.2026", "91", "11,27 %", "34,69 €"]),
            strings(&["01.01.2027", "06.12.2027", "340", "11,12 %", "127,86 €"]),
        ],
        totals: vec![
            ("Zinsen".into(), "162,55 €".into()),
            ("Pauschale".into(), "40,00 €".into()),
            ("Zu zahlen".into(), "1.437,11 €".into()),
        ],
        outro: strings(&[
            "Bitte zahlen Sie bis zum 20. Dezember 2026: https://pay.example/i/RE-2026-0042",
            "Mit freundlichen Grüßen",
        ]),
    }
}

/// `pdftotext -layout` and `pdfinfo` of `pdf`.
fn read_back(pdf: &[u8]) -> (String, String) {
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let path: PathBuf = std::env::temp_dir().join(format!("letter-{}-{n}.pdf", std::process::id()));
    std::fs::write(&path, pdf).expect("write the letter");
    let run = |program: &str, args: &[&str]| {
        let out = Command::new(program)
            .args(args)
            .arg(&path)
            .args(if program == "pdftotext" {
                &["-"][..]
            } else {
                &[][..]
            })
            .output()
            .unwrap_or_else(|e| panic!("{program} runs (apt-get install poppler-utils): {e}"));
        assert!(
            out.status.success(),
            "{program}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{program} complains: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let text = run("pdftotext", &["-layout", "-enc", "UTF-8"]);
    let info = run("pdfinfo", &[]);
    let _ = std::fs::remove_file(&path);
    (text, info)
}

fn pages(info: &str) -> usize {
    info.lines()
        .find_map(|l| l.strip_prefix("Pages:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("pdfinfo names the pages")
}

/// pdfinfo's "Page size" in points, rounded to hundredths (poppler prints
/// `%g`: 595.276).
fn page_size(info: &str) -> (f64, f64) {
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("Page size:"))
        .expect("pdfinfo names the page size");
    let mut numbers = line
        .split_whitespace()
        .filter_map(|w| w.parse::<f64>().ok())
        .map(|n| (n * 100.0).round() / 100.0);
    (numbers.next().unwrap_or(0.0), numbers.next().unwrap_or(0.0))
}

#[test]
fn a_letter_is_a4_and_its_text_extracts_with_the_euro_sign_and_accents() {
    let pdf = render(&sample()).expect("renders").bytes;
    let (text, info) = read_back(&pdf);
    for expected in [
        "1.234,56 €",
        "Müller GmbH",
        "Zinsen für den Zeitraum",
        "£70.00",
        "Hauptstraße",
        "Grüßen",
        "Zahlungsaufforderung: Verzugszinsen und Pauschale",
        "127,86 €",
        "1.437,11 €",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    assert_eq!(page_size(&info), (595.28, 841.89), "{info}");
    assert!(info.contains(" pts (A4)"), "{info}");
    assert_eq!(pages(&info), 1, "{info}");
}

#[test]
fn a_typical_letter_embeds_only_a_subset_of_the_font_and_stays_small() {
    let pdf = render(&sample()).expect("renders").bytes;
    // The shared subset of the regular face (about 210 of its 6,000
    // glyphs) and the title's glyphs of the bold one: about 40 KB, where
    // the whole faces would be 1.4 MB.
    assert!(pdf.len() < 45_000, "{} bytes", pdf.len());
    let text = String::from_utf8_lossy(&pdf);
    // Subset fonts are named TAGTAG+Name, and both faces carry a ToUnicode map.
    assert!(text.contains("+DejaVuSans/"), "regular face subset");
    assert!(text.contains("+DejaVuSans-Bold/"), "bold face subset");
    assert_eq!(text.matches("/ToUnicode").count(), 2);
    assert_eq!(text.matches("/FontFile2").count(), 2);
}

#[test]
fn the_same_letter_renders_the_same_bytes() {
    assert_eq!(
        render(&sample()).expect("renders").bytes,
        render(&sample()).expect("renders").bytes
    );
}

#[test]
fn a_letters_shared_opening_encodes_to_the_same_base64_as_the_whole_file() {
    let file = render(&sample()).expect("renders");
    let head = file
        .encoded
        .clone()
        .expect("the sample's opening is shared");
    assert_eq!(head.len % 57, 0, "a whole number of base64 lines");
    assert!(head.len > file.bytes.len() / 2, "the fonts open the file");
    let shared = crate::mail::Attachment {
        filename: "letter.pdf".into(),
        bytes: file.bytes.clone(),
        encoded: Some(head),
    };
    let whole = crate::mail::Attachment {
        encoded: None,
        ..shared.clone()
    };
    let (shared, whole) = (shared.into_body(), whole.into_body());
    assert_eq!(shared.encoding(), whole.encoding());
    assert_eq!(shared.as_ref(), whole.as_ref());
    // A second letter with other figures shares the same opening.
    let mut other = sample();
    other.totals.push(("Total".into(), "9.876,54 €".into()));
    let other = render(&other).expect("renders");
    assert_eq!(other.encoded, file.encoded);
}

#[test]
fn a_character_the_font_lacks_prints_as_a_question_mark() {
    // DejaVu Sans has U+1F600 (😀) but neither U+1F680 (🚀) nor CJK.
    let page = LetterPage {
        intro: strings(&[
            "Lift-off \u{1F680} and 漢字, bell\u{7} and \u{202E}override\u{202C} done",
        ]),
        ..LetterPage::default()
    };
    let (text, _) = read_back(&render(&page).expect("renders").bytes);
    assert!(
        text.contains("Lift-off ? and ??, bell? and override done"),
        "{text}"
    );
    assert!(!text.contains('\u{1F680}') && !text.contains('漢'));
}

#[test]
fn a_long_table_and_a_long_paragraph_continue_on_further_pages_and_all_of_it_extracts() {
    let rows: Vec<Vec<String>> = (0..300)
        .map(|i| {
            vec![
                format!("F{i:03}"),
                format!("T{i:03}"),
                format!("{i}"),
                "8,12 %".into(),
                format!("{i},{:02} €", i % 100),
            ]
        })
        .collect();
    let words: Vec<String> = (0..900).map(|i| format!("wort{i}")).collect();
    let paragraph = words.join(" ");
    assert!(paragraph.chars().count() >= 5_000);
    let page = LetterPage {
        intro: vec![paragraph],
        table_header: strings(&["Von", "Bis", "Tage", "Zinssatz", "Zinsen"]),
        table_rows: rows.clone(),
        ..sample()
    };
    let (text, info) = read_back(&render(&page).expect("renders").bytes);
    assert!(pages(&info) >= 4, "{info}");
    let tokens: std::collections::BTreeSet<&str> = text.split_whitespace().collect();
    for word in &words {
        assert!(tokens.contains(word.as_str()), "{word} missing");
    }
    for row in &rows {
        for cell in &row[..3] {
            assert!(tokens.contains(cell.as_str()), "{cell} missing");
        }
        assert!(text.contains(&row[4]), "{} missing", row[4]);
    }
    // The header is set again on each page the table continues on.
    assert!(text.matches("Zinssatz").count() >= 3, "header repeated");
}

/// Input no letter should have, but any caller might pass.
fn hostile() -> LetterPage {
    let long_word = "x".repeat(5_000);
    let rtl = "שלום עולם مرحبا بالعالم".to_string();
    LetterPage {
        creditor: vec![
            String::new(),
            "\u{0}\u{1b}[31m red \r\n tab\there".into(),
            long_word.clone(),
        ],
        debtor: vec![rtl.clone(), "👨\u{200d}👩\u{200d}👧 ❤\u{fe0f} 🇩🇪".into()],
        place_date: "\n\n\n".into(),
        title: long_word.clone(),
        intro: vec![String::new(), "\u{feff}\u{ad}".into(), "a\nb\n\nc".into()],
        facts: vec![
            (long_word.clone(), long_word.clone()),
            (String::new(), String::new()),
        ],
        table_header: vec![long_word.clone(); 3],
        table_rows: (0..500)
            .map(|i| vec![format!("{i}"); (i % 40) + 1])
            .chain([vec!["y".into(); 1000], vec![long_word.clone(); 3], vec![]])
            .collect(),
        totals: vec![(rtl, long_word.clone()), (long_word, String::new())],
        outro: vec!["\u{10FFFF}\u{E000}\u{FFFD}".into()],
    }
}

#[test]
fn any_input_renders_to_a_readable_file_without_panicking() {
    for page in [LetterPage::default(), hostile()] {
        let pdf = render(&page).expect("renders").bytes;
        let (_, info) = read_back(&pdf);
        assert!(info.contains("(A4)"), "{info}");
    }
}

#[test]
fn no_line_leaves_the_margins_or_the_page() {
    let fonts = Fonts::load().expect("the fonts load");
    for page in [sample(), hostile()] {
        let pages = layout::lay_out(&page, &fonts);
        for (n, laid) in pages.iter().enumerate() {
            for t in &laid.texts {
                let width = fonts.get(t.style).width(&t.text, t.size);
                assert!(
                    t.x >= LEFT - 0.01 && t.x + width <= RIGHT + 0.01,
                    "page {n}: {t:?} is {width} wide"
                );
                assert!(t.y > 0.0 && t.y < PAGE_HEIGHT, "page {n}: {t:?}");
            }
        }
    }
}
