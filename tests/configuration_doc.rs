//! docs/configuration.md against the definitions of `gatewayd run`'s flags
//! (`gatewayd::config::RunArgs`, src/config/flags.rs, read through clap's
//! own introspection), so that neither can drift from the other:
//!
//! 1. every flag has a help text, and every flag but `--config` names the
//!    key it overrides, `[config: section.name]`, last in its help;
//! 2. every flag is on its key's line of the doc's reference block (the
//!    ```toml block: `name = value  # --flag ...` under `[section]`); its
//!    environment variable, if it has one, is in the doc too; a literal
//!    default in the help (`(default V`) is the value that line gives;
//! 3. every `--flag` the doc mentions is a flag of `gatewayd run`, or, on a
//!    line that names another subcommand (`gatewayd registry ...`,
//!    `gatewayd egress ...`, `gatewayd stats ...`, `gatewayd interact ...`),
//!    a flag of that subcommand;
//! 4. the reference block is a valid config file (unknown keys are errors)
//!    whose values are the defaults, but for the example TLS paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use clap::{CommandFactory, Parser, Subcommand};

const DOC: &str = "docs/configuration.md";

/// `gatewayd run`'s flags alone (the binary's CLI takes them both at the
/// top level and after `run`: the same struct).
#[derive(Parser)]
#[command(name = "gatewayd-run")]
struct Run {
    #[command(flatten)]
    run: gatewayd::config::RunArgs,
}

/// The other subcommands, for flags the doc mentions with their command.
#[derive(Parser)]
struct Others {
    #[command(subcommand)]
    command: Other,
}

#[allow(dead_code)] // only introspected
#[derive(Subcommand)]
enum Other {
    Registry(gatewayd::registry_cli::RegistryArgs),
    Egress(gatewayd::egress::server::EgressArgs),
    Stats(gatewayd::ops::stats::StatsArgs),
    Interact(gatewayd::interact_cli::InteractArgs),
}

/// clap's own flags, not the node's.
const BUILT_IN: &[&str] = &["help", "version"];

struct Flag {
    long: String,
    help: String,
    env: Option<String>,
}

fn run_flags() -> Vec<Flag> {
    let mut cmd = Run::command();
    cmd.build();
    cmd.get_arguments()
        .map(|a| Flag {
            long: a
                .get_long()
                .unwrap_or_else(|| panic!("argument {} has no long flag", a.get_id()))
                .to_string(),
            help: a
                .get_long_help()
                .or(a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default(),
            env: a.get_env().map(|e| e.to_string_lossy().into_owned()),
        })
        .collect()
}

/// Every long flag of `cmd` and of its subcommands, by subcommand name.
fn other_flags() -> BTreeMap<String, BTreeSet<String>> {
    fn collect(cmd: &clap::Command, out: &mut BTreeSet<String>) {
        out.extend(
            cmd.get_arguments()
                .filter_map(|a| a.get_long())
                .map(String::from),
        );
        out.extend(BUILT_IN.iter().map(|s| s.to_string()));
        for sub in cmd.get_subcommands() {
            collect(sub, out);
        }
    }
    let cmd = Others::command();
    cmd.get_subcommands()
        .map(|sub| {
            let mut flags = BTreeSet::new();
            collect(sub, &mut flags);
            (sub.get_name().to_string(), flags)
        })
        .collect()
}

/// `[config: KEY]` or `[config: KEY = VALUE]` at the end of a help: the key.
fn config_key(help: &str) -> Option<String> {
    let inner = help.trim_end().strip_suffix(']')?;
    let (_, key) = inner.rsplit_once("[config: ")?;
    Some(key.split(" = ").next().unwrap().trim().to_string())
}

/// `(default V` in a help (a literal default; `(default: ...)` is prose).
fn literal_default(help: &str) -> Option<String> {
    let (_, rest) = help.split_once("(default ")?;
    let v: String = rest
        .chars()
        .take_while(|c| !matches!(c, ' ' | ',' | ';' | ')'))
        .collect();
    Some(v.trim_end_matches(':').to_string())
}

/// One `name = value  # comment` line of the reference block, with the
/// comment lines that continue it.
#[derive(Debug)]
struct Entry {
    value: String,
    comment: String,
    line: usize,
}

fn doc_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {DOC}: {e}"))
}

