//! The corpus of the parenthesis-repair benchmarks: the multi-line
//! top-level forms of the Lisp libraries Debian ships, each broken three
//! ways as models break them. Shared by `paren_repair` (the repair itself,
//! beside parinfer) and cl-mcp-server's `paren_tools` (the same cases
//! through the tools a client calls).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use lisp_syntax::cst::{parse, NodeKind};

pub const SOURCES: &str = "/usr/share/common-lisp/source";

/// The libraries the repair's rules were tuned on (the first seven are
/// installed by `scripts/setup.sh`, the others by Debian packages of the
/// same names). Every other library is held out: its numbers show how the
/// rules do on code they were not fitted to. `scripts/paren-corpus.sh`
/// unpacks 37 of them (cl-closer-mop, cl-ironclad, cl-drakma, ...) under
/// the target directory.
pub const TUNING: &[&str] = &[
    "alexandria",
    "cl-ppcre",
    "yason",
    "usocket",
    "bordeaux-threads",
    "hunchentoot",
    "fiveam",
    "asdf-flv",
    "babel",
    "chunga",
    "cl+ssl",
    "cl-base64",
    "cl-cffi",
    "cl-fad",
    "cl-flexi-streams",
    "cl-interpol",
    "cl-split-sequence",
    "cl-trivial-gray-streams",
    "cl-unicode",
    "fiasco",
    "iterate",
    "kmrcl",
    "md5",
    "named-readtables",
    "ptester",
    "rfc2388",
    "rt",
    "slime",
    "trivial-backtrace",
    "trivial-features",
    "trivial-garbage",
    "xlunit",
    "anaphora",
    "cl-containers",
    "cl-log",
    "cl-utilities",
    "closer-mop",
    "contextl",
    "cxml",
    "dynamic-classes",
    "global-vars",
    "ieee-floats",
    "local-time",
    "lw-compat",
    "metatilities-base",
    "parse-number",
    "puri",
    "regex",
    "trivial-utf-8",
    "uuid",
    "zpb-ttf",
];

pub const WAYS: [&str; 3] = [
    "last ) dropped",
    "inner ) dropped at a line end",
    "one ) too many at the end",
];

fn lisp_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            lisp_files(&p, out);
        } else if p
            .extension()
            .is_some_and(|e| e == "lisp" || e == "asd" || e == "cl")
        {
            out.push(p);
        }
    }
}

/// The top-level multi-line lists starting at column 0 of `text`.
fn forms(text: &str) -> Vec<String> {
    let p = parse(text);
    if !p.is_ok() {
        return Vec::new();
    }
    p.top_level_forms()
        .filter(|f| f.kind == NodeKind::List)
        .filter(|f| f.span.start == 0 || text.as_bytes()[f.span.start - 1] == b'\n')
        .map(|f| f.text(text).to_string())
        .filter(|s| s.contains('\n'))
        .collect()
}

/// Offsets of the `)` that end a line inside `form` (not its last line),
/// before any trailing comment.
fn line_end_closers(form: &str) -> Vec<usize> {
    let p = parse(form);
    let mut out = Vec::new();
    let mut last_code: Option<(usize, bool)> = None;
    for leaf in p.leaves() {
        match leaf.kind {
            NodeKind::Whitespace if leaf.text(form).contains('\n') => {
                if let Some((at, true)) = last_code.take() {
                    out.push(at);
                }
            }
            NodeKind::Whitespace | NodeKind::LineComment | NodeKind::BlockComment => {}
            _ => {
                let is_close = leaf.kind == NodeKind::Punct && leaf.text(form) == ")";
                last_code = Some((leaf.span.start, is_close));
            }
        }
    }
    out
}

fn broken(form: &str, way: usize) -> Option<String> {
    match way {
        0 => Some(form[..form.len() - 1].to_string()),
        1 => {
            let c = line_end_closers(form);
            let at = *c.get(c.len() / 2)?;
            Some(format!("{}{}", &form[..at], &form[at + 1..]))
        }
        _ => Some(format!("{form})")),
    }
}

/// The texts of the leaves that are not whitespace or comments: equal when
/// two texts read as the same forms.
pub fn tokens(text: &str) -> Vec<String> {
    parse(text)
        .leaves()
        .filter(|l| {
            !matches!(
                l.kind,
                NodeKind::Whitespace | NodeKind::LineComment | NodeKind::BlockComment
            )
        })
        .map(|l| l.text(text).to_string())
        .collect()
}

