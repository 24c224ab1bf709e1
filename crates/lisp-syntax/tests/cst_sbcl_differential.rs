//! Differential test: our top-level form boundaries against SBCL's own reader
//! on every `.lisp`/`.asd` file of SBCL's sources and the Debian Common Lisp
//! libraries installed here (code nobody on this project wrote).
//!
//! SBCL runs once over the whole corpus (tests/sbcl-form-boundaries.lisp,
//! which explains how it finds boundaries). It reports character offsets;
//! they are converted to byte offsets here. Besides the top-level forms, the
//! kind and span of every construct SBCL reads through a reader macro
//! (lists, strings, quotes, comments, `#\x`, `#(`, `#+`, ...: every node
//! but tokens and whitespace) is compared too. Every disagreement fails the
//! test unless it is listed in [`EXPLAINED`] with the reason, and a listed
//! file that no longer disagrees fails it too, so the list stays true.
//!
//! SBCL and the corpus are required: CI installs them (packages `sbcl`,
//! `sbcl-source`, `cl-*`). A missing SBCL is a failure, not a skip.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use lisp_syntax::cst::{parse, Node, NodeKind};

const CORPUS_DIRS: [&str; 2] = ["/usr/share/sbcl-source", "/usr/share/common-lisp/source"];

/// Files where SBCL's reader and ours legitimately differ: (path suffix,
/// why).
const EXPLAINED: &[(&str, &str)] = &[(
    "cl-cffi/src/cffi-abcl.lisp",
    "uses ABCL's #\"javaMethod\" reader macro, which SBCL does not have: SBCL's \
     reader takes #\" as an unknown dispatch and runs into end of file; we keep \
     #\"...\" as an Opaque node and read the rest of the file",
)];

/// What SBCL said about one file.
#[derive(Debug, Default)]
struct SbclFile {
    /// Top-level form spans in characters.
    forms: Vec<(usize, usize)>,
    /// Every reader-macro construct (kind, start, end), in characters.
    constructs: Vec<(String, usize, usize)>,
    /// Reader error: (character offset, message).
    error: Option<(usize, String)>,
}

fn corpus() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in CORPUS_DIRS {
        let before = files.len();
        walk(Path::new(dir), &mut files);
        assert!(
            files.len() > before,
            "no .lisp/.asd files under {dir}: install the Debian packages sbcl-source \
             and cl-alexandria, cl-ppcre, ... (see TEAM.md / .ci)"
        );
    }
    files.sort();
    files
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue; // dangling symlink
        };
        if meta.is_dir() {
            walk(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("lisp" | "asd")
        ) {
            out.push(path);
        }
    }
}

fn run_sbcl(paths: &[&Path]) -> BTreeMap<String, SbclFile> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sbcl-form-boundaries.lisp");
    let mut child = Command::new("sbcl")
        .arg("--script")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run `sbcl` ({e}): this test needs SBCL on PATH (apt-get install sbcl)")
        });
    let mut input = String::new();
    for p in paths {
        input.push_str(p.to_str().expect("UTF-8 path"));
        input.push('\n');
    }
    let mut stdin = child.stdin.take().expect("stdin");
    // Write from a thread: SBCL's output could fill the pipe meanwhile.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("sbcl output");
    writer
        .join()
        .expect("writer thread")
        .expect("write paths to sbcl");
    assert!(
        out.status.success(),
        "sbcl failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("sbcl output is UTF-8");
    let mut result: BTreeMap<String, SbclFile> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in stdout.lines() {
        if let Some(path) = line.strip_prefix("FILE ") {
            current = Some(path.to_string());
            result.insert(path.to_string(), SbclFile::default());
            continue;
        }
        let file = result
            .get_mut(current.as_ref().expect("FILE line first"))
            .expect("current file");
        if line == "OK" {
            continue;
        } else if let Some(rest) = line.strip_prefix("N ") {
            let mut parts = rest.split(' ');
            let mut next = || parts.next().expect("N kind start end");
            let kind = next().to_string();
            let start = next().parse().expect("start");
            let end = next().parse().expect("end");
            file.constructs.push((kind, start, end));
        } else if let Some(rest) = line.strip_prefix("ERROR ") {
            let (pos, msg) = rest.split_once(' ').unwrap_or((rest, ""));
            file.error = Some((pos.parse().expect("error offset"), msg.to_string()));
        } else {
            let (a, b) = line.split_once(' ').expect("start end");
            file.forms
                .push((a.parse().expect("start"), b.parse().expect("end")));
        }
    }
    result
}

