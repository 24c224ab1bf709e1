//! No import circles: data flows one way (ARCHITECTURE.md, "The shape").
//!
//! Reads `src/**/*.rs` (not `main.rs`, the binary's own crate), follows the
//! paths each module names (`use crate::…`, `crate::x::…`, `super::…`,
//! `self::…`, and paths through a name a `use` brought in) and builds two
//! kinds of graph: one of the top-level modules (`protocol`, `tools`,
//! `image`, `session`, …), and one of the files inside each of
//! [`INNER`]'s directories (`protocol/engine.rs`, `image/locate.rs`, …; the
//! directory's `mod.rs` is a node too, and an item it re-exports with
//! `pub use` counts as the file that defines it). Comments, strings and
//! `#[cfg(test)]` items are left out: a test may reach anywhere. Every
//! strongly connected component is a circle; the test names each cycle and
//! the line that closes each of its edges.
//!
//! The checker is plain Rust (a small tokenizer, no parser crate); its own
//! tests below run on made-up source trees, so a checker that saw nothing
//! could not pass.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::Path;

/// Directories whose files get a graph of their own.
const INNER: &[&str] = &["protocol", "image"];

#[test]
fn no_import_circles_in_the_server() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    read_tree(&src, &src, &mut files);
    let graphs = build_graphs(&files, INNER);
    // A checker that read nothing would find no circles: make sure it saw
    // the house.
    let top = &graphs[0];
    for m in ["protocol", "tools", "image", "session", "transport"] {
        assert!(top.nodes.contains(m), "module {m} not found under {src:?}");
    }
    assert!(
        top.edges
            .contains_key(&("transport".to_string(), "protocol".to_string())),
        "the checker did not see transport use protocol"
    );
    let report = report_cycles(&graphs);
    assert!(report.is_empty(), "import circles in src/:\n{report}");
}

