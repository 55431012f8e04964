//! The documents agree with what they cite and with the code:
//!
//! - every figure the runbooks (docs/OPERATIONS.md, "Runbooks") and the alert rules'
//!   comments (deploy/prometheus/alerts.yml) quote is written, character for character, in the
//!   section of docs/PERFORMANCE.md or docs/DEPLOYMENT.md it links to (the convention is
//!   described at the top of the runbooks), and no latency or size is quoted there without
//!   such a link;
//! - every `§N` names a section of docs/INTERFACE.md, and every "section N" of
//!   docs/DEPLOYMENT.md names one of its sections;
//! - gateway.example.toml states the defaults the code applies, and `gatewayd init` writes
//!   them too (except the values it chooses: the secret and the log origin).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's root (this crate lives in `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("reading {relative}: {e}"))
}

/// Runs of whitespace (line breaks and indentation included) as one space, so that a figure
/// wrapped across lines reads as it is written.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` without its HTML comments.
fn without_comments(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<!--") {
        out.push_str(&rest[..start]);
        rest = rest[start..].find("-->").map_or("", |end| &rest[start + end + 3..]);
    }
    out.push_str(rest);
    out
}

/// A Markdown heading: its level (the number of `#`) and its text.
fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.bytes().take_while(|b| *b == b'#').count();
    (level > 0 && line[level..].starts_with(' ')).then(|| (level, line[level..].trim()))
}

/// The anchor GitHub gives a heading: lower case, every character but letters, digits, `-`, `_`
/// and spaces dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .flat_map(char::to_lowercase)
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The Markdown document `text`'s sections by anchor: the text from the heading to the next
/// heading of the same or a higher level (subsections included). A repeated anchor gets `-1`,
/// `-2`, … as on GitHub. Fenced code is not searched for headings.
fn sections(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut fenced = false;
    let mut headings = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && let Some((level, title)) = heading(line) {
            headings.push((i, level, title));
        }
    }
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for (n, &(start, level, title)) in headings.iter().enumerate() {
        let end = headings[n + 1..].iter().find(|(_, l, _)| *l <= level).map_or(lines.len(), |(i, _, _)| *i);
        let base = slug(title);
        let mut anchor = base.clone();
        let mut k = 0;
        while !seen.insert(anchor.clone()) {
            k += 1;
            anchor = format!("{base}-{k}");
        }
        found.push((anchor, lines[start..end].join("\n")));
    }
    found
}

/// A figure quoted with its source: `[figure](document#anchor)`.
#[derive(Debug)]
struct Quote {
    figure: String,
    document: String,
    anchor: String,
}

/// The Markdown links of `text` (whitespace already collapsed): (link text, target).
fn links(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(']') else { break };
        let label = &rest[..close];
        let after = &rest[close + 1..];
        if !label.contains('[')
            && let Some(target) = after.strip_prefix('(')
            && let Some(end) = target.find(')')
        {
            found.push((label.to_owned(), target[..end].to_owned()));
        }
    }
    found
}

/// The quoted figures of `text`: every link whose text starts with a digit. Its target must be
/// `PERFORMANCE.md#…` or `DEPLOYMENT.md#…` (with or without `docs/`).
fn quotes(origin: &str, text: &str) -> Vec<Quote> {
    links(text)
        .into_iter()
        .filter(|(label, _)| label.starts_with(|c: char| c.is_ascii_digit()))
        .map(|(figure, target)| {
            let (document, anchor) = target
                .split_once('#')
                .unwrap_or_else(|| panic!("{origin}: the figure [{figure}]({target}) links to no section"));
            let document = document.strip_prefix("docs/").unwrap_or(document);
            assert!(
                matches!(document, "PERFORMANCE.md" | "DEPLOYMENT.md"),
                "{origin}: the figure [{figure}]({target}) cites {document}, not PERFORMANCE.md or DEPLOYMENT.md"
            );
            Quote { figure, document: document.to_owned(), anchor: anchor.to_owned() }
        })
        .collect()
}

/// docs/OPERATIONS.md from "## Runbooks" on, without its HTML comments, whitespace collapsed.
fn runbooks() -> String {
    let text = read("docs/OPERATIONS.md");
    let start = text.find("\n## Runbooks\n").expect("docs/OPERATIONS.md has a Runbooks section");
    collapse(&without_comments(&text[start..]))
}

/// deploy/prometheus/alerts.yml with the comment markers taken off, whitespace collapsed.
fn alert_rules() -> String {
    let text = read("deploy/prometheus/alerts.yml");
    let lines: Vec<&str> = text.lines().map(|line| line.trim_start().trim_start_matches('#')).collect();
    collapse(&lines.join("\n"))
}

