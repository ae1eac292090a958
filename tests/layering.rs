//! The crate's layers, checked from its sources: a module may use modules of its own layer or
//! of lower layers, never of a higher one; the modules form no cycle; and inside `api` and
//! `engine`, no two files use each other, directly or around a longer loop.
//!
//! The layers, from the top (see `docs/design.md`):
//!
//! | layer | modules |
//! |---|---|
//! | facade | `lib.rs`, `api` |
//! | engine | `engine` |
//! | query | `query` |
//! | collection state | `collstate` |
//! | catalog | `catalog` |
//! | ingest and indexes | `ingest`, `index` |
//! | files | `segment`, `wal`, `manifest` |
//! | values | `options`, `priority`, `bucket`, `doc`, `sums` |
//! | base | `error`, `clock`, `depth`, `order`, `prefetch`, `vfs`, `codec` |
//!
//! Test code (`#[cfg(test)]` items and the files of test modules) is left out: a unit test may
//! build its fixtures with any part of the crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LAYERS: &[(&str, u8)] = &[
    ("lib", 8),
    ("api", 8),
    ("engine", 7),
    ("query", 6),
    ("collstate", 5),
    ("catalog", 4),
    ("ingest", 3),
    ("index", 3),
    ("segment", 2),
    ("wal", 2),
    ("manifest", 2),
    ("options", 1),
    ("priority", 1),
    ("bucket", 1),
    ("doc", 1),
    ("sums", 1),
    ("schema", 1),
    ("error", 0),
    ("clock", 0),
    ("depth", 0),
    ("order", 0),
    ("prefetch", 0),
    ("vfs", 0),
    ("codec", 0),
];

/// Modules whose files must not use each other in a loop.
const NO_FILE_CYCLES: &[&str] = &["api", "engine"];

/// Names the crate root re-exports, and the module each comes from.
fn root_item(name: &str) -> &'static str {
    match name {
        "Error" | "Result" => "error",
        "bson" => "extern",
        _ => "lib",
    }
}

struct File {
    /// Path below `src/`, with `/` separators.
    rel: String,
    /// Its module path, e.g. `["engine", "ttl"]`; `[]` for `lib.rs`.
    module: Vec<String>,
    /// Code outside test items, with comments removed.
    code: String,
}

fn rank(top: &str) -> u8 {
    LAYERS
        .iter()
        .find(|(m, _)| *m == top)
        .map(|(_, r)| *r)
        .unwrap_or_else(|| panic!("module `{top}` is in no layer: add it to LAYERS"))
}

fn module_of(rel: &str) -> Vec<String> {
    let p = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = p.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// Removes line comments (doc comments included) and the bodies of `#[cfg(test)]` items;
/// returns the code and the names of test-only child modules declared as files.
fn strip(src: &str) -> (String, Vec<String>) {
    let mut out = String::new();
    let mut test_mods = Vec::new();
    let lines: Vec<&str> = src.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            // Skip attributes, then the item: to its `;` or to the brace that closes it.
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim_start().starts_with("#[") {
                j += 1;
            }
            let head = lines.get(j).map_or("", |l| l.trim());
            let decl = head
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                test_mods.push(name.trim().to_string());
                i = j + 1;
                continue;
            }
            let mut depth = 0i32;
            let mut opened = false;
            while j < lines.len() {
                for c in lines[j].chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if (opened && depth <= 0) || (!opened && lines[j].trim_end().ends_with(';')) {
                    break;
                }
                j += 1;
            }
            i = j + 1;
            continue;
        }
        let code = match t.find("//") {
            Some(_) if t.starts_with("//") => "",
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
        i += 1;
    }
    (out, test_mods)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn read_sources() -> Vec<File> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    walk(&src, &mut paths);
    let mut files = Vec::new();
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    for p in paths {
        let rel = p
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with("bin/") {
            continue;
        }
        let module = module_of(&rel);
        let (code, tests) = strip(&std::fs::read_to_string(&p).unwrap());
        for t in tests {
            let mut m = module.clone();
            m.push(t);
            test_only.insert(m);
        }
        files.push(File { rel, module, code });
    }
    files.retain(|f| !test_only.iter().any(|t| f.module.starts_with(t)));
    files
}

