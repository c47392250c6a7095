//! Record-derived text made inert for a terminal and Markdown: the escapes
//! `report.md` and its sections share.

use std::fmt::Write as _;

use serde_json::Value;

/// A JSON array's items (none when absent).
pub(super) fn items(value: &Value) -> &[Value] {
    value.as_array().map_or(&[][..], Vec::as_slice)
}

/// Whether a character must not reach a terminal as itself: every control
/// character (C0 with ESC and the line breaks, DEL, C1 with the 8-bit CSI
/// and OSC), the line and paragraph separators, and the bidirectional
/// marks and overrides that make a line read other than it is.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Record-derived text made inert: each [`unsafe_char`] is written as a
/// visible `\u{..}` escape, so `cat report.md` cannot clear the screen, set
/// the window title or write the clipboard, and no value starts a line.
/// With `breaks_as_spaces`, line breaks and tabs become spaces instead.
/// With `markdown`, each character that Markdown reads as markup
/// (emphasis, code, links, HTML, a table's `|`, the backslash itself) is
/// escaped with a backslash.
pub(super) fn visible(text: &str, breaks_as_spaces: bool, markdown: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev = ' ';
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if breaks_as_spaces && matches!(c, '\n' | '\r' | '\t' | '\u{2028}' | '\u{2029}') {
            out.push(' ');
        } else if unsafe_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            // An `_` inside a word (`key_value_block`) is no emphasis.
            let intraword = c == '_'
                && prev.is_alphanumeric()
                && chars.peek().is_some_and(|next| next.is_alphanumeric());
            if markdown
                && !intraword
                && matches!(
                    c,
                    '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '&'
                )
            {
                out.push('\\');
            }
            out.push(c);
        }
        prev = c;
    }
    out
}

/// Record-derived text in running Markdown or a table cell.
pub(super) fn md(text: &str) -> String {
    visible(text, false, true)
}

/// Record-derived text as a whole line's content (after `> `): line breaks
/// as spaces, leading blanks dropped, markup escaped, and a construct that
/// only counts at the start of a line (`#` heading, `-`/`+` list, `=`
/// underline, `1.` numbered list) escaped.
pub(super) fn md_line(text: &str) -> String {
    let mut out = visible(text.trim_start(), true, true);
    let digits = out.chars().take_while(char::is_ascii_digit).count();
    if out.starts_with(['#', '-', '+', '=', '~']) {
        out.insert(0, '\\');
    } else if digits > 0 && out[digits..].starts_with(['.', ')']) {
        out.insert(digits, '\\');
    }
    out
}

/// Record-derived text as a code span: [`visible`], fenced with one more
/// backtick than the longest run of backticks inside it.
pub(super) fn code(text: &str) -> String {
    let inert = visible(text, false, false);
    let mut longest = 0;
    let mut run = 0;
    for c in inert.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if longest > 0 { " " } else { "" };
    format!("{fence}{pad}{inert}{pad}{fence}")
}