#[test]
fn forms_and_constructs_match_sbcl_reader() {
    let started = Instant::now();
    let files = corpus();
    let mut texts = Vec::new();
    let mut not_utf8 = Vec::new();
    for path in &files {
        let bytes = std::fs::read(path).expect("read corpus file");
        match String::from_utf8(bytes) {
            Ok(text) => texts.push((path.as_path(), text)),
            Err(_) => not_utf8.push(path.display().to_string()),
        }
    }
    let paths: Vec<&Path> = texts.iter().map(|(p, _)| *p).collect();
    let sbcl = run_sbcl(&paths);
    let sbcl_elapsed = started.elapsed();

    let mut total_forms = 0usize;
    let mut total_constructs = 0usize;
    let mut matched_constructs = 0usize;
    let mut matched_forms = 0usize;
    let mut agreeing_files = 0usize;
    let mut unexplained = Vec::new();
    let mut explained_seen = HashSet::new();
    let mut parse_time = std::time::Duration::ZERO;
    for (path, text) in &texts {
        let key = path.to_str().expect("UTF-8 path");
        let sb = sbcl
            .get(key)
            .unwrap_or_else(|| panic!("sbcl said nothing about {key}"));
        // Character offset -> byte offset.
        let mut byte_of: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        byte_of.push(text.len());
        let theirs: Vec<(usize, usize)> = sb
            .forms
            .iter()
            .map(|&(a, b)| (byte_of[a], byte_of[b]))
            .collect();

        let t = Instant::now();
        let parsed = parse(text);
        parse_time += t.elapsed();
        let rebuilt: String = parsed.leaves().map(|n| n.text(text)).collect();
        assert!(rebuilt == *text, "{key}: leaves do not rebuild the file");
        let ours: Vec<(usize, usize)> = parsed
            .top_level_forms()
            .map(|n| (n.span.start, n.span.end))
            .collect();

        let mut their_constructs: Vec<(&str, usize, usize)> = sb
            .constructs
            .iter()
            .map(|(k, a, b)| (k.as_str(), byte_of[*a], byte_of[*b]))
            .collect();
        their_constructs.sort_unstable();
        let mut our_constructs = constructs(&parsed.forms);
        our_constructs.sort_unstable();
        total_constructs += their_constructs.len();
        let our_construct_set: HashSet<_> = our_constructs.iter().copied().collect();
        matched_constructs += their_constructs
            .iter()
            .filter(|c| our_construct_set.contains(c))
            .count();

        total_forms += theirs.len();
        let our_set: HashSet<_> = ours.iter().copied().collect();
        matched_forms += theirs.iter().filter(|f| our_set.contains(f)).count();

        let agrees = sb.error.is_none()
            && parsed.errors.is_empty()
            && ours == theirs
            && our_constructs == their_constructs;
        let explanation = EXPLAINED.iter().find(|(suffix, _)| key.ends_with(suffix));
        match (agrees, explanation) {
            (true, None) => agreeing_files += 1,
            (true, Some((suffix, _))) => unexplained.push(format!(
                "{key}: listed in EXPLAINED ({suffix}) but now agrees with SBCL; remove it from the list"
            )),
            (false, Some((suffix, _))) => {
                explained_seen.insert(*suffix);
            }
            (false, None) => {
                let first_diff = theirs
                    .iter()
                    .zip(ours.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(theirs.len().min(ours.len()));
                let show = |v: &[(usize, usize)]| match v.get(first_diff) {
                    Some(&(a, b)) => format!("{a}..{b} {:?}", snippet(text, a, b)),
                    None => "nothing".to_string(),
                };
                if ours == theirs && sb.error.is_none() && parsed.errors.is_empty() {
                    let their_set: HashSet<_> = their_constructs.iter().copied().collect();
                    let show_some = |v: &[(&str, usize, usize)], other: &HashSet<(&str, usize, usize)>| {
                        v.iter()
                            .filter(|c| !other.contains(c))
                            .take(3)
                            .map(|&(k, a, b)| format!("{k} {a}..{b} {:?}", snippet(text, a, b)))
                            .collect::<Vec<_>>()
                    };
                    unexplained.push(format!(
                        "{key}: top-level forms agree but constructs inside differ: only SBCL's {:?}, only ours {:?}",
                        show_some(&their_constructs, &our_construct_set),
                        show_some(&our_constructs, &their_set),
                    ));
                    continue;
                }
                unexplained.push(format!(
                    "{key}: SBCL {} forms{}, ours {} forms{}; first difference at form #{first_diff}: SBCL {}, ours {}",
                    theirs.len(),
                    sb.error
                        .as_ref()
                        .map(|(o, m)| format!(" then error at char {o} ({m})"))
                        .unwrap_or_default(),
                    ours.len(),
                    if parsed.errors.is_empty() {
                        String::new()
                    } else {
                        format!(" and errors {:?}", parsed.errors.iter().map(|e| e.to_string()).collect::<Vec<_>>())
                    },
                    show(&theirs),
                    show(&ours),
                ));
            }
        }
    }
    for (suffix, _) in EXPLAINED {
        if !explained_seen.contains(suffix) && !unexplained.iter().any(|u| u.contains(suffix)) {
            unexplained.push(format!("EXPLAINED entry {suffix} matches no corpus file"));
        }
    }

    eprintln!(
        "corpus: {} files ({} skipped as not UTF-8: {:?}), {} forms by SBCL's count; \
         {} files agree exactly ({:.2}%), {} forms agree ({:.3}%), {} of {} reader-macro constructs (lists, strings, comments, #...) agree ({:.3}%); {} explained disagreements; \
         sbcl {:.1?}, our parses {:.1?} (debug build)",
        texts.len(),
        not_utf8.len(),
        not_utf8,
        total_forms,
        agreeing_files,
        100.0 * agreeing_files as f64 / texts.len() as f64,
        matched_forms,
        100.0 * matched_forms as f64 / total_forms.max(1) as f64,
        matched_constructs,
        total_constructs,
        100.0 * matched_constructs as f64 / total_constructs.max(1) as f64,
        explained_seen.len(),
        sbcl_elapsed,
        parse_time,
    );
    assert!(
        texts.len() > 1000,
        "corpus unexpectedly small: {}",
        texts.len()
    );
    assert!(
        unexplained.is_empty(),
        "{} unexplained disagreements with SBCL's reader:\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
}

/// (kind, start, end) of every node that SBCL's reader handles with a macro
/// character, named as sbcl-form-boundaries.lisp names them.
fn constructs(forms: &[Node]) -> Vec<(&'static str, usize, usize)> {
    let mut out = Vec::new();
    let mut stack: Vec<&Node> = forms.iter().collect();
    while let Some(n) = stack.pop() {
        let kind = match n.kind {
            NodeKind::List => Some("list"),
            NodeKind::String => Some("string"),
            NodeKind::Quote => Some("quote"),
            NodeKind::Backquote => Some("backquote"),
            NodeKind::Unquote | NodeKind::UnquoteSplicing => Some("unquote"),
            NodeKind::LineComment => Some("line-comment"),
            NodeKind::BlockComment => Some("block-comment"),
            NodeKind::CharLiteral => Some("char"),
            NodeKind::FunctionQuote => Some("function"),
            NodeKind::Vector => Some("vector"),
            NodeKind::BitVector => Some("bit-vector"),
            NodeKind::Uninterned => Some("uninterned"),
            NodeKind::ReadEval => Some("read-eval"),
            NodeKind::Pathname => Some("pathname"),
            NodeKind::Structure => Some("structure"),
            NodeKind::Array => Some("array"),
            NodeKind::Label => Some("label"),
            NodeKind::LabelRef => Some("label-ref"),
            NodeKind::RadixNumber => Some("radix"),
            NodeKind::Complex => Some("complex"),
            NodeKind::ReaderConditional { .. } => Some("conditional"),
            NodeKind::Whitespace
            | NodeKind::Token
            | NodeKind::Punct
            | NodeKind::Opaque
            | NodeKind::Error => None,
        };
        if let Some(kind) = kind {
            out.push((kind, n.span.start, n.span.end));
        }
        stack.extend(n.children.iter());
    }
    out
}

fn snippet(text: &str, a: usize, b: usize) -> String {
    let end = b.min(a + 60);
    let end = (end..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[a..end].to_string()
}