/// The ```toml block: its text and its first line's number.
fn reference_block(doc: &str) -> (String, usize) {
    let mut lines = doc.lines().enumerate();
    let start = lines
        .find(|(_, l)| l.trim() == "```toml")
        .unwrap_or_else(|| panic!("{DOC}: no ```toml reference block"))
        .0;
    let body: Vec<&str> = doc
        .lines()
        .skip(start + 1)
        .take_while(|l| l.trim() != "```")
        .collect();
    (body.join("\n"), start + 2)
}

/// Where `#` starts a comment in a TOML line (not inside a string).
fn comment_start(line: &str) -> Option<usize> {
    let mut in_str = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => in_str = !in_str,
            '#' if !in_str => return Some(i),
            _ => {}
        }
    }
    None
}

/// (section, name) -> entry; top-level keys have section "".
fn entries(block: &str, first_line: usize) -> BTreeMap<(String, String), Entry> {
    let mut out: BTreeMap<(String, String), Entry> = BTreeMap::new();
    let mut section = String::new();
    let mut last: Option<(String, String)> = None;
    for (i, line) in block.lines().enumerate() {
        let n = first_line + i;
        let (code, comment) = match comment_start(line) {
            Some(at) => (line[..at].trim(), line[at + 1..].trim()),
            None => (line.trim(), ""),
        };
        if code.is_empty() {
            // A comment line continues the entry above it.
            if let Some(e) = last.as_ref().and_then(|k| out.get_mut(k)) {
                e.comment.push(' ');
                e.comment.push_str(comment);
            }
            continue;
        }
        if let Some(s) = code.strip_prefix('[') {
            section = s.trim_end_matches(']').trim().to_string();
            last = None;
            continue;
        }
        let (name, value) = code
            .split_once('=')
            .unwrap_or_else(|| panic!("{DOC}:{n}: not `name = value`: {line:?}"));
        let key = (section.clone(), name.trim().to_string());
        let entry = Entry {
            value: value.trim().trim_matches('"').to_string(),
            comment: comment.to_string(),
            line: n,
        };
        assert!(
            out.insert(key.clone(), entry).is_none(),
            "{DOC}:{n}: {key:?} twice"
        );
        last = Some(key);
    }
    out
}

/// The `--flag` tokens of a text, each with the line (1-based) it is on.
fn mentioned_flags(text: &str) -> Vec<(String, usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let b = line.as_bytes();
        let mut j = 0;
        while let Some(at) = line[j..].find("--").map(|k| k + j) {
            let boundary = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'-');
            let end = at
                + 2
                + line[at + 2..]
                    .bytes()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                    .count();
            let name = line[at + 2..end].trim_end_matches('-');
            if boundary && name.starts_with(|c: char| c.is_ascii_lowercase()) {
                out.push((name.to_string(), i + 1, line.to_string()));
            }
            j = end.max(at + 2);
        }
    }
    out
}

/// True if `token` occurs in `text` as a whole `--flag` (not a prefix of a
/// longer one).
fn mentions(text: &str, flag: &str) -> bool {
    mentioned_flags(text).iter().any(|(f, _, _)| f == flag)
}