/// Checks each quote against the section it links to; returns how many were checked.
fn check_quotes(origin: &str, quoted: &[Quote]) -> usize {
    for quote in quoted {
        let document = read(&format!("docs/{}", quote.document));
        let sections = sections(&document);
        let Some((_, section)) = sections.iter().find(|(anchor, _)| *anchor == quote.anchor) else {
            let known: Vec<&str> = sections.iter().map(|(a, _)| a.as_str()).collect();
            panic!(
                "{origin}: {}#{} is no section of docs/{} (its anchors: {known:?})",
                quote.document, quote.anchor, quote.document
            );
        };
        assert!(
            collapse(section).contains(&quote.figure),
            "{origin} quotes \"{}\" from {}#{}, which does not record it: change the figure in both places",
            quote.figure,
            quote.document,
            quote.anchor
        );
    }
    quoted.len()
}

#[test]
fn every_figure_the_runbooks_quote_is_recorded_where_it_links() {
    let runbooks = check_quotes("docs/OPERATIONS.md (runbooks)", &quotes("docs/OPERATIONS.md", &runbooks()));
    let rules = check_quotes("deploy/prometheus/alerts.yml", &quotes("deploy/prometheus/alerts.yml", &alert_rules()));
    // The figures of ICNGatewayHighLatency, ICNHighMessageFailureRate and ICNHighMemoryUsage at
    // least: an extraction that finds nothing checks nothing.
    assert!(runbooks >= 5, "only {runbooks} quoted figures found in the runbooks");
    assert!(rules >= 2, "only {rules} quoted figures found in alerts.yml");
}

/// A number followed by a unit of time or size in ms, µs or KB (`12.11 ms`, `154 / 135 ms`,
/// `7.8–8.3 ms`, `6.6 KB`) in `text`, outside the quoted figures' links.
fn unquoted_figures(text: &str) -> Vec<String> {
    let mut bare = text.to_owned();
    for (label, target) in links(text) {
        bare = bare.replace(&format!("[{label}]({target})"), " ");
    }
    let words: Vec<&str> = bare.split(' ').collect();
    let mut found = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let unit = word.trim_end_matches(|c: char| !c.is_alphanumeric());
        let Some((glued, unit)) = ["ms", "µs", "KB"].into_iter().find_map(|u| Some((unit.strip_suffix(u)?, u))) else {
            continue;
        };
        // `50ms`, or the unit after a number: `50 ms`.
        let number = if glued.is_empty() && i > 0 { words[i - 1] } else { glued };
        if number.ends_with(|c: char| c.is_ascii_digit()) {
            found.push(format!("{number} {unit}"));
        }
    }
    found
}

#[test]
fn the_runbooks_quote_no_latency_or_size_without_its_source() {
    for (origin, text) in
        [("docs/OPERATIONS.md (runbooks)", runbooks()), ("deploy/prometheus/alerts.yml", alert_rules())]
    {
        let bare = unquoted_figures(&text);
        assert!(
            bare.is_empty(),
            "{origin} quotes {bare:?} without a link to where it is recorded: write [figure](PERFORMANCE.md#anchor) (docs/OPERATIONS.md, \"Runbooks\")"
        );
    }
    // The check itself finds what it looks for.
    assert_eq!(
        unquoted_figures("p99 is normally about 30 ms, 6.6KB an idle socket, 1–2 µs"),
        ["30 ms", "6.6 KB", "1–2 µs"]
    );
    assert!(unquoted_figures("[12.11 ms](PERFORMANCE.md#payments) and 2 GB").is_empty());
}

/// The sections of docs/INTERFACE.md by number ("10.6") and of docs/DEPLOYMENT.md ("7").
fn numbered(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(heading)
        .filter_map(|(_, title)| {
            let number = title.split(' ').next()?.trim_end_matches('.');
            (!number.is_empty() && number.split('.').all(|part| part.parse::<u32>().is_ok())).then(|| number.to_owned())
        })
        .collect()
}