/// Source files by path relative to `src/` (`protocol/engine.rs`).
fn read_tree(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read_tree(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap().to_string_lossy();
            if rel != "main.rs" {
                out.insert(
                    rel.replace('\\', "/"),
                    std::fs::read_to_string(&path).unwrap(),
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Tokens

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// Identifiers and punctuation with their 1-based line; comments, string,
/// character and number literals and lifetimes are dropped.
fn tokenize(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let skip_to = |i: usize, j: usize, line: &mut usize| {
        *line += c[i..j.min(c.len())].iter().filter(|&&x| x == '\n').count();
        j
    };
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let (mut j, mut depth) = (i + 2, 1);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            i = skip_to(i, j, &mut line);
        } else if let Some(j) = raw_string_end(&c, i) {
            i = skip_to(i, j, &mut line);
        } else if ch == '"' || (ch == 'b' && next == Some('"')) {
            let mut j = if ch == 'b' { i + 2 } else { i + 1 };
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            i = skip_to(i, j + 1, &mut line);
        } else if ch == '\'' {
            // A character literal, or a lifetime / label.
            if next == Some('\\') {
                let mut j = i + 2;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == '.') {
                if c[i] == '.' && !c.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                    break;
                }
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let word = word.strip_prefix("r#").map(str::to_string).unwrap_or(word);
            out.push((Tok::Ident(word), line));
        } else if ch == ':' && next == Some(':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// The end (one past the closing quote and hashes) of a raw string
/// starting at `i` (`r"…"`, `r#"…"#`, `br#"…"#`), if one starts there.
fn raw_string_end(c: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') || (i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')) {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&x| x == '#').count();
    j += hashes;
    if c.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < c.len() {
        if c[j] == '"'
            && c[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&x| x == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(c.len())
}

// ---------------------------------------------------------------------------
// Paths a module names

/// One path a module names, made absolute (segments from the crate root).
#[derive(Debug, Clone)]
struct Reference {
    path: Vec<String>,
    line: usize,
    /// Part of a `pub use` (a re-export, the module's facade).
    reexport: bool,
}

/// What one module (a file, or an inline `mod` in it) names.
#[derive(Debug, Default)]
struct ModuleRefs {
    refs: Vec<Reference>,
    /// `pub use` leaves: the name it exports → the absolute path.
    exports: HashMap<String, Vec<String>>,
}

/// Module path of a file: `protocol/engine.rs` → `[protocol, engine]`,
/// `protocol/mod.rs` → `[protocol]`, `lib.rs` → `[]`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// Walks one file's tokens: inline `mod`s get their own module path,
/// `#[cfg(test)]` items are skipped, and every path is resolved against
/// `modules` (every module of the crate) and the names `use` brought in.
struct Walker<'a> {
    toks: &'a [(Tok, usize)],
    modules: &'a BTreeSet<Vec<String>>,
    out: BTreeMap<Vec<String>, ModuleRefs>,
    /// Child modules declared `#[cfg(test)] mod x;`.
    test_files: BTreeSet<Vec<String>>,
}

impl Walker<'_> {
    fn ident(&self, i: usize) -> Option<&str> {
        match self.toks.get(i) {
            Some((Tok::Ident(s), _)) => Some(s),
            _ => None,
        }
    }

    fn is(&self, i: usize, t: Tok) -> bool {
        self.toks.get(i).is_some_and(|(x, _)| *x == t)
    }

    /// The index just past the bracket group opening at `i`.
    fn past_group(&self, i: usize) -> usize {
        let mut depth = 0i32;
        let mut j = i;
        while j < self.toks.len() {
            match self.toks[j].0 {
                Tok::Punct('{' | '(' | '[') => depth += 1,
                Tok::Punct('}' | ')' | ']') => {
                    depth -= 1;
                    if depth == 0 {
                        return j + 1;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        j
    }

    /// Whether `#[cfg(test)]` starts at `i`.
    fn cfg_test_at(&self, i: usize) -> bool {
        let want = [
            Tok::Punct('#'),
            Tok::Punct('['),
            Tok::Ident("cfg".into()),
            Tok::Punct('('),
            Tok::Ident("test".into()),
            Tok::Punct(')'),
            Tok::Punct(']'),
        ];
        want.iter()
            .enumerate()
            .all(|(k, t)| self.is(i + k, t.clone()))
    }

    /// The index just past the item starting at `i` (after its attributes).
    fn past_item(&self, mut i: usize) -> usize {
        while self.is(i, Tok::Punct('#')) {
            i = self.past_group(i + 1);
        }
        let is_use = self.ident(i) == Some("use")
            || (self.ident(i) == Some("pub") && self.ident(i + 1) == Some("use"));
        while i < self.toks.len() {
            match self.toks[i].0 {
                Tok::Punct(';') => return i + 1,
                Tok::Punct('{') if !is_use => return self.past_group(i),
                Tok::Punct('{' | '(' | '[') => i = self.past_group(i),
                _ => i += 1,
            }
        }
        i
    }

    /// Reads tokens `[i, end)` as the body of module `m`.
    fn walk(&mut self, m: &[String], mut i: usize, end: usize) {
        let mut aliases: HashMap<String, Vec<String>> = HashMap::new();
        self.out.entry(m.to_vec()).or_default();
        while i < end {
            if self.cfg_test_at(i) {
                let mut after = self.past_group(i + 1);
                while self.is(after, Tok::Punct('#')) {
                    after = self.past_group(after + 1);
                }
                if self.ident(after) == Some("mod") && self.is(after + 2, Tok::Punct(';')) {
                    if let Some(name) = self.ident(after + 1) {
                        let mut child = m.to_vec();
                        child.push(name.to_string());
                        self.test_files.insert(child);
                    }
                }
                i = self.past_item(after);
                continue;
            }
            match self.ident(i) {
                Some("mod") if self.is(i + 2, Tok::Punct('{')) => {
                    let mut inner = m.to_vec();
                    inner.push(self.ident(i + 1).unwrap_or("?").to_string());
                    let close = self.past_group(i + 2);
                    self.walk(&inner, i + 3, close - 1);
                    i = close;
                    continue;
                }
                Some("use") => {
                    let public = i > 0
                        && (self.ident(i - 1) == Some("pub") || self.is(i - 1, Tok::Punct(')')));
                    let stmt_end = (i..end)
                        .find(|&j| self.is(j, Tok::Punct(';')))
                        .unwrap_or(end);
                    // `use a::b;` and `use a::{b, c as d};`: every leaf is a
                    // name in this module and a reference.
                    let mut leaves = Vec::new();
                    self.use_tree(i + 1, Vec::new(), &mut leaves);
                    for (path, name, line) in leaves {
                        if let Some(abs) = self.resolve(m, &path, &aliases) {
                            if public {
                                self.out
                                    .get_mut(m)
                                    .unwrap()
                                    .exports
                                    .insert(name.clone(), abs.clone());
                            }
                            if name != "self" && name != "*" {
                                aliases.insert(name, abs.clone());
                            }
                            self.push(m, abs, line, public);
                        }
                    }
                    i = stmt_end;
                    continue;
                }
                Some(first) if self.is(i + 1, Tok::Path) && !self.is_path_continuation(i) => {
                    let line = self.toks[i].1;
                    let mut path = vec![first.to_string()];
                    let mut j = i + 1;
                    while self.is(j, Tok::Path) {
                        match self.ident(j + 1) {
                            Some(s) => path.push(s.to_string()),
                            None => break,
                        }
                        j += 2;
                    }
                    if let Some(abs) = self.resolve(m, &path, &aliases) {
                        self.push(m, abs, line, false);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// Whether the identifier at `i` follows a `::` or `.` (the middle of a
    /// path, or a method / field).
    fn is_path_continuation(&self, i: usize) -> bool {
        i > 0 && (self.is(i - 1, Tok::Path) || self.is(i - 1, Tok::Punct('.')))
    }

    /// Collects the leaves of the use tree at `i`: (path, bound name, line).
    /// Returns the index past the tree.
    fn use_tree(
        &self,
        mut i: usize,
        mut prefix: Vec<String>,
        leaves: &mut Vec<(Vec<String>, String, usize)>,
    ) -> usize {
        if self.is(i, Tok::Path) {
            i += 1; // `use ::std::…`
        }
        loop {
            if self.is(i, Tok::Punct('{')) {
                i += 1;
                while !self.is(i, Tok::Punct('}')) && i < self.toks.len() {
                    i = self.use_tree(i, prefix.clone(), leaves);
                    if self.is(i, Tok::Punct(',')) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            if self.is(i, Tok::Punct('*')) {
                leaves.push((prefix, "*".into(), self.toks[i].1));
                return i + 1;
            }
            let Some(seg) = self.ident(i) else {
                return i + 1;
            };
            let line = self.toks[i].1;
            i += 1;
            if self.is(i, Tok::Path) {
                prefix.push(seg.to_string());
                i += 1;
                continue;
            }
            let mut name = seg.to_string();
            if seg != "self" {
                prefix.push(seg.to_string());
            } else if let Some(last) = prefix.last() {
                name = last.clone();
            }
            if self.ident(i) == Some("as") {
                name = self.ident(i + 1).unwrap_or("_").to_string();
                i += 2;
            }
            leaves.push((prefix, name, line));
            return i;
        }
    }

    /// `path` as named in module `m`, from the crate root; `None` for paths
    /// outside this crate (`std::…`, other crates) and for `Self::`.
    fn resolve(
        &self,
        m: &[String],
        path: &[String],
        aliases: &HashMap<String, Vec<String>>,
    ) -> Option<Vec<String>> {
        let first = path.first()?;
        let mut base: Vec<String> = m.to_vec();
        let mut rest = path;
        match first.as_str() {
            "crate" => {
                base.clear();
                rest = &path[1..];
            }
            "self" => rest = &path[1..],
            "super" => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            name => {
                let mut child = m.to_vec();
                child.push(name.to_string());
                if self.modules.contains(&child) {
                    // A child module named by its name alone.
                } else if let Some(abs) = aliases.get(name) {
                    base = abs.clone();
                    rest = &path[1..];
                } else {
                    return None;
                }
            }
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn push(&mut self, m: &[String], path: Vec<String>, line: usize, reexport: bool) {
        if path.is_empty() {
            return;
        }
        self.out.get_mut(m).unwrap().refs.push(Reference {
            path,
            line,
            reexport,
        });
    }
}

// ---------------------------------------------------------------------------
// Graphs

/// A graph of modules: nodes, and each edge with the first place that makes
/// it (`protocol/engine.rs:12 crate::session::Session`).
#[derive(Debug, Default)]
struct Graph {
    name: String,
    nodes: BTreeSet<String>,
    edges: BTreeMap<(String, String), String>,
}

impl Graph {
    fn add(&mut self, from: &str, to: &str, why: impl FnOnce() -> String) {
        if from != to && self.nodes.contains(to) {
            self.edges
                .entry((from.to_string(), to.to_string()))
                .or_insert_with(why);
        }
    }
}

/// The top-level graph first, then one per directory of `inner_dirs` present.
fn build_graphs(files: &BTreeMap<String, String>, inner_dirs: &[&str]) -> Vec<Graph> {
    let modules: BTreeSet<Vec<String>> = files.keys().map(|f| module_of(f)).collect();
    let mut per_module: BTreeMap<Vec<String>, (String, ModuleRefs)> = BTreeMap::new();
    let mut test_files = BTreeSet::new();
    for (file, text) in files {
        let toks = tokenize(text);
        let mut w = Walker {
            toks: &toks,
            modules: &modules,
            out: BTreeMap::new(),
            test_files: BTreeSet::new(),
        };
        w.walk(&module_of(file), 0, toks.len());
        test_files.extend(w.test_files);
        for (m, refs) in w.out {
            per_module.insert(m, (file.clone(), refs));
        }
    }
    per_module.retain(|m, _| !test_files.iter().any(|t| m.starts_with(t)));

    let mut top = Graph {
        name: "top-level modules".into(),
        ..Graph::default()
    };
    top.nodes = modules
        .iter()
        .filter(|m| !test_files.contains(*m))
        .filter_map(|m| m.first().cloned())
        .collect();
    let inner_dirs: Vec<&str> = inner_dirs
        .iter()
        .copied()
        .filter(|d| top.nodes.contains(*d))
        .collect();
    let mut inner: Vec<Graph> = inner_dirs
        .iter()
        .map(|d| Graph {
            name: format!("files in {d}/"),
            nodes: modules
                .iter()
                .filter(|m| m.len() >= 2 && m[0] == *d && !test_files.contains(*m))
                .map(|m| m[1].clone())
                .chain(std::iter::once("mod.rs".to_string()))
                .collect(),
            ..Graph::default()
        })
        .collect();

    for (m, (file, refs)) in &per_module {
        let Some(from_top) = m.first() else { continue };
        for r in &refs.refs {
            let why = || format!("{file}:{} {}", r.line, shown(&r.path));
            top.add(from_top, &r.path[0], why);
            for (d, g) in inner_dirs.iter().zip(inner.iter_mut()) {
                // Naming the directory's module itself is no dependency.
                if from_top.as_str() != *d || r.path[0] != *d || r.path.len() < 2 {
                    continue;
                }
                // A directory's `mod.rs` re-exporting is its facade, not a
                // dependency.
                if m.len() == 1 && r.reexport {
                    continue;
                }
                let from = if m.len() == 1 { "mod.rs" } else { &m[1] };
                let to = inner_node(&per_module, &modules, d, &r.path);
                g.add(from, &to, why);
            }
        }
    }
    let mut graphs = vec![top];
    graphs.append(&mut inner);
    graphs
}

/// The file of directory `d` that `path` (starting with `d`) lands in: a
/// child module, or the item's definer when `mod.rs` re-exports it, else
/// `mod.rs`.
fn inner_node(
    per_module: &BTreeMap<Vec<String>, (String, ModuleRefs)>,
    modules: &BTreeSet<Vec<String>>,
    d: &str,
    path: &[String],
) -> String {
    let Some(second) = path.get(1) else {
        return "mod.rs".into();
    };
    if modules.contains(&vec![d.to_string(), second.clone()]) {
        return second.clone();
    }
    let exported = per_module
        .get(&vec![d.to_string()])
        .and_then(|(_, r)| r.exports.get(second));
    match exported {
        Some(abs) if abs.len() >= 2 && abs[0] == d => abs[1].clone(),
        _ => "mod.rs".into(),
    }
}

fn shown(path: &[String]) -> String {
    format!("crate::{}", path.join("::"))
}

/// Every cycle of every graph, with the line behind each edge; empty when
/// there are none.
fn report_cycles(graphs: &[Graph]) -> String {
    let mut out = String::new();
    for g in graphs {
        let cycles = cycles(g);
        for cycle in &cycles {
            let mut names = cycle.clone();
            names.push(cycle[0].clone());
            out.push_str(&format!("{}: {}\n", g.name, names.join(" → ")));
            for pair in names.windows(2) {
                let why = &g.edges[&(pair[0].clone(), pair[1].clone())];
                out.push_str(&format!("    {} → {}: {why}\n", pair[0], pair[1]));
            }
        }
    }
    out
}

/// For every edge inside a strongly connected component, the shortest
/// cycle through it; each cycle once, starting at its least node.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    let mut succ: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in g.edges.keys() {
        succ.entry(a).or_default().push(b);
    }
    let mut found = BTreeSet::new();
    for (a, b) in g.edges.keys() {
        // Shortest path b → a, then the edge a → b closes it.
        let mut prev: HashMap<&str, &str> = HashMap::new();
        let mut queue = VecDeque::from([b.as_str()]);
        let mut reached = b == a;
        while let Some(n) = queue.pop_front() {
            if n == a {
                reached = true;
                break;
            }
            for &s in succ.get(n).into_iter().flatten() {
                if s != b && !prev.contains_key(s) {
                    prev.insert(s, n);
                    queue.push_back(s);
                }
            }
        }
        if !reached {
            continue;
        }
        let mut cycle = vec![a.to_string()];
        let mut n = a.as_str();
        while n != b {
            n = prev[n];
            cycle.push(n.to_string());
        }
        // `cycle` is a ← … ← b; read forwards: a → b → … → a.
        cycle[1..].reverse();
        let least = (0..cycle.len()).min_by_key(|&k| &cycle[k]).unwrap();
        cycle.rotate_left(least);
        found.insert(cycle);
    }
    found.into_iter().collect()
}

// ---------------------------------------------------------------------------
// The checker's own tests, on made-up source trees.

fn tree(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

#[test]
fn a_circle_between_two_modules_is_named_with_its_lines() {
    let files = tree(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a.rs", "use crate::b::Thing;\n"),
        ("b.rs", "fn f() {\n    crate::a::g();\n}\n"),
        ("c.rs", "use crate::a;\n"),
    ]);
    let report = report_cycles(&build_graphs(&files, &["p"]));
    assert_eq!(
        report,
        "top-level modules: a → b → a\n    a → b: a.rs:1 crate::b::Thing\n    b → a: b.rs:2 crate::a::g\n"
    );
}

#[test]
fn a_longer_cycle_is_named_in_order() {
    let files = tree(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b;"),
        ("b.rs", "use crate::c::X;"),
        ("c.rs", "fn f() -> crate::a::Y { todo!() }"),
    ]);
    let report = report_cycles(&build_graphs(&files, &["p"]));
    assert!(
        report.starts_with("top-level modules: a → b → c → a\n"),
        "{report}"
    );
}

#[test]
fn comments_strings_and_tests_are_not_dependencies() {
    let files = tree(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::X;"),
        (
            "b.rs",
            r##"
            // crate::a::x
            /* crate::a::y /* nested */ crate::a::z */
            /// [`crate::a`]
            const S: &str = "crate::a::q";
            const R: &str = r#"crate::a::" r"#;
            const C: char = '"'; fn l<'a>(x: &'a str) {}
            #[cfg(test)]
            mod tests { use crate::a::T; }
            #[cfg(test)]
            use crate::a::U;
            #[cfg(test)]
            fn helper() { crate::a::v(); }
            "##,
        ),
    ]);
    assert_eq!(report_cycles(&build_graphs(&files, &["p"])), "");
}

#[test]
fn grouped_imports_super_and_aliases_are_followed() {
    let files = tree(&[
        ("lib.rs", "mod p; mod s;"),
        ("p/mod.rs", "mod x; mod y; pub use x::Thing;"),
        ("p/x.rs", "use super::{y::{self, Other}, Thing as T};"),
        ("p/y.rs", "use crate::p::Thing;"),
        ("s.rs", "use crate::{p, x}; fn f() { p::y::g() }"),
    ]);
    let graphs = build_graphs(&files, &["p"]);
    let p = graphs.iter().find(|g| g.name == "files in p/").unwrap();
    assert!(
        p.edges.contains_key(&("x".to_string(), "y".to_string())),
        "{:?}",
        p.edges
    );
    // `crate::p::Thing` is x's, re-exported by mod.rs.
    assert!(
        p.edges.contains_key(&("y".to_string(), "x".to_string())),
        "{:?}",
        p.edges
    );
    assert!(
        !p.edges
            .contains_key(&("mod.rs".to_string(), "x".to_string())),
        "re-export is not a use"
    );
    let report = report_cycles(&graphs);
    assert_eq!(
        report,
        "files in p/: x → y → x\n    x → y: p/x.rs:1 crate::p::y\n    y → x: p/y.rs:1 crate::p::Thing\n"
    );
    assert!(graphs[0]
        .edges
        .contains_key(&("s".to_string(), "p".to_string())));
}

#[test]
fn a_tree_without_circles_passes() {
    let files = tree(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::X; use crate::c;"),
        (
            "b.rs",
            "use crate::c::Y; use std::sync::Arc; use super::b::Z;",
        ),
        (
            "c.rs",
            "pub struct Y; impl Y { fn f(&self) -> Self { Self::new() } }",
        ),
    ]);
    let graphs = build_graphs(&files, &["p"]);
    assert_eq!(graphs[0].edges.len(), 3, "{:?}", graphs[0].edges);
    assert_eq!(report_cycles(&graphs), "");
}