#[test]
fn every_run_flag_has_help_that_names_its_key() {
    let flags = run_flags();
    assert!(flags.len() > 50, "only {} flags found", flags.len());
    let mut problems = Vec::new();
    for f in &flags {
        if f.help.trim().is_empty() {
            problems.push(format!("--{}: no help text (a /// doc comment)", f.long));
            continue;
        }
        // --config and --check are ways to run, not settings.
        if BUILT_IN.contains(&f.long.as_str()) || matches!(f.long.as_str(), "config" | "check") {
            continue;
        }
        if config_key(&f.help).is_none() {
            problems.push(format!(
                "--{}: its help does not end with `[config: KEY]`: {:?}",
                f.long, f.help
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_run_flag_is_on_its_keys_line_of_the_doc() {
    let doc = doc_text();
    let (block, first) = reference_block(&doc);
    let entries = entries(&block, first);
    let mut problems = Vec::new();
    for f in run_flags() {
        if BUILT_IN.contains(&f.long.as_str()) {
            continue;
        }
        if !mentions(&doc, &f.long) {
            problems.push(format!("--{}: not in {DOC}", f.long));
        }
        if let Some(env) = &f.env {
            if !doc.contains(env.as_str()) {
                problems.push(format!("--{}: its variable {env} is not in {DOC}", f.long));
            }
        }
        let Some(key) = config_key(&f.help) else {
            continue; // --config; the help test names the others
        };
        let (section, name) = match key.rsplit_once('.') {
            Some((s, n)) => (s.to_string(), n.to_string()),
            None => (String::new(), key.clone()),
        };
        let Some(entry) = entries.get(&(section, name)) else {
            problems.push(format!(
                "--{}: its key {key} is not in the reference block of {DOC}",
                f.long
            ));
            continue;
        };
        if !mentions(&entry.comment, &f.long) {
            problems.push(format!(
                "--{}: {DOC}:{}, the line of {key}, does not name it: {:?}",
                f.long, entry.line, entry.comment
            ));
        }
        if let Some(default) = literal_default(&f.help) {
            if default != entry.value {
                problems.push(format!(
                    "--{}: the help says default {default}, {DOC}:{} says {key} = {}",
                    f.long, entry.line, entry.value
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_flag_the_doc_mentions_exists() {
    let doc = doc_text();
    let run: BTreeSet<String> = run_flags().into_iter().map(|f| f.long).collect();
    let others = other_flags();
    let mut problems = Vec::new();
    let mut seen = 0;
    for (flag, n, line) in mentioned_flags(&doc) {
        seen += 1;
        if run.contains(&flag) {
            continue;
        }
        // On a line that names another subcommand, that one's flags too.
        let theirs = others
            .iter()
            .filter(|(sub, _)| line.contains(&format!("gatewayd {sub}")))
            .any(|(_, flags)| flags.contains(&flag));
        if !theirs {
            problems.push(format!(
                "{DOC}:{n}: --{flag} is not a flag of `gatewayd run` (nor of a subcommand the line names)"
            ));
        }
    }
    assert!(seen > 50, "{DOC}: only {seen} flags mentioned");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_reference_block_is_a_config_of_the_defaults() {
    let doc = doc_text();
    let (block, first) = reference_block(&doc);
    let mut cfg: gatewayd::config::Config = toml::from_str(&block)
        .unwrap_or_else(|e| panic!("{DOC}, the block from line {first}: {e}"));
    assert!(cfg.tls.cert.is_some() && cfg.tls.key.is_some());
    let e = &mut cfg.events;
    assert!(e.kafka_tls_ca.is_some() && e.kafka_tls_cert.is_some() && e.kafka_tls_key.is_some());
    // The example paths are the one non-default.
    cfg.tls = Default::default();
    (e.kafka_tls_ca, e.kafka_tls_cert, e.kafka_tls_key) = (None, None, None);
    let (got, want) = (
        format!("{cfg:#?}"),
        format!("{:#?}", gatewayd::config::Config::default()),
    );
    let diff: Vec<String> = got
        .lines()
        .zip(want.lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("doc: {} / default: {}", a.trim(), b.trim()))
        .collect();
    assert!(
        diff.is_empty() && got.lines().count() == want.lines().count(),
        "{DOC}'s reference block is not the defaults:\n{}",
        diff.join("\n")
    );
}

#[test]
fn the_checks_catch_what_they_should() {
    assert_eq!(
        config_key("Sessions (default 25000) [config: limits.max_sessions_per_worker]").as_deref(),
        Some("limits.max_sessions_per_worker")
    );
    assert_eq!(
        config_key("No demo [config: demo.enabled = false]").as_deref(),
        Some("demo.enabled")
    );
    assert_eq!(config_key("Sessions one worker may hold"), None);
    assert_eq!(
        literal_default("Workers (default 0: one per core)").as_deref(),
        Some("0")
    );
    assert_eq!(
        literal_default("Arena (default 67108864, 64 MiB)").as_deref(),
        Some("67108864")
    );
    assert_eq!(literal_default("File (default: <data dir>/x)"), None);
    let found: Vec<String> =
        mentioned_flags("a --rest-redis-url b `--no-demo`; x--y, -- z, --help")
            .into_iter()
            .map(|(f, _, _)| f)
            .collect();
    assert_eq!(found, ["rest-redis-url", "no-demo", "help"]);
    assert!(!mentions("--rest-redis-url-file", "rest-redis-url"));
    let e = entries(
        "top = 1  # --top\n[limits]\nx = \"a#b\"  # --x\n                # more --y\n",
        1,
    );
    let x = &e[&("limits".to_string(), "x".to_string())];
    assert_eq!(x.value, "a#b");
    assert!(mentions(&x.comment, "x") && mentions(&x.comment, "y"));
    assert_eq!(e[&(String::new(), "top".to_string())].line, 1);
}