/// The section numbers cited after `marker` in `text` (`§10.6`, `section 7`), with the text
/// just before each.
fn cited<'t>(text: &'t str, marker: &str) -> Vec<(&'t str, String)> {
    text.match_indices(marker)
        .map(|(at, _)| {
            let number: String =
                text[at + marker.len()..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            let from = text[..at].char_indices().rev().nth(11).map_or(0, |(i, _)| i);
            (&text[from..at], number.trim_end_matches('.').to_owned())
        })
        .filter(|(_, number)| !number.is_empty())
        .collect()
}

#[test]
fn section_numbers_name_sections_that_exist() {
    let interface = numbered(&read("docs/INTERFACE.md"));
    let deployment = numbered(&read("docs/DEPLOYMENT.md"));
    assert!(interface.contains("17") && interface.contains("10.11"), "{interface:?}");
    assert!(deployment.contains("8"), "{deployment:?}");
    let mut files: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| format!("docs/{}", entry.unwrap().file_name().to_string_lossy()))
        .filter(|name| name.ends_with(".md"))
        .collect();
    files.extend(["README.md", "gateway.example.toml", "deploy/prometheus/alerts.yml"].map(String::from));
    let mut checked = 0;
    for file in &files {
        let text = collapse(&read(file));
        // Every `§` of these files cites docs/INTERFACE.md.
        for (_, number) in cited(&text, "§") {
            assert!(interface.contains(&number), "{file} cites §{number}, which docs/INTERFACE.md does not have");
            checked += 1;
        }
        // "DEPLOYMENT.md, section N", and DEPLOYMENT.md's own "section N".
        let markers: &[&str] = if file == "docs/DEPLOYMENT.md" {
            &["section ", "Section "]
        } else {
            &["DEPLOYMENT.md, section ", "DEPLOYMENT.md section ", "DEPLOYMENT.md`, section "]
        };
        for marker in markers {
            for (before, number) in cited(&text, marker) {
                // DEPLOYMENT.md's own citations only: not an RFC's or another document's.
                if file == "docs/DEPLOYMENT.md" && (before.contains("RFC") || before.contains(".md")) {
                    continue;
                }
                assert!(
                    deployment.contains(&number),
                    "{file} cites section {number} of docs/DEPLOYMENT.md, which it does not have"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "only {checked} citations found");
}

/// A configuration file in `dir` holding `text`, resolved as `gatewayd --config` would.
fn resolve(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let settings = gatewayd::config::Settings { config: Some(path), ..Default::default() };
    gatewayd::GatewayConfig::resolve(settings)
        .unwrap_or_else(|e| panic!("{name} does not resolve: {e:#}\n{text}"))
        .summary()
}

/// A secret of the length `gatewayd init` writes (the summary shows only its length).
const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The example's `# key = value` lines that state a default, uncommented. A line states an
/// example instead when the comment above it (since the last blank line or setting) says
/// "for example" or "no default".
fn stated_defaults(example: &str) -> Vec<String> {
    let mut defaults = Vec::new();
    let mut prose = String::new();
    let mut after_setting = false;
    for line in example.lines() {
        let Some(comment) = line.strip_prefix("# ") else {
            prose.clear();
            after_setting = false;
            continue;
        };
        let is_setting = comment
            .split_once(" = ")
            .is_some_and(|(key, _)| !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
        if is_setting {
            let lower = prose.to_lowercase();
            if !lower.contains("for example") && !lower.contains("no default") {
                defaults.push(comment.to_owned());
            }
            after_setting = true;
        } else {
            if after_setting {
                prose.clear();
                after_setting = false;
            }
            prose.push_str(comment);
            prose.push(' ');
        }
    }
    defaults
}

#[test]
fn the_example_configuration_states_the_defaults_of_the_code() {
    let example = read("gateway.example.toml");
    let defaults = stated_defaults(&example);
    let keys: Vec<&str> = defaults.iter().filter_map(|line| line.split(" = ").next()).collect();
    for key in [
        "listen",
        "store",
        "postgres_max_connections",
        "redis_prefix",
        "token_ttl",
        "log_origin",
        "witness_quorum",
        "worker_slice_us",
        "dev",
    ] {
        assert!(keys.contains(&key), "{key} states no default in gateway.example.toml: {keys:?}");
    }
    for key in ["jwt_secret", "redis", "trust_anchor", "workers", "keystore", "witness"] {
        assert!(!keys.contains(&key), "{key} has no fixed default, yet its line is not marked as an example");
    }
    let dir = tempfile::tempdir().unwrap();
    // Redis is set in both, so that its prefix and fallback count (nothing connects to it here).
    let base = format!("jwt_secret = \"{SECRET}\"\nredis = \"redis://127.0.0.1:6379\"\n");
    let code = resolve(dir.path(), "code.toml", &base);
    let stated = resolve(dir.path(), "stated.toml", &format!("{base}{}\n", defaults.join("\n")));
    let differ: Vec<String> = code
        .lines()
        .zip(stated.lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("the code: {a}; gateway.example.toml: {b}"))
        .collect();
    assert!(differ.is_empty(), "gateway.example.toml states defaults the code does not apply: {differ:#?}");
    assert_eq!(code, stated, "gateway.example.toml's defaults resolve to the code's");

    // `gatewayd init` writes the same file with its own secret, store and log origin (and the
    // founder and keystore when given): the rest resolves to the code's defaults.
    gatewayd::init::run_with(dir.path(), None, false, None).unwrap();
    let written = std::fs::read_to_string(dir.path().join("gateway.toml")).unwrap();
    let set: Vec<&str> = written.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty()).collect();
    let origin = set.iter().find(|line| line.starts_with("log_origin = ")).expect("init writes the log origin");
    assert!(set.iter().any(|line| line.starts_with("jwt_secret = \"")), "{set:?}");
    assert!(set.contains(&"store = \"sqlite:gateway.db\""), "{set:?}");
    let code = resolve(dir.path(), "code.toml", &format!("jwt_secret = \"{SECRET}\"\n{origin}\n"));
    assert_eq!(resolve(dir.path(), "gateway.toml", &written), code, "what `gatewayd init` writes:\n{written}");
}
