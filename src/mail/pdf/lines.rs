//! Text into lines and a width into columns, for the layout: where a
//! paragraph breaks, how wide a column is, how many columns a table has.

use super::font::Font;

/// The most columns a table has.
const COLUMNS: usize = 12;
const COLUMNS_BUT_LAST: usize = COLUMNS - 1;

/// `cells` in at most [`COLUMNS`] columns: the cells past the last one
/// joined into it, so that no column gets too narrow for a word.
pub(super) fn fold(cells: &[String]) -> Vec<String> {
    let mut kept: Vec<String> = cells.iter().take(COLUMNS_BUT_LAST).cloned().collect();
    let rest: Vec<&str> = cells
        .iter()
        .skip(COLUMNS_BUT_LAST)
        .map(String::as_str)
        .collect();
    if !rest.is_empty() {
        kept.push(rest.join(" "));
    }
    kept
}

/// The widest line of `texts` unwrapped, in `font` at `size`.
pub(super) fn natural(font: &Font, texts: &[&str], size: f32) -> f32 {
    texts
        .iter()
        .flat_map(|t| t.split('\n'))
        .map(|t| font.width(t, size))
        .fold(0.0, f32::max)
}

/// Column widths adding up to `total`: each column gets its natural width
/// where all fit (and the rest is shared out equally); otherwise the
/// narrow columns keep theirs and the wide ones share what is left.
pub(super) fn share(natural: &[f32], total: f32) -> Vec<f32> {
    let count = natural.len() as f32;
    let sum: f32 = natural.iter().sum();
    if sum <= total {
        let extra = (total - sum) / count.max(1.0);
        return natural.iter().map(|w| w + extra).collect();
    }
    let mut fixed = vec![false; natural.len()];
    let mut share = total / count.max(1.0);
    loop {
        let (mut left, mut open, mut changed) = (total, 0.0_f32, false);
        for (w, f) in natural.iter().zip(fixed.iter_mut()) {
            if !*f && *w <= share {
                *f = true;
                changed = true;
            }
            if *f {
                left -= w;
            } else {
                open += 1.0;
            }
        }
        share = left / open.max(1.0);
        if !changed {
            break;
        }
    }
    natural
        .iter()
        .zip(&fixed)
        .map(|(w, f)| if *f { *w } else { share })
        .collect()
}

/// `text` as printed, in lines no wider than `width`: broken at each `\n`
/// and at spaces, a word wider than a line at any character; an empty
/// text is one empty line.
pub(super) fn wrap(font: &Font, text: &str, size: f32, width: f32) -> Vec<String> {
    let mut lines = Vec::new();
    let space = font.char_width(' ', size);
    for part in text.split('\n') {
        let printed: String = part.chars().filter_map(|c| font.printable(c)).collect();
        let mut line = String::new();
        let mut line_width = 0.0;
        let before = lines.len();
        for word in printed.split(' ').filter(|w| !w.is_empty()) {
            let word_width = font.width(word, size);
            if line.is_empty() && word_width <= width {
                line.push_str(word);
                line_width = word_width;
                continue;
            }
            if !line.is_empty() && line_width + space + word_width <= width {
                line.push(' ');
                line.push_str(word);
                line_width += space + word_width;
                continue;
            }
            if !line.is_empty() {
                lines.push(std::mem::take(&mut line));
                line_width = 0.0;
            }
            for c in word.chars() {
                let w = font.char_width(c, size);
                if !line.is_empty() && line_width + w > width {
                    lines.push(std::mem::take(&mut line));
                    line_width = 0.0;
                }
                line.push(c);
                line_width += w;
            }
        }
        if !line.is_empty() || lines.len() == before {
            lines.push(line);
        }
    }
    lines
}
