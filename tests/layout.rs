//! The shape of the workspace (issues 12 and 31, docs/architecture.md
//! "Rooms"). For gatewayd's `src/`: rooms on floors, every arrow pointing
//! down a floor. For every crate of the workspace (the members of the root
//! Cargo.toml; each crate its own graph, rooted at its src/lib.rs or
//! src/main.rs, both when a package has the two): no import circle among
//! its files. For every package: no file longer than a reader can hold,
//! 700 lines in gatewayd's `src/`, 800 elsewhere. Test code is excepted
//! from the size rule: files under a package's `tests/` or `benches/`
//! directory and unit-test files named `tests.rs`; another member's
//! directory (bench/conventional inside bench) belongs to that member.
//!
//! An "arrow" from file A to file B is any path in A's code that resolves
//! to B's module: `use crate::a::b`, `use crate::{a, b::c}`, `crate::a::f()`
//! in code, `super::x`, `use super::*` (an arrow to the parent file),
//! `self::x`, and bare paths: `child::f()` or `use child::X` in a file that
//! declares `mod child;`, and `sibling::X` after `use super::*` or
//! `use super::sibling` (a name bound to a module by a `use`, or brought in
//! by a glob, names that module). `mod x;` alone is not an arrow. Comments,
//! string and char literals are skipped; inline modules (`mod tests { .. }`)
//! are the file's own, and their `super` is the file. Paths resolve to the
//! file defining the longest prefix that is a file module (an item re-
//! exported by a `mod.rs` is an arrow to that `mod.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The rooms of gatewayd's `src/` by floor, top first. A room may use rooms
/// on lower floors and its own files; never one on its own floor (two rooms
/// on one floor are independent) nor above.
const FLOORS: &[&[&str]] = &[
    // The binary and the test hooks may reach anything.
    &["main", "fuzzing", "no_alloc"],
    &["node", "registry_cli", "interact_cli", "cert_cli"],
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

/// No file in gatewayd's `src/` longer than this (lines).
const MAX_LINES_SRC: usize = 700;
/// No other non-test file of the workspace longer than this (lines).
const MAX_LINES: usize = 800;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The members of the workspace, from the root Cargo.toml, as directories
/// relative to it ("." for gatewayd).
fn members() -> Vec<String> {
    let toml = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let at = toml.find("members").expect("a [workspace] members list");
    let list = &toml[at..];
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

// ---------------------------------------------------------------------
// Lexing: the code of a file without comments and literals.

/// The code of a file with comments (line, doc, nested block) removed and
/// the contents of string, raw string and char literals emptied (`""`,
/// `''`), so prose and messages that mention a path are not arrows and a
/// `'{'` does not open a block. Lines are kept.
fn code_of(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        let prev = if i > 0 { c[i - 1] } else { ' ' };
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && (at(i + 1) == '"' || at(i + 1) == '#')
            && (!ident(prev) || (prev == 'b' && i >= 2 && !ident(c[i - 2])))
            && {
                let mut k = i + 1;
                while at(k) == '#' {
                    k += 1;
                }
                at(k) == '"'
            }
        {
            // Raw string: r"..", r#".."#, br#".."#.
            let mut k = i + 1;
            let mut hashes = 0;
            while at(k) == '#' {
                hashes += 1;
                k += 1;
            }
            k += 1;
            loop {
                if k >= c.len() {
                    break;
                }
                if c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#') {
                    k += 1 + hashes;
                    break;
                }
                if c[k] == '\n' {
                    out.push('\n');
                }
                k += 1;
            }
            out.push_str("\"\"");
            i = k;
        } else if c[i] == '"' {
            let mut k = i + 1;
            while k < c.len() && c[k] != '"' {
                if c[k] == '\\' {
                    k += 1;
                }
                if at(k) == '\n' {
                    out.push('\n');
                }
                k += 1;
            }
            out.push_str("\"\"");
            i = k + 1;
        } else if c[i] == '\'' && at(i + 1) == '\\' {
            // An escaped char literal: '\n', '\'', '\u{7f}'.
            let mut k = i + 3;
            while k < c.len() && c[k] != '\'' {
                k += 1;
            }
            out.push_str("''");
            i = k + 1;
        } else if c[i] == '\'' && at(i + 2) == '\'' {
            out.push_str("''");
            i += 3;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------------
// Parsing: what a file declares, imports and names.

/// What one file's code holds. Each entry carries its inline-module
/// context (`mod tests { .. }` -> ["tests"]), [] at the file's top.
#[derive(Default, Debug)]
struct Parsed {
    /// `mod name;` declarations: (context, name).
    mods: Vec<(Vec<String>, String)>,
    /// Leaves of `use` trees: (context, path segments, alias). A glob ends
    /// in "*"; `a::{self}` is `a`.
    uses: Vec<(Vec<String>, Vec<String>, Option<String>)>,
    /// Paths in code with at least two segments (`a::b`): (context, segments).
    paths: Vec<(Vec<String>, Vec<String>)>,
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn parse(code: &str) -> Parsed {
    let c: Vec<char> = code.chars().collect();
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    let mut p = Parsed::default();
    let mut depth = 0usize;
    // Open inline modules: (name, depth inside its braces).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let ctx = |inline: &Vec<(String, usize)>| -> Vec<String> {
        inline.iter().map(|(n, _)| n.clone()).collect()
    };
    let skip_ws = |mut k: usize| {
        while at(k).is_whitespace() {
            k += 1;
        }
        k
    };
    let word = |k: usize| -> (String, usize) {
        let mut e = k;
        while is_ident(at(e)) {
            e += 1;
        }
        (c[k..e].iter().collect(), e)
    };
    let mut i = 0;
    while i < c.len() {
        let prev = if i > 0 { c[i - 1] } else { ' ' };
        if c[i] == '{' {
            depth += 1;
            i += 1;
        } else if c[i] == '}' {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
            i += 1;
        } else if (c[i].is_alphabetic() || c[i] == '_') && !is_ident(prev) && prev != ':' {
            let (w, e) = word(i);
            if w == "pub" && at(skip_ws(e)) == '(' {
                // A visibility (`pub(in crate::a)`) names no dependency.
                let close = (e..c.len()).find(|&k| c[k] == ')').unwrap_or(c.len());
                i = close + 1;
            } else if w == "mod" {
                let k = skip_ws(e);
                let (name, e2) = word(k);
                let k2 = skip_ws(e2);
                if !name.is_empty() && at(k2) == ';' {
                    p.mods.push((ctx(&inline), name));
                    i = k2 + 1;
                } else if !name.is_empty() && at(k2) == '{' {
                    depth += 1;
                    inline.push((name, depth));
                    i = k2 + 1;
                } else {
                    i = e;
                }
            } else if w == "use" {
                let end = (e..c.len()).find(|&k| c[k] == ';').unwrap_or(c.len());
                let tree: String = c[e..end].iter().collect();
                let tree = tree.split_whitespace().collect::<Vec<_>>().join(" ");
                let mut leaves = Vec::new();
                expand("", &tree, &mut leaves);
                let cx = ctx(&inline);
                for leaf in leaves {
                    let (path, alias) = match leaf.split_once(" as ") {
                        Some((p, a)) => (p.trim().to_string(), Some(a.trim().to_string())),
                        None => (leaf, None),
                    };
                    let mut segs: Vec<String> = path
                        .trim_start_matches("::")
                        .split("::")
                        .map(str::to_string)
                        .collect();
                    if segs.len() > 1 && segs.last().map(String::as_str) == Some("self") {
                        segs.pop();
                    }
                    p.uses.push((cx.clone(), segs, alias));
                }
                i = end + 1;
            } else {
                // A path: ident (:: ident)*; one ending in `::{`, `::*` or
                // `::<` stops before it.
                let mut segs = vec![w];
                let mut k = e;
                while at(k) == ':'
                    && at(k + 1) == ':'
                    && (at(k + 2).is_alphabetic() || at(k + 2) == '_')
                {
                    let (s, e2) = word(k + 2);
                    segs.push(s);
                    k = e2;
                }
                if segs.len() > 1 {
                    p.paths.push((ctx(&inline), segs));
                }
                i = k;
            }
        } else {
            i += 1;
        }
    }
    p
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e` (an alias
/// stays on its leaf: `e as f`).
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
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

/// Every path the code names, as written (`use` leaves without their
/// alias, then paths in code); the parser's view, for its own tests.
fn paths_in(code: &str) -> Vec<String> {
    let p = parse(code);
    p.uses
        .iter()
        .map(|(_, s, _)| s.join("::"))
        .chain(p.paths.iter().map(|(_, s)| s.join("::")))
        .collect()
}

// ---------------------------------------------------------------------
// A crate: its files by module path, and the arrows among them.

type Module = Vec<String>;

struct Crate {
    /// Module path -> the file defining it ([] is the root file).
    files: BTreeMap<Module, PathBuf>,
    parsed: BTreeMap<Module, Parsed>,
}

impl Crate {
    /// The crate rooted at `root` (a lib.rs or main.rs): every file reached
    /// through `mod name;` declarations.
    fn load(root: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut parsed = BTreeMap::new();
        let mut todo = vec![(Vec::new(), root.to_path_buf())];
        while let Some((m, file)) = todo.pop() {
            let p = parse(&code_of(&std::fs::read_to_string(&file).unwrap()));
            let stem = file.file_stem().unwrap().to_string_lossy().to_string();
            let dir = if matches!(stem.as_str(), "lib" | "main" | "mod") {
                file.parent().unwrap().to_path_buf()
            } else {
                file.parent().unwrap().join(&stem)
            };
            for (cx, name) in &p.mods {
                let mut d = dir.clone();
                for s in cx {
                    d.push(s);
                }
                let child = [d.join(format!("{name}.rs")), d.join(name).join("mod.rs")]
                    .into_iter()
                    .find(|f| f.is_file());
                if let Some(f) = child {
                    let mut cm = m.clone();
                    cm.extend(cx.iter().cloned());
                    cm.push(name.clone());
                    todo.push((cm, f));
                }
            }
            files.insert(m.clone(), file);
            parsed.insert(m, p);
        }
        Crate { files, parsed }
    }

    /// The file module defining the longest prefix of `path`.
    fn file_of(&self, path: &[String]) -> Option<Module> {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| self.files.contains_key(p))
    }

    /// A path as written in module `me` (a file module plus an inline
    /// context) to an absolute module path, or None when it names nothing
    /// of this crate (std, another crate, a local type).
    fn absolute(
        &self,
        me: &[String],
        segs: &[String],
        scope: &BTreeMap<String, Module>,
    ) -> Option<Module> {
        let (first, rest) = segs.split_first()?;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => Some([me, rest].concat()),
            "super" => {
                let mut base = me.to_vec();
                let mut s = segs;
                while s.first().map(String::as_str) == Some("super") {
                    base.pop();
                    s = &s[1..];
                }
                Some([&base[..], s].concat())
            }
            name => scope.get(name).map(|m| [&m[..], rest].concat()),
        }
    }

    /// The names bound to modules of this crate in module `me` (file
    /// `file` + inline context `cx`): its `mod` children, the modules a glob
    /// brings in (the children and bindings of the globbed module), and
    /// `use` leaves naming a module exactly.
    fn scope(
        &self,
        file: &Module,
        cx: &[String],
        seen: &mut BTreeSet<Module>,
    ) -> BTreeMap<String, Module> {
        let me: Module = [&file[..], cx].concat();
        let mut scope = BTreeMap::new();
        if !seen.insert(me.clone()) {
            return scope;
        }
        let Some(p) = self.parsed.get(file) else {
            return scope;
        };
        for (c, name) in &p.mods {
            let m: Module = [&me[..], std::slice::from_ref(name)].concat();
            if c == cx && self.files.contains_key(&m) {
                scope.insert(name.clone(), m);
            }
        }
        for (c, segs, _) in &p.uses {
            if c != cx || segs.last().map(String::as_str) != Some("*") {
                continue;
            }
            if let Some(target) = self.absolute(&me, &segs[..segs.len() - 1], &scope.clone()) {
                if let Some(f) = self.file_of(&target) {
                    let inner = &target[f.len()..];
                    for (k, v) in self.scope(&f, inner, seen) {
                        scope.entry(k).or_insert(v);
                    }
                }
            }
        }
        let base = scope.clone();
        for (c, segs, alias) in &p.uses {
            if c != cx || segs.last().map(String::as_str) == Some("*") {
                continue;
            }
            if let Some(abs) = self.absolute(&me, segs, &base) {
                if self.files.contains_key(&abs) {
                    let name = alias
                        .clone()
                        .unwrap_or_else(|| segs.last().unwrap().clone());
                    scope.insert(name, abs);
                }
            }
        }
        scope
    }

    /// The files module `file`'s code points at (not itself), each with
    /// the first path that points there (for the reports).
    fn arrows(&self, file: &Module) -> BTreeMap<Module, String> {
        let p = &self.parsed[file];
        let mut scopes: BTreeMap<Vec<String>, BTreeMap<String, Module>> = BTreeMap::new();
        let mut out = BTreeMap::new();
        let uses = p.uses.iter().map(|(c, s, _)| (c, s));
        for (cx, segs) in uses.chain(p.paths.iter().map(|(c, s)| (c, s))) {
            let scope = scopes
                .entry(cx.clone())
                .or_insert_with(|| self.scope(file, cx, &mut BTreeSet::new()));
            let me: Module = [&file[..], cx].concat();
            let Some(abs) = self.absolute(&me, segs, scope) else {
                continue;
            };
            if let Some(target) = self.file_of(&abs) {
                if &target != file && !self.imported_from_outside(&target, &abs) {
                    out.entry(target).or_insert_with(|| segs.join("::"));
                }
            }
        }
        out
    }

    /// Whether `abs` names, through file module `target`, an item that
    /// file only imports from another crate (`use gatewayd::delivery;` in a
    /// main.rs, then `crate::delivery::X`): no arrow, the file's own code
    /// is not used.
    fn imported_from_outside(&self, target: &Module, abs: &[String]) -> bool {
        let Some(name) = abs.get(target.len()) else {
            return false;
        };
        let Some(p) = self.parsed.get(target) else {
            return false;
        };
        let own: BTreeSet<&String> = p
            .mods
            .iter()
            .filter(|(c, _)| c.is_empty())
            .map(|(_, n)| n)
            .collect();
        p.uses.iter().any(|(c, segs, alias)| {
            c.is_empty()
                && alias.as_ref().or(segs.last()) == Some(name)
                && !matches!(segs[0].as_str(), "crate" | "self" | "super" | "*")
                && !own.contains(&segs[0])
        })
    }

    fn edges(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        self.files
            .keys()
            .map(|m| (m.clone(), self.arrows(m).into_keys().collect()))
            .collect()
    }

    fn name(&self, m: &Module) -> String {
        let f = &self.files[m];
        f.strip_prefix(workspace())
            .unwrap_or(f)
            .display()
            .to_string()
    }
}

/// The crates of a package (its directory relative to the workspace): the
/// library and the binary, those it has.
fn crates_of(member: &str) -> Vec<Crate> {
    let src = workspace().join(member).join("src");
    ["lib.rs", "main.rs"]
        .iter()
        .map(|r| src.join(r))
        .filter(|r| r.is_file())
        .map(|r| Crate::load(&r))
        .collect()
}

/// Every import circle of a crate: one per strongly connected group of
/// files (Tarjan), each shown as a cycle through it.
fn circles(c: &Crate) -> Vec<String> {
    let edges = c.edges();
    let keys: Vec<&Module> = edges.keys().collect();
    let index_of: BTreeMap<&Module, usize> =
        keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    let succ: Vec<Vec<usize>> = keys
        .iter()
        .map(|k| {
            edges[*k]
                .iter()
                .filter_map(|t| index_of.get(t).copied())
                .collect()
        })
        .collect();
    // Tarjan's strongly connected components.
    struct T<'a> {
        succ: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        groups: Vec<Vec<usize>>,
    }
    fn strong(t: &mut T, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &t.succ[v] {
            match t.index[w] {
                None => {
                    strong(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut g = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                g.push(w);
                if w == v {
                    break;
                }
            }
            if g.len() > 1 {
                t.groups.push(g);
            }
        }
    }
    let n = keys.len();
    let mut t = T {
        succ: &succ,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        groups: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            strong(&mut t, v);
        }
    }
    t.groups
        .iter()
        .map(|g| {
            // A shortest cycle through the group's first file (breadth
            // first inside the group).
            let inside: BTreeSet<usize> = g.iter().copied().collect();
            let start = *g.iter().min().unwrap();
            let mut from: BTreeMap<usize, usize> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            let mut end = None;
            'bfs: while let Some(v) = queue.pop_front() {
                for &w in &succ[v] {
                    if !inside.contains(&w) {
                        continue;
                    }
                    if w == start {
                        end = Some(v);
                        break 'bfs;
                    }
                    if let std::collections::btree_map::Entry::Vacant(e) = from.entry(w) {
                        e.insert(v);
                        queue.push_back(w);
                    }
                }
            }
            let mut path = vec![start];
            let mut v = end.unwrap();
            while v != start {
                path.push(v);
                v = from[&v];
            }
            path.push(start);
            path.reverse();
            let mut files: Vec<String> = g.iter().map(|&v| c.name(keys[v])).collect();
            files.sort();
            let mut shown = c.name(keys[path[0]]);
            for w in path.windows(2) {
                let via = &c.arrows(keys[w[0]])[keys[w[1]]];
                shown += &format!(" -({via})-> {}", c.name(keys[w[1]]));
            }
            format!("{shown} (the circle's files: {})", files.join(", "))
        })
        .collect()
}

// ---------------------------------------------------------------------
// Sizes.

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

/// The non-test .rs files of a package and each one's limit: its `src/`
/// and the rest of its directory (build.rs, examples/), less `tests/`,
/// `benches/`, `tests.rs` files, `target*` and other members' directories.
fn sized_files(member: &str) -> Vec<(PathBuf, usize)> {
    let dir = workspace().join(member);
    let others: BTreeSet<PathBuf> = members()
        .iter()
        .map(|m| workspace().join(m))
        .filter(|m| m != &dir)
        .collect();
    let mut out = Vec::new();
    fn walk(d: &Path, top: bool, others: &BTreeSet<PathBuf>, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                let skip = name.starts_with('.')
                    || name.starts_with("target")
                    || others.contains(&p)
                    || p.join("Cargo.toml").is_file()
                    || (top && matches!(name.as_str(), "tests" | "benches"));
                if !skip {
                    walk(&p, false, others, out);
                }
            } else if p.extension().is_some_and(|x| x == "rs") && name != "tests.rs" {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&dir, true, &others, &mut files);
    let src = workspace().join("src");
    for f in files {
        let limit = if member == "." && f.starts_with(&src) {
            MAX_LINES_SRC
        } else {
            MAX_LINES
        };
        out.push((f, limit));
    }
    out.sort();
    out
}

fn over_the_limit(member: &str) -> Vec<String> {
    sized_files(member)
        .into_iter()
        .filter_map(|(f, limit)| {
            let n = std::fs::read_to_string(&f).unwrap().lines().count();
            (n > limit).then(|| {
                let rel = f.strip_prefix(workspace()).unwrap().display().to_string();
                format!("{rel} ({n} lines, limit {limit})")
            })
        })
        .collect()
}

fn no_circle_in(member: &str) {
    let found: Vec<String> = crates_of(member).iter().flat_map(circles).collect();
    assert!(
        found.is_empty(),
        "import circles among the files of `{member}`:\n  {}",
        found.join("\n  ")
    );
}

fn no_long_file_in(member: &str) {
    let long = over_the_limit(member);
    assert!(
        long.is_empty(),
        "files of `{member}` over the limit:\n  {}",
        long.join("\n  ")
    );
}

// ---------------------------------------------------------------------
// gatewayd's src/: floors.

fn floor_of(room: &str) -> usize {
    FLOORS
        .iter()
        .position(|f| f.contains(&room))
        .unwrap_or_else(|| {
            panic!("room `{room}` is on no floor: add it to FLOORS in tests/layout.rs")
        })
}

#[test]
fn every_arrow_points_down_a_floor() {
    let mut wrong = Vec::new();
    for c in crates_of(".") {
        for (from, tos) in c.edges() {
            let Some(room) = from.first() else { continue };
            for to in tos {
                match to.first() {
                    Some(target) if target == room => {}
                    Some(target) if floor_of(target) > floor_of(room) => {}
                    _ => wrong.push(format!("{} -> {}", c.name(&from), c.name(&to))),
                }
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
    no_circle_in(".");
}

#[test]
fn no_file_in_src_is_over_the_limit() {
    no_long_file_in(".");
}

// ---------------------------------------------------------------------
// Every other member: one module of tests each, so a failure names its
// crate.

macro_rules! members {
    ($($m:ident => $dir:literal),* $(,)?) => {
        /// The members these tests cover (each has its module below).
        const COVERED: &[&str] = &[".", $($dir),*];
        $(
            mod $m {
                #[test]
                fn no_import_circle_among_files() {
                    super::no_circle_in($dir);
                }

                #[test]
                fn no_file_is_over_the_limit() {
                    super::no_long_file_in($dir);
                }
            }
        )*
    };
}

members! {
    proto => "proto",
    net => "net",
    shards => "shards",
    registry => "registry",
    ingest => "ingest",
    ringbuf => "ringbuf",
    loadgen => "loadgen",
    promtext => "promtext",
    bench => "bench",
    bench_conventional => "bench/conventional",
    bench_sendpath => "bench/sendpath",
}

#[test]
fn every_member_of_the_workspace_is_covered() {
    let mut want = members();
    want.sort();
    let mut have: Vec<String> = COVERED.iter().map(|s| s.to_string()).collect();
    have.sort();
    assert_eq!(
        have, want,
        "add the new member to `members!` in tests/layout.rs"
    );
}

// ---------------------------------------------------------------------
// The worker's files as docs/architecture.md names them.

/// docs/architecture.md: "each concern is an `impl Worker` block in its own
/// file (accept, input, ...)": every name there is a file of src/worker/,
/// and every file of src/worker/ holding an `impl Worker` block is named
/// there (`mod.rs` by its own sentence, "`mod.rs` holds `Worker`").
#[test]
fn the_impl_worker_files_of_the_architecture_doc_exist() {
    let doc = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let lead = "each concern is an `impl Worker` block in its own file (";
    let at = doc
        .find(lead)
        .expect("architecture.md names the `impl Worker` files")
        + lead.len();
    let named: BTreeSet<String> = doc[at..at + doc[at..].find(')').unwrap()]
        .split(';')
        .next()
        .unwrap()
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    assert!(doc.contains("`mod.rs` holds `Worker`"));
    let worker = workspace().join("src/worker");
    let file_of = |name: &str| {
        [
            worker.join(format!("{name}.rs")),
            worker.join(name).join("mod.rs"),
        ]
        .into_iter()
        .find(|f| f.is_file())
    };
    let missing: Vec<&String> = named.iter().filter(|n| file_of(n).is_none()).collect();
    assert!(
        missing.is_empty(),
        "named in docs/architecture.md, not in src/worker/: {missing:?}"
    );
    let mut files = Vec::new();
    rust_files(&worker, &mut files);
    let unnamed: Vec<String> = files
        .iter()
        .filter(|f| {
            let code = code_of(&std::fs::read_to_string(f).unwrap());
            code.match_indices("impl Worker")
                .any(|(i, m)| !code[i + m.len()..].starts_with(|c: char| is_ident(c)))
        })
        .map(|f| {
            let rel = f.strip_prefix(&worker).unwrap().with_extension("");
            let rel = rel.to_string_lossy().to_string();
            rel.strip_suffix("/mod").unwrap_or(&rel).to_string()
        })
        .filter(|n| n != "mod" && !named.contains(n))
        .collect();
    assert!(
        unnamed.is_empty(),
        "src/worker files with an `impl Worker` block that docs/architecture.md does not name: {unnamed:?}"
    );
}

// ---------------------------------------------------------------------
// The parser's own tests.

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
            "crate::a::b",
            "crate::c::d",
            "crate::c::e",
            "crate::g::h",
            "super::*"
        ]
    );
}

#[test]
fn the_lexer_skips_block_comments_raw_strings_and_char_literals() {
    let code = code_of(
        "/* crate::a /* nested crate::b */ crate::c */ let s = r#\"crate::d \"q\" {\"#;\nlet c = '{'; let e = '\\''; fn f<'a>(x: &'a str) { crate::g::h() }\nlet m = \"multi\ncrate::i\";",
    );
    assert_eq!(paths_in(&code), ["crate::g::h"]);
    // Lines are kept, braces balance.
    assert_eq!(code.lines().count(), 4);
    assert_eq!(code.matches('{').count(), code.matches('}').count());
}

/// A throwaway crate in a temp dir: (relative path, text) per file.
fn crate_from(files: &[(&str, &str)]) -> (tempfile::TempDir, Crate) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let c = Crate::load(&dir.path().join("lib.rs"));
    (dir, c)
}

fn arrows_of(c: &Crate) -> Vec<String> {
    let mut out = Vec::new();
    for (from, tos) in c.edges() {
        for to in tos {
            let name = |m: &Module| {
                if m.is_empty() {
                    "lib".to_string()
                } else {
                    m.join("::")
                }
            };
            out.push(format!("{} -> {}", name(&from), name(&to)));
        }
    }
    out
}

#[test]
fn the_parser_follows_glob_imports_of_the_parent() {
    let (_d, c) = crate_from(&[
        ("lib.rs", "mod w;"),
        ("w/mod.rs", "mod a;\nmod b;\npub struct W;\n"),
        // `use super::*` is an arrow to the parent file, and brings the
        // siblings into scope: `b::X` is w::b.
        ("w/a.rs", "use super::*;\nfn f() -> b::X { todo!() }\n"),
        (
            "w/b.rs",
            "pub struct X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
    ]);
    // b's inline tests' `super` is b itself: no arrow.
    assert_eq!(arrows_of(&c), ["w::a -> w", "w::a -> w::b"]);
}

#[test]
fn the_parser_follows_bare_paths_to_children_and_named_siblings() {
    let (_d, c) = crate_from(&[
        ("lib.rs", "pub mod w;\npub mod top;\n"),
        // A child by its bare name, in code and in a `use`.
        (
            "w/mod.rs",
            "mod a;\nmod b;\nmod c;\nuse b::Y;\npub fn f() { a::g() }\n",
        ),
        // A sibling named by `use super::sibling` (and by an alias).
        (
            "w/a.rs",
            "use super::c;\nuse super::b as bee;\npub fn g() { c::h(); bee::i() }\n",
        ),
        ("w/b.rs", "pub struct Y;\npub fn i() {}\n"),
        // `self::` and a path through the crate root; a glob of a module
        // brings its children; a local `Mark::Open` names nothing, nor
        // does a visibility (`pub(in crate::w)` is no arrow to w).
        (
            "w/c.rs",
            "use crate::top::*;\npub(in crate::w) fn h() { self::k(); deep::z(); Mark::Open; }\nfn k() {}\n",
        ),
        ("top.rs", "pub mod deep;\n"),
        ("top/deep.rs", "pub fn z() {}\n"),
    ]);
    assert_eq!(
        arrows_of(&c),
        [
            "w -> w::a",
            "w -> w::b",
            "w::a -> w::b",
            "w::a -> w::c",
            "w::c -> top",
            "w::c -> top::deep",
        ]
    );
}

#[test]
fn a_circle_through_a_bare_path_is_found() {
    // mod.rs calls into its child; the child uses what mod.rs defines.
    let (_d, c) = crate_from(&[
        ("lib.rs", "mod w;"),
        (
            "w/mod.rs",
            "mod send;\npub struct Worker;\nfn run() { send::flush() }\n",
        ),
        ("w/send.rs", "use super::Worker;\npub fn flush() {}\n"),
    ]);
    let found = circles(&c);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("w/mod.rs -(send::flush)-> ")
            && found[0].contains("w/send.rs -(super::Worker)-> "),
        "{found:?}"
    );
}
