//! The shape of `src/` (issue 12, docs/architecture.md "Rooms"): rooms on
//! floors, every arrow pointing down a floor, no import circle among files,
//! no file over the size a reader can hold.
//!
//! An "arrow" is any path that names another module: `use crate::a::b`,
//! `use crate::{a, b::c}`, `crate::a::f()` in code, and `super::x`. Comments
//! are skipped. Paths resolve to the file that defines the module.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The rooms by floor, top first. A room may use rooms on lower floors and
/// its own files; never one on its own floor (two rooms on one floor are
/// independent) nor above.
const FLOORS: &[&[&str]] = &[
    // The binary and the test hooks may reach anything.
    &["main", "fuzzing", "no_alloc"],
    &["node", "demo", "registry_cli", "interact_cli", "cert_cli"],
    &["ops"],
    &["portal"],
    &["chat"],
    &["ingest", "link"],
    &["worker"],
    &["api"],
    &["delivery"],
    &["protocol", "egress"],
    &["config", "histogram"],
];

/// No file in src/ longer than this (lines).
const MAX_LINES: usize = 700;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file: src/worker/mod.rs -> ["worker"],
/// src/worker/send.rs -> ["worker", "send"], src/lib.rs -> [].
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The file defining the longest prefix of `path` that is a file module.
fn resolve(path: &[String], files: &BTreeMap<Vec<String>, PathBuf>) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| files.contains_key(p))
}

/// Strips `//` comments (line and doc) and string literals' contents, so
/// prose and messages that mention a path are not arrows.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if !in_str && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' && !(prev == '\'' && chars.get(i + 1) == Some(&'\'')) {
                in_str = !in_str;
                kept.push(c);
            } else if !in_str {
                kept.push(c);
            }
            prev = if prev == '\\' && c == '\\' { ' ' } else { c };
            i += 1;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap()];
        let base = join(prefix, head);
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&base, &inner[start..], out);
    } else if !tree.is_empty() {
        let tree = tree.split(" as ").next().unwrap().trim();
        out.push(join(prefix, tree));
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}::{b}"),
    }
}

/// Every module path the file's code names, as written.
fn paths_in(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    // `use` trees (possibly over several lines).
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        rest = &rest[i + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        let tree: String = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        expand("", &tree, &mut out);
        rest = &rest[end..];
    }
    // Paths in code: crate::a::b and super::a.
    for root in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(root) {
            let at = from + i;
            let before = code[..at].chars().last();
            from = at + root.len();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let tail: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(tail.trim_end_matches(':').to_string());
        }
    }
    out
}

/// The arrows of one file, as target module paths (resolved to files).
fn arrows(file: &Path, files: &BTreeMap<Vec<String>, PathBuf>) -> BTreeSet<Vec<String>> {
    let me = module_of(file);
    let code = code_of(&std::fs::read_to_string(file).unwrap());
    let mut out = BTreeSet::new();
    for p in paths_in(&code) {
        let segs: Vec<String> = p.split("::").map(str::to_string).collect();
        let abs: Vec<String> = match segs.first().map(String::as_str) {
            Some("crate") => segs[1..].to_vec(),
            Some("super") => {
                let mut base = me.clone();
                let mut s = &segs[..];
                while s.first().map(String::as_str) == Some("super") {
                    base.pop();
                    s = &s[1..];
                }
                base.extend_from_slice(s);
                base
            }
            Some("self") => {
                let mut base = me.clone();
                base.extend_from_slice(&segs[1..]);
                base
            }
            _ => continue,
        };
        if let Some(target) = resolve(&abs, files) {
            if target != me && !target.is_empty() {
                out.insert(target);
            }
        }
    }
    out
}

fn floor_of(room: &str) -> usize {
    FLOORS
        .iter()
        .position(|f| f.contains(&room))
        .unwrap_or_else(|| {
            panic!("room `{room}` is on no floor: add it to FLOORS in tests/layout.rs")
        })
}

struct Graph {
    files: BTreeMap<Vec<String>, PathBuf>,
    edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

fn graph() -> Graph {
    let mut list = Vec::new();
    rust_files(&src(), &mut list);
    let files: BTreeMap<Vec<String>, PathBuf> =
        list.iter().map(|f| (module_of(f), f.clone())).collect();
    let edges = files
        .iter()
        .map(|(m, f)| (m.clone(), arrows(f, &files)))
        .collect();
    Graph { files, edges }
}

#[test]
fn every_arrow_points_down_a_floor() {
    let g = graph();
    let mut wrong = Vec::new();
    for (from, tos) in &g.edges {
        let Some(room) = from.first() else { continue };
        for to in tos {
            let target = &to[0];
            if target == room {
                continue;
            }
            if floor_of(target) <= floor_of(room) {
                wrong.push(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "arrows up or across a floor:\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn no_import_circle_among_files() {
    let g = graph();
    // Depth-first search for a back edge; report the circle found.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let mut mark: BTreeMap<&Vec<String>, Mark> = g.files.keys().map(|k| (k, Mark::New)).collect();
    fn visit<'a>(
        n: &'a Vec<String>,
        g: &'a Graph,
        mark: &mut BTreeMap<&'a Vec<String>, Mark>,
        stack: &mut Vec<&'a Vec<String>>,
    ) -> Option<Vec<String>> {
        mark.insert(n, Mark::Open);
        stack.push(n);
        for to in g.edges.get(n).into_iter().flatten() {
            match mark.get(to).copied().unwrap_or(Mark::Done) {
                Mark::Open => {
                    let at = stack.iter().position(|s| *s == to).unwrap();
                    let mut c: Vec<String> = stack[at..].iter().map(|s| s.join("::")).collect();
                    c.push(to.join("::"));
                    return Some(c);
                }
                Mark::New => {
                    if let Some(c) = visit(to, g, mark, stack) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        mark.insert(n, Mark::Done);
        None
    }
    let keys: Vec<&Vec<String>> = g.files.keys().collect();
    for k in keys {
        if mark[k] == Mark::New {
            let mut stack = Vec::new();
            if let Some(c) = visit(k, &g, &mut mark, &mut stack) {
                panic!("import circle: {}", c.join(" -> "));
            }
        }
    }
}

#[test]
fn no_file_in_src_is_over_the_limit() {
    let g = graph();
    let long: Vec<String> = g
        .files
        .values()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}

#[test]
fn the_parser_of_this_test_sees_grouped_and_inline_paths() {
    let code = code_of(
        "use crate::{a::b, c::{d, e as f}};\n// use crate::comment;\nlet x = crate::g::h(\"crate::in_string\");\nuse super::*;",
    );
    let mut p = paths_in(&code);
    p.sort();
    assert_eq!(
        p,
        [
            "crate",
            "crate::a::b",
            "crate::c::d",
            "crate::c::e",
            "crate::g::h",
            "super",
            "super::*"
        ]
    );
}