/// The target directory (where `scripts/paren-corpus.sh` unpacks the
/// held-out libraries and installs parinfer).
pub fn target_dir() -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

/// The held-out libraries: those under [`SOURCES`] other than the tuning
/// ones, and those `scripts/paren-corpus.sh` unpacked under the target
/// directory.
pub fn held_out_libraries() -> Vec<PathBuf> {
    let unpacked = target_dir().join("paren-corpus/usr/share/common-lisp/source");
    let mut libs: Vec<PathBuf> = [Path::new(SOURCES), unpacked.as_path()]
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .filter(|p| {
            !TUNING
                .iter()
                .any(|t| p.file_name().is_some_and(|n| n == *t))
        })
        .collect();
    libs.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    libs.dedup_by(|a, b| a.file_name() == b.file_name());
    libs
}

/// The broken cases of one corpus, with the original of each and its way.
pub struct Corpus {
    pub name: &'static str,
    pub files: usize,
    pub forms: usize,
    pub originals: Vec<String>,
    pub cases: Vec<String>,
    pub ways: Vec<usize>,
}

pub fn corpus(name: &'static str, libraries: &[PathBuf]) -> Corpus {
    let mut files = Vec::new();
    for lib in libraries {
        lisp_files(lib, &mut files);
    }
    let mut c = Corpus {
        name,
        files: files.len(),
        forms: 0,
        originals: Vec::new(),
        cases: Vec::new(),
        ways: Vec::new(),
    };
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for form in forms(&text) {
            c.forms += 1;
            for way in 0..WAYS.len() {
                if let Some(b) = broken(&form, way) {
                    c.originals.push(form.clone());
                    c.cases.push(b);
                    c.ways.push(way);
                }
            }
        }
    }
    c
}

/// The tuning libraries found here (installed ones and unpacked ones).
pub fn tuning_libraries() -> Vec<PathBuf> {
    let unpacked = target_dir().join("paren-corpus/usr/share/common-lisp/source");
    TUNING
        .iter()
        .flat_map(|l| [Path::new(SOURCES).join(l), unpacked.join(l)])
        .filter(|p| p.is_dir())
        .collect()
}

#[derive(Default, Clone, Copy)]
/// How the repairs of one set of cases came out.
pub struct Tally {
    pub restored: usize,
    pub relaid: usize,
    pub refused: usize,
    pub wrong: usize,
    pub unreadable: usize,
}

impl Tally {
    pub fn total(&self) -> usize {
        self.restored + self.relaid + self.refused + self.wrong + self.unreadable
    }
    pub fn add(&mut self, o: &Tally) {
        self.restored += o.restored;
        self.relaid += o.relaid;
        self.refused += o.refused;
        self.wrong += o.wrong;
        self.unreadable += o.unreadable;
    }
    /// Counts one case: `written` is the repaired text (None: refused),
    /// `intended` what it should be. Relaid: the same forms, closers
    /// placed elsewhere on their lines; unreadable: a text that does not
    /// read; wrong: other forms.
    pub fn count(&mut self, written: Option<&str>, intended: &str) {
        match written {
            None => self.refused += 1,
            Some(t) if t == intended => self.restored += 1,
            Some(t) if !parse(t).is_ok() => self.unreadable += 1,
            Some(t) if tokens(t) == tokens(intended) => self.relaid += 1,
            Some(_) => self.wrong += 1,
        }
    }
    /// The row's cells: restored, relaid, refused, wrong, and with
    /// `unreadable_apart` the unreadable ones in a column of their own
    /// (else they count as wrong).
    pub fn cell(&self, unreadable_apart: bool) -> String {
        let pct = |n: usize| 100.0 * n as f64 / self.total().max(1) as f64;
        let cells = format!(
            "{:>5} {:>5.1}% | {:>3} | {:>4} {:>4.1}% | {:>4}",
            self.restored,
            pct(self.restored),
            self.relaid,
            self.refused,
            pct(self.refused),
            if unreadable_apart {
                self.wrong
            } else {
                self.wrong + self.unreadable
            }
        );
        if unreadable_apart {
            format!("{cells} | {:>3}", self.unreadable)
        } else {
            cells
        }
    }
}