/// The module paths a file's code names: `crate::a::b::…` (grouped `use crate::{…}` lists
/// included) and, resolved against the file's module, `super::…`.
fn uses(f: &File) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = f.code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let read_path = |start: usize, base: Vec<String>, out: &mut Vec<Vec<String>>| {
        // Reads `a::b::{c, d::e}` from `start`, pushing base + each full path.
        fn go(s: &[u8], mut i: usize, base: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
            let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
            let mut path = base;
            loop {
                while i < s.len() && s[i].is_ascii_whitespace() {
                    i += 1;
                }
                if i < s.len() && s[i] == b'{' {
                    i += 1;
                    loop {
                        i = go(s, i, path.clone(), out);
                        while i < s.len() && (s[i].is_ascii_whitespace() || s[i] == b',') {
                            i += 1;
                        }
                        if i >= s.len() || s[i] == b'}' {
                            return i + 1;
                        }
                    }
                }
                let st = i;
                while i < s.len() && ident(s[i]) {
                    i += 1;
                }
                if st == i {
                    out.push(path);
                    return i;
                }
                path.push(String::from_utf8_lossy(&s[st..i]).into_owned());
                if s.get(i..i + 2) == Some(b"::") {
                    i += 2;
                } else {
                    out.push(path);
                    return i;
                }
            }
        }
        go(bytes, start, base, out);
    };
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let before_ok = i == 0 || !ident(bytes[i - 1]);
        if before_ok && rest.starts_with(b"crate::") {
            read_path(i + 7, Vec::new(), &mut out);
            i += 7;
        } else if before_ok && rest.starts_with(b"super::") {
            let mut base = f.module.clone();
            // In `a/b.rs` (module a::b), `super` is `a`; in `a/mod.rs` (module a) it is the root.
            let mut j = i;
            while bytes[j..].starts_with(b"super::") {
                base.pop();
                j += 7;
            }
            read_path(j, base, &mut out);
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

fn top(path: &[String]) -> Option<String> {
    let first = path.first()?;
    if first.chars().next().is_some_and(char::is_uppercase) || first == "bson" {
        let m = root_item(first);
        return (m != "extern").then(|| m.to_string());
    }
    Some(first.clone())
}

/// Strongly connected components with more than one node (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit(t: &mut T<'_>, v: &str) {
        t.index.insert(v.to_string(), t.next);
        t.low.insert(v.to_string(), t.next);
        t.next += 1;
        t.stack.push(v.to_string());
        t.on.insert(v.to_string());
        let succ: Vec<String> = t.g.get(v).into_iter().flatten().cloned().collect();
        for w in succ {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let lw = t.low[&w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(&w) {
                let iw = t.index[&w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(&w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_module_uses_a_higher_layer() {
    let mut wrong = Vec::new();
    for f in read_sources() {
        let from = f.module.first().cloned().unwrap_or_else(|| "lib".into());
        for u in uses(&f) {
            let Some(to) = top(&u) else { continue };
            if to != from && rank(&to) > rank(&from) {
                wrong.push(format!("src/{} uses crate::{}", f.rel, u.join("::")));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "lower layers use higher ones:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn modules_form_no_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in read_sources() {
        let from = f.module.first().cloned().unwrap_or_else(|| "lib".into());
        g.entry(from.clone()).or_default();
        for u in uses(&f) {
            if let Some(to) = top(&u) {
                if to != from {
                    g.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    let c = cycles(&g);
    assert!(c.is_empty(), "modules that use each other in a loop: {c:?}");
}

#[test]
fn files_of_the_api_and_the_engine_form_no_cycle() {
    let files = read_sources();
    let by_module: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| (f.module.clone(), f.rel.clone()))
        .collect();
    // The file a path lands in: the longest module prefix that is a file.
    let file_of = |path: &[String]| -> Option<String> {
        (1..=path.len())
            .rev()
            .find_map(|n| by_module.get(&path[..n]).cloned())
    };
    for top_mod in NO_FILE_CYCLES {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for f in files
            .iter()
            .filter(|f| f.module.first().is_some_and(|m| m == top_mod))
        {
            g.entry(f.rel.clone()).or_default();
            for u in uses(f) {
                if u.first().is_none_or(|m| m != top_mod) {
                    continue;
                }
                if let Some(to) = file_of(&u) {
                    if to != f.rel {
                        g.entry(f.rel.clone()).or_default().insert(to);
                    }
                }
            }
        }
        let c = cycles(&g);
        assert!(
            c.is_empty(),
            "files of src/{top_mod} that use each other in a loop: {c:?}"
        );
    }
}

/// The checker itself finds what it must: a use of a higher layer, a grouped use, a `super`
/// path, and nothing inside test code or comments.
#[test]
fn the_checker_reads_paths_as_rustc_does() {
    let src = "use crate::{engine::Engine, query::{plan::Plan, Filter}};\n\
               // crate::api::Database in a comment\n\
               fn f() { super::state::x(); crate::Error::Closed; }\n\
               #[cfg(test)]\nmod tests {\n    use crate::api::Database;\n}\n\
               #[cfg(test)]\nmod more;\n";
    let (code, tests) = strip(src);
    assert_eq!(tests, vec!["more".to_string()]);
    let f = File {
        rel: "engine/ttl.rs".into(),
        module: module_of("engine/ttl.rs"),
        code,
    };
    let got: Vec<String> = uses(&f).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        [
            "engine::Engine",
            "query::plan::Plan",
            "query::Filter",
            "engine::state::x",
            "Error::Closed"
        ]
    );
    assert_eq!(module_of("engine/mod.rs"), ["engine"]);
    assert_eq!(module_of("lib.rs"), Vec::<String>::new());
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
}
