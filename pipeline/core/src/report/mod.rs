//! The run's report for the curator: `report.html` (one self-contained
//! page: the data inline as JSON, drawn and filtered by inline JS, no
//! network) and `report.md` (the same at a glance, for a terminal or a
//! ticket). Both are built from the run's own tables once they are closed,
//! so they show exactly what was staged.

use serde_json::Value;

mod agreement;
mod data;
mod inert;
mod input;
mod markdown;

pub use data::data;
pub use input::{MAX_LISTED, MAX_QUEUE_ITEMS, MAX_RECOVERED, ReportError, ReportInput};
pub use markdown::markdown;

/// The page template; `__TOMLITE_DATA__` is replaced by the data and
/// [`DESK_SLOT`] by [`DESK_JS`].
const TEMPLATE: &str = include_str!("report.html");
/// The curator's desk (corrections, keys, bulk decisions, undo, export):
/// part of the page's script, kept in its own file.
const DESK_JS: &str = include_str!("desk.js");
/// Where the page's script takes [`DESK_JS`].
const DESK_SLOT: &str = "/*__TOMLITE_DESK_JS__*/";

/// The receipt of the staging directory's latest committed run, for the
/// report's comparison with the night before; `None` when there is none or
/// it cannot be read (an older version's receipt is read as it is).
pub fn previous_receipt(
    staging: &tomlite_staging::StagingDir,
) -> Result<Option<Value>, tomlite_staging::Error> {
    Ok(staging
        .latest()?
        .and_then(|id| std::fs::read(staging.runs_dir().join(id).join("receipt.json")).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok()))
}

/// The page: the template with the data inline. Every `<`, `>` and `&`
/// of the data is written as a JSON escape, so no record text can close or
/// comment out the script element it sits in.
pub fn html(data: &Value) -> String {
    const SLOT: &str = "__TOMLITE_DATA__";
    let template = TEMPLATE.replacen(DESK_SLOT, DESK_JS, 1);
    let json = serde_json::to_string(data).unwrap_or_else(|_| "{}".into());
    let at = template.find(SLOT).unwrap_or(template.len());
    let mut out = String::with_capacity(template.len() + json.len() + json.len() / 16);
    out.push_str(&template[..at]);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push_str(template.get(at + SLOT.len()..).unwrap_or(""));
    out
}

#[cfg(test)]
mod tests {
    use super::data::utf16_span;
    use super::inert::{code, md, md_line};
    use super::*;
    use serde_json::json;

    #[test]
    fn record_text_cannot_break_out_of_the_data_script() {
        let text = "a </script><!-- <script>alert(1)</script> & b";
        let page = html(&json!({"texts": [text]}));
        assert!(!page.contains("__TOMLITE_DATA__"));
        let open = r#"<script id="tomlite-data" type="application/json">"#;
        let from = page.find(open).unwrap() + open.len();
        let to = from + page[from..].find("</script>").unwrap();
        let back: Value = serde_json::from_str(&page[from..to]).unwrap();
        assert_eq!(back["texts"][0], text);
        assert!(!page[from..to].contains('<'));
    }

    // report.md passed terminal escapes and Markdown from record data through.
    #[test]
    fn markdown_values_are_inert_in_a_terminal_and_in_markdown() {
        assert_eq!(md("a\u{1b}]52;c;eA==\u{7}b"), "a\\u{1b}\\]52;c;eA==\\u{7}b");
        assert_eq!(md("x\u{9b}2J\u{7f}"), "x\\u{9b}2J\\u{7f}");
        assert_eq!(md("r1\n## Forged"), "r1\\u{a}## Forged");
        assert_eq!(md("ada | 9 |"), "ada \\| 9 \\|");
        assert_eq!(md("a\\|b"), "a\\\\\\|b");
        assert_eq!(md("**x** `y` <b>"), "\\*\\*x\\*\\* \\`y\\` \\<b\\>");
        assert_eq!(md("abc\u{202e}def"), "abc\\u{202e}def");
        assert_eq!(md("key_value_block _x_"), "key_value_block \\_x\\_");
        assert_eq!(md_line("  # Title\r\n- item"), "\\# Title  - item");
        assert_eq!(md_line("- a"), "\\- a");
        assert_eq!(md_line("12. b"), "12\\. b");
        assert_eq!(md_line("Plain text."), "Plain text.");
        assert_eq!(code("r-1"), "`r-1`");
        assert_eq!(code("a`b"), "`` a`b ``");
        assert_eq!(code("a\u{1b}[2Jb"), "`a\\u{1b}[2Jb`");
    }

    // The relabel menu listed every node on every edge card (100k nodes x
    // 10 cards = 1M <option>s): an edge relabels through a search box over
    // one shared, filtered list.
    #[test]
    fn the_desk_script_is_inlined_once_inside_the_page_script() {
        let page = html(&json!({"texts": [], "queue": []}));
        assert!(!page.contains(DESK_SLOT));
        assert_eq!(page.matches("function bulkDecide(").count(), 1);
        let script = page.rfind("<script>").unwrap();
        assert!(page.find("function bulkDecide(").unwrap() > script);
        assert!(!DESK_JS.contains("</script"));
    }

    #[test]
    fn node_relabel_is_one_shared_search_list_not_a_menu_per_card() {
        assert_eq!(TEMPLATE.matches(r#"<datalist id="node-list">"#).count(), 1);
        let card = &TEMPLATE[TEMPLATE.find("function relabelControl").unwrap()..];
        let card = &card[..card.find("\n}\n").unwrap()];
        assert!(card.contains(r#"list="node-list""#), "{card}");
        assert!(
            !card.contains("nodes."),
            "the card iterates the registry: {card}"
        );
        let suggest = &TEMPLATE[TEMPLATE.find("function suggestNodes").unwrap()..];
        assert!(suggest.contains("NODE_SUGGESTIONS"));
    }

    #[test]
    fn quote_offsets_become_utf16_offsets_only_when_verbatim() {
        let t = "🎉 Sam said “hi”.";
        let s = t.find("Sam").unwrap() as u64;
        let e = s + "Sam said".len() as u64;
        // The emoji is 2 UTF-16 units and 4 bytes.
        assert_eq!(
            utf16_span(t, Some(s), Some(e), Some("Sam said")),
            Some((3, 11))
        );
        assert_eq!(utf16_span(t, Some(s + 1), Some(e), Some("Sam said")), None);
        assert_eq!(utf16_span(t, Some(1), Some(3), Some("x")), None);
    }
}
