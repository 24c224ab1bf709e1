//! `clgrep-search` and `clgrep-signatures`: grep and definition listing
//! over Lisp files, each hit placed in its enclosing top-level form.
//!
//! Directories are walked in parallel with the `ignore` crate
//! (`.gitignore`, `.ignore` and hidden files respected; no git repository
//! needed; the ignore files read safely, see [`crate::tools::safe_walk`]),
//! visiting only Lisp source files.

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use regex::bytes::{Regex, RegexBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defs::{self, Definition};
use super::{is_lisp_path, scan};
use crate::sync::MutexExt;
use crate::tools::fs::{resolve_for, to_json, READ_CAP_BYTES};
use crate::tools::fs_paths::{
    display_path, open_regular_in, read_capped, rel_under, Access, ReadCapError, ResolvedPath,
};
use crate::tools::output::counted;
use crate::tools::safe_walk::{self, Rules};
use crate::tools::{tool, Annotations, ToolContext, ToolDef, ToolError, ToolGroup, ToolOutput};

const DEFAULT_SEARCH_LIMIT: usize = 200;
const DEFAULT_SIGNATURE_LIMIT: usize = 2000;
/// Files larger than this are skipped by the walkers (generated data).
const MAX_FILE_BYTES: u64 = 8 * READ_CAP_BYTES as u64;

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SearchArgs {
    /// Rust regex (`(?i)`: any case).
    pattern: String,
    path: Option<String>,
    /// E.g. `["defun"]`.
    form_types: Option<Vec<String>>,
    /// Default 200.
    limit: Option<usize>,
}

/// One search hit.
#[derive(Serialize, JsonSchema, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    /// File, relative to the project root when inside it.
    pub path: String,
    /// 1-based line.
    pub line: usize,
    /// The line's text.
    pub text: String,
    /// Type of the enclosing definition (`defun`), or the head of the
    /// enclosing top-level form; absent between forms.
    pub form_type: Option<String>,
    /// Name of the enclosing definition.
    pub form_name: Option<String>,
    /// Line where the enclosing form starts.
    pub form_line: Option<usize>,
    /// Byte offset of the line's start (placing hits in forms later).
    #[serde(skip)]
    line_offset: usize,
    /// The file, for placing hits later.
    #[serde(skip)]
    file: PathBuf,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SearchOutput {
    hits: Vec<Hit>,
    /// Hits found in all (before `limit`).
    total_hits: usize,
    files_searched: usize,
    truncated: bool,
    /// Lisp-named entries not read, each with why: named pipes, sockets,
    /// devices, and files that changed into one while being opened.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skipped: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SignaturesArgs {
    path: Option<String>,
    /// E.g. `["defun"]`.
    form_types: Option<Vec<String>>,
    /// Default 2000.
    limit: Option<usize>,
}

/// One definition in `clgrep-signatures`.
#[derive(Serialize, JsonSchema, Debug, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Signature {
    pub path: String,
    pub line: usize,
    /// `defun`, `defmethod`, ... as written (lower-cased).
    #[serde(rename = "type")]
    pub kind: String,
    /// Name; for methods with qualifiers and specializers:
    /// `print-object :around (point t)`.
    pub name: String,
    /// The signature on one line: `(defun foo (x &key y) ...)`.
    pub signature: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SignaturesOutput {
    definitions: Vec<Signature>,
    total: usize,
    files_searched: usize,
    truncated: bool,
    /// Lisp-named entries not read, each with why (see `clgrep-search`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skipped: Vec<String>,
}

/// The `clgrep-search` tool.
pub fn search_tool_def() -> ToolDef {
    tool(
        "clgrep-search",
        ToolGroup::Source,
        "Search Lisp code",
        "Search Lisp files under `path` (default: the project root; .gitignore respected) for a \
         regex, line by line; each hit with path, line, text and its top-level form's type and \
         name.",
        Annotations::READ_ONLY,
        |a: SearchArgs, ctx: ToolContext| async move {
            tokio::task::spawn_blocking(move || run_search(a, &ctx))
                .await
                .unwrap_or_else(|e| ToolOutput::error(format!("search failed: {e}")))
        },
    )
    .with_output_schema::<SearchOutput>()
}

/// The `clgrep-signatures` tool.
pub fn signatures_tool_def() -> ToolDef {
    tool(
        "clgrep-signatures",
        ToolGroup::Source,
        "List Lisp definitions",
        "List definitions (def... forms; methods with qualifiers and specializers; inside \
         eval-when/progn) in a Lisp file or tree (default: the project root) with line and \
         signature.",
        Annotations::READ_ONLY,
        |a: SignaturesArgs, ctx: ToolContext| async move {
            tokio::task::spawn_blocking(move || run_signatures(a, &ctx))
                .await
                .unwrap_or_else(|e| ToolOutput::error(format!("listing failed: {e}")))
        },
    )
    .with_output_schema::<SignaturesOutput>()
}

/// The file or directory to visit for `user_path`, and the root to show
/// paths against.
fn target(
    ctx: &ToolContext,
    user_path: Option<&str>,
) -> Result<(PathBuf, ResolvedPath), ToolError> {
    let root = ctx.session.project_root();
    let r = resolve_for(&ctx.session, user_path.unwrap_or(""), Access::Read)?;
    if !r.exists {
        return Err(ToolError::File(format!(
            "Not found: '{}' (looked at {}).",
            user_path.unwrap_or("."),
            r.path.display()
        )));
    }
    Ok((root, r))
}

/// What a walk read and what it left out.
pub struct Walked {
    /// Files read and visited.
    pub files: usize,
    /// Lisp-named entries not read, each as a sentence naming it and why.
    pub skipped: Vec<String>,
}

/// Visits every Lisp file under `r` (or `r` itself if it is not a
/// directory) in parallel, calling `visit(path, text)`. Every file is
/// opened beneath `r`'s root through a directory handle, non-blocking, and
/// read only if the opened handle is a regular file of at most 16 MB; named
/// pipes, sockets and devices are skipped and listed. A single file that
/// cannot be read is an error.
pub fn for_each_lisp_file<F>(root: &Path, r: &ResolvedPath, visit: F) -> Result<Walked, ToolError>
where
    F: Fn(&Path, &[u8]) + Sync,
{
    let base = r
        .base_dir()
        .map_err(|e| ToolError::File(crate::tools::fs_paths::io_message("read", &r.display, &e)))?;
    if !r.path.is_dir() {
        let (file, meta) = open_regular_in(&base, &r.rel(), &r.display)?;
        let bytes =
            read_capped(file, meta.len(), MAX_FILE_BYTES, &r.display).map_err(|e| match e {
                ReadCapError::TooBig(n) => ToolError::File(format!(
                    "'{}' is {n} bytes, over the {} MB this tool reads from one file.",
                    r.display,
                    MAX_FILE_BYTES >> 20
                )),
                ReadCapError::Other(m) => m,
            })?;
        visit(&r.path, &bytes);
        return Ok(Walked {
            files: 1,
            skipped: Vec::new(),
        });
    }
    let rules = std::sync::Arc::new(Rules::new(base, &r.base));
    let count = std::sync::atomic::AtomicUsize::new(0);
    let skipped = Mutex::new(Vec::new());
    let mut builder = safe_walk::builder(&r.path);
    let filter = rules.clone();
    builder
        .threads(
            std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .min(8),
        )
        .filter_entry(move |e| filter.keep(e.path(), e.file_type().is_some_and(|t| t.is_dir())));
    let walker = builder.build_parallel();
    let base = rules.dir();
    walker.run(|| {
        Box::new(|entry| {
            let Ok(entry) = entry else {
                return ignore::WalkState::Continue;
            };
            let p = entry.path();
            let Some(t) = entry.file_type() else {
                return ignore::WalkState::Continue;
            };
            if t.is_dir() || t.is_symlink() || !is_lisp_path(p) {
                return ignore::WalkState::Continue;
            }
            let shown = display_path(root, p);
            // The walk lists names; the read goes through the root's
            // handle, so a name swapped meanwhile (for a FIFO, or a
            // directory for a symlink out of the root) is refused, not
            // followed or waited on.
            match open_regular_in(base, &rel_under(&r.base, p), &shown) {
                Ok((file, meta)) => {
                    if meta.len() > MAX_FILE_BYTES {
                        return ignore::WalkState::Continue;
                    }
                    if let Ok(bytes) = read_capped(file, meta.len(), MAX_FILE_BYTES, &shown) {
                        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        visit(p, &bytes);
                    }
                }
                Err(why) => skipped.guard().push(why.to_string()),
            }
            ignore::WalkState::Continue
        })
    });
    let mut skipped = skipped.into_inner().unwrap_or_else(|e| e.into_inner());
    skipped.sort();
    Ok(Walked {
        files: count.into_inner(),
        skipped,
    })
}

/// The text line about skipped entries, if any.
fn skipped_note(skipped: &[String]) -> Option<String> {
    if skipped.is_empty() {
        return None;
    }
    let mut note = format!(
        "[skipped {} not read: ",
        counted(skipped.len(), "entry", "entries")
    );
    note.push_str(
        &skipped
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("; "),
    );
    if skipped.len() > 5 {
        let _ = write!(note, " ... and {} more", skipped.len() - 5);
    }
    note.push(']');
    Some(note)
}

fn normalize_types(types: Option<Vec<String>>) -> Option<Vec<String>> {
    types
        .map(|v| {
            v.iter()
                .map(|t| {
                    let t = t.trim().to_lowercase();
                    t.rsplit(':').next().unwrap_or(&t).to_string()
                })
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .filter(|v| !v.is_empty())
}

fn run_search(a: SearchArgs, ctx: &ToolContext) -> ToolOutput {
    let re = match RegexBuilder::new(&a.pattern)
        .multi_line(true)
        .size_limit(1 << 22)
        .build()
    {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(format!("Bad `pattern`: {e}")),
    };
    let (root, r) = match target(ctx, a.path.as_deref()) {
        Ok(x) => x,
        Err(e) => return ToolOutput::error(e),
    };
    let types = normalize_types(a.form_types);
    let limit = a.limit.unwrap_or(DEFAULT_SEARCH_LIMIT).max(1);
    let (hits, walked, total) = match search(&root, &r, &re, types.as_deref(), limit) {
        Ok(x) => x,
        Err(e) => return ToolOutput::error(e),
    };
    let files = walked.files;
    let mut text = String::new();
    for h in &hits {
        let form = match (&h.form_type, &h.form_name) {
            (Some(t), Some(n)) => format!(" [{t} {n}]"),
            (Some(t), None) => format!(" [{t}]"),
            _ => String::new(),
        };
        let _ = writeln!(text, "{}:{}:{form} {}", h.path, h.line, h.text.trim_end());
    }
    if total == 0 {
        let _ = writeln!(
            text,
            "No match for /{}/ in {}.",
            a.pattern,
            counted(files, "Lisp file", "Lisp files")
        );
    } else if total > hits.len() {
        let _ = writeln!(
            text,
            "[{} of {total} hits shown (limit {limit}); narrow `path` or `pattern`, or raise `limit`]",
            hits.len()
        );
    } else {
        let _ = writeln!(
            text,
            "[{} in {}]",
            counted(total, "hit", "hits"),
            counted(files, "Lisp file", "Lisp files")
        );
    }
    if let Some(note) = skipped_note(&walked.skipped) {
        let _ = writeln!(text, "{note}");
    }
    let out = SearchOutput {
        truncated: total > hits.len(),
        hits,
        total_hits: total,
        files_searched: files,
        skipped: walked.skipped,
    };
    ToolOutput::structured(text, to_json(&out))
}

/// The first `limit` hits of `re` in the Lisp files under `path`, sorted
/// by path and line, each placed in its enclosing form; the number of files
/// searched; the number of hits in all.
///
/// Without a `types` filter, placing (which scans the file's forms) is done
/// only for the hits returned, so a search costs about what grep costs.
pub fn search(
    root: &Path,
    r: &ResolvedPath,
    re: &Regex,
    types: Option<&[String]>,
    limit: usize,
) -> Result<(Vec<Hit>, Walked, usize), ToolError> {
    let hits = Mutex::new(Vec::new());
    let walked = for_each_lisp_file(root, r, |p, bytes| {
        let found = search_bytes(bytes, re, types, types.is_some());
        if !found.is_empty() {
            let shown = display_path(root, p);
            let mut all = hits.guard();
            for mut h in found {
                h.path = shown.clone();
                h.file = p.to_path_buf();
                all.push(h);
            }
        }
    })?;
    let mut hits = hits.into_inner().unwrap_or_else(|e| e.into_inner());
    hits.sort_by(|a, b| a.path.cmp(&b.path).then(a.line.cmp(&b.line)));
    let total = hits.len();
    hits.truncate(limit);
    if types.is_none() {
        if let Ok(base) = r.base_dir() {
            place_hits(&base, &r.base, &mut hits);
        }
    }
    Ok((hits, walked, total))
}

/// Fills in the enclosing forms of `hits` (sorted by path), reading each
/// file once, again through the handle on `base` (the root `base_path`).
fn place_hits(base: &cap_std::fs::Dir, base_path: &Path, hits: &mut [Hit]) {
    let mut i = 0;
    while i < hits.len() {
        let j = i + hits[i..]
            .iter()
            .take_while(|h| h.file == hits[i].file)
            .count();
        let rel = rel_under(base_path, &hits[i].file);
        let read = open_regular_in(base, &rel, &hits[i].path)
            .ok()
            .and_then(|(f, m)| read_capped(f, m.len(), MAX_FILE_BYTES, &hits[i].path).ok());
        if let Some(bytes) = read {
            if let Ok(text) = std::str::from_utf8(&bytes) {
                let s = scan::scan_recovering(text);
                let mut placer = Placer::new(text, &s);
                for h in &mut hits[i..j] {
                    placer.place(h);
                }
            }
        }
        i = j;
    }
}

/// Places the hits of one file in their enclosing forms. Hits must come in
/// text order: the definitions of the current top-level form are kept, and
/// line numbers are counted incrementally, so a file with many hits in one
/// huge form costs one pass, not one pass per hit.
struct Placer<'a> {
    text: &'a str,
    scan: &'a scan::Scan,
    /// Byte offset and 1-based line of the last line count.
    counted: (usize, usize),
    cached: Option<PlacedItem>,
}

/// What the [`Placer`] keeps about the current top-level form.
struct PlacedItem {
    /// Index in the scan's items.
    index: usize,
    /// Its definitions, each with the line it starts on.
    defs: Vec<(Definition, usize)>,
    /// Its head and line, for forms that define nothing.
    head: Option<(String, usize)>,
}

impl<'a> Placer<'a> {
    fn new(text: &'a str, scan: &'a scan::Scan) -> Placer<'a> {
        Placer {
            text,
            scan,
            counted: (0, 1),
            cached: None,
        }
    }

    /// The 1-based line of `offset`; offsets must not go backwards much
    /// (a backward step recounts from the start).
    fn line_of(&mut self, offset: usize) -> usize {
        if offset < self.counted.0 {
            self.counted = (0, 1);
        }
        let (from, line) = self.counted;
        let n = memchr::memchr_iter(b'\n', &self.text.as_bytes()[from..offset]).count();
        self.counted = (offset, line + n);
        line + n
    }

    /// Sets the enclosing form of one hit.
    fn place(&mut self, hit: &mut Hit) {
        let text = self.text;
        let ls = hit.line_offset;
        let le = memchr::memchr(b'\n', &text.as_bytes()[ls..]).map_or(text.len(), |i| ls + i);
        let items = &self.scan.items;
        // The last form starting at or before the line's end...
        let end = items.partition_point(|it| it.span.start <= le.max(ls));
        let Some(index) = items[..end]
            .iter()
            .rposition(|it| it.kind == scan::ItemKind::Form)
        else {
            return;
        };
        let item = &items[index];
        // ...that also ends after the line's start.
        if item.span.end <= ls {
            return;
        }
        if self.cached.as_ref().is_none_or(|c| c.index != index) {
            let ds = defs::definitions(text, std::iter::once(&item.span));
            let mut with_lines = Vec::with_capacity(ds.len());
            for d in ds {
                let l = self.line_of(d.unit_span.start);
                with_lines.push((d, l));
            }
            let head = if with_lines.is_empty() {
                defs::head_of(text, item.span.clone())
                    .or_else(|| {
                        scan::conditional_parts(text, item.span.clone())
                            .and_then(|(_, g)| defs::head_of(text, g))
                    })
                    .map(|h| (text[h].to_lowercase(), self.line_of(item.span.start)))
            } else {
                None
            };
            self.cached = Some(PlacedItem {
                index,
                defs: with_lines,
                head,
            });
        }
        let PlacedItem { defs: ds, head, .. } = self.cached.as_ref().unwrap();
        // The innermost definition containing the line, else the only one,
        // else the form's head.
        let found = ds
            .iter()
            .find(|(d, _)| d.unit_span.start <= le && d.span.end > ls)
            .or_else(|| ds.first().filter(|_| ds.len() == 1));
        if let Some((d, line)) = found {
            hit.form_type = Some(d.kind.clone());
            hit.form_name = Some(d.full_name());
            hit.form_line = Some(*line);
        } else if let Some((h, line)) = head {
            hit.form_type = Some(h.clone());
            hit.form_line = Some(*line);
        }
    }
}

/// The (line start, 1-based line number) of each line of `bytes` that `re`
/// matches, the way grep counts: each line on its own, so a match never
/// spans lines (`\s` would otherwise run over a newline), and no empty
/// "line" after the final newline.
///
/// Fast path: candidates come from searching the whole buffer (one regex
/// pass, as fast as grep); a candidate within one line is a hit as it
/// stands (with multi-line `^`/`$` the surrounding newlines are the same
/// context the line alone gives), and only one that runs over a newline is
/// checked again on its line alone.
fn matching_lines(bytes: &[u8], re: &Regex) -> Vec<(usize, usize)> {
    let mut matched = Vec::new();
    let mut line = 1usize;
    let mut counted_to = 0usize;
    let mut pos = 0usize;
    while pos < bytes.len() {
        let Some(m) = re.find_at(bytes, pos) else {
            break;
        };
        let ls = memchr::memrchr(b'\n', &bytes[..m.start()]).map_or(0, |i| i + 1);
        if ls >= bytes.len() {
            // The empty text after the final newline is no line.
            break;
        }
        let le = memchr::memchr(b'\n', &bytes[ls..]).map_or(bytes.len(), |i| ls + i);
        let mut push = |ls: usize| {
            line += memchr::memchr_iter(b'\n', &bytes[counted_to..ls]).count();
            counted_to = ls;
            matched.push((ls, line));
        };
        if m.end() <= le {
            push(ls);
            // One hit per line: go on with the next line.
            pos = le + 1;
            continue;
        }
        // The candidate runs over newlines: the lines it covers are
        // checked one by one (so a long candidate is not searched again
        // from each of its lines), then the search goes on from the line
        // where it ended.
        let last = m.end() - 1;
        let resume = memchr::memrchr(b'\n', &bytes[..last])
            .map_or(0, |i| i + 1)
            .max(le + 1);
        let mut s = ls;
        while s < resume && s < bytes.len() {
            let e = memchr::memchr(b'\n', &bytes[s..]).map_or(bytes.len(), |i| s + i);
            if re.is_match(&bytes[s..e]) {
                push(s);
            }
            s = e + 1;
        }
        pos = resume;
    }
    matched
}

/// The hits in one file's bytes (`path` left empty), placed in their forms
/// when `placed`.
fn search_bytes(bytes: &[u8], re: &Regex, types: Option<&[String]>, placed: bool) -> Vec<Hit> {
    let mut out = Vec::new();
    let matched = matching_lines(bytes, re);
    if matched.is_empty() {
        return out;
    }
    // Placing hits in forms needs the text; non-UTF-8 files get no forms.
    let scanned = if placed {
        std::str::from_utf8(bytes)
            .ok()
            .map(|t| (t, scan::scan_recovering(t)))
    } else {
        None
    };
    let mut placer = scanned.as_ref().map(|(t, s)| Placer::new(t, s));
    for (ls, n) in matched {
        let le = memchr::memchr(b'\n', &bytes[ls..]).map_or(bytes.len(), |i| ls + i);
        let mut hit = Hit {
            path: String::new(),
            line: n,
            text: String::from_utf8_lossy(&bytes[ls..le]).into_owned(),
            form_type: None,
            form_name: None,
            form_line: None,
            line_offset: ls,
            file: PathBuf::new(),
        };
        if let Some(p) = placer.as_mut() {
            p.place(&mut hit);
        }
        if let Some(types) = types {
            let key = hit
                .form_type
                .as_deref()
                .map(|k| k.rsplit(':').next().unwrap_or(k).to_string());
            if !key.is_some_and(|k| types.contains(&k)) {
                continue;
            }
        }
        if hit.text.len() > 300 {
            let mut cut = 300;
            while !hit.text.is_char_boundary(cut) {
                cut -= 1;
            }
            hit.text.truncate(cut);
            hit.text.push_str(" [...]");
        }
        out.push(hit);
    }
    out
}

fn run_signatures(a: SignaturesArgs, ctx: &ToolContext) -> ToolOutput {
    let (root, r) = match target(ctx, a.path.as_deref()) {
        Ok(x) => x,
        Err(e) => return ToolOutput::error(e),
    };
    let types = normalize_types(a.form_types);
    let limit = a.limit.unwrap_or(DEFAULT_SIGNATURE_LIMIT).max(1);
    let (mut sigs, walked) = match signatures(&root, &r) {
        Ok(x) => x,
        Err(e) => return ToolOutput::error(e),
    };
    let files = walked.files;
    if let Some(types) = &types {
        sigs.retain(|s| types.contains(&s.kind.rsplit(':').next().unwrap_or(&s.kind).to_string()));
    }
    let total = sigs.len();
    sigs.truncate(limit);
    let mut text = String::new();
    let mut last_path = "";
    for s in &sigs {
        if s.path != last_path {
            let _ = writeln!(text, "{}:", s.path);
            last_path = &s.path;
        }
        let _ = writeln!(text, "{:>6}: {}", s.line, s.signature);
    }
    if total > sigs.len() {
        let _ = writeln!(
            text,
            "[{} of {total} definitions shown (limit {limit}); narrow `path` or `formTypes`, or raise `limit`]",
            sigs.len()
        );
    } else {
        let _ = writeln!(
            text,
            "[{} in {}]",
            counted(total, "definition", "definitions"),
            counted(files, "Lisp file", "Lisp files")
        );
    }
    if let Some(note) = skipped_note(&walked.skipped) {
        let _ = writeln!(text, "{note}");
    }
    let out = SignaturesOutput {
        truncated: total > sigs.len(),
        definitions: sigs,
        total,
        files_searched: files,
        skipped: walked.skipped,
    };
    ToolOutput::structured(text, to_json(&out))
}

/// Every definition in the Lisp files under `path`, sorted by path and
/// line; and the number of files read.
pub fn signatures(root: &Path, r: &ResolvedPath) -> Result<(Vec<Signature>, Walked), ToolError> {
    let all = Mutex::new(Vec::new());
    let walked = for_each_lisp_file(root, r, |p, bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return;
        };
        let s = scan::scan_recovering(text);
        let ds = defs::definitions(text, s.forms());
        if ds.is_empty() {
            return;
        }
        let shown = display_path(root, p);
        let mut line = 1;
        let mut counted = 0;
        let mut out: Vec<Signature> = Vec::with_capacity(ds.len());
        for d in &ds {
            line += memchr::memchr_iter(b'\n', &bytes[counted..d.span.start]).count();
            counted = d.span.start;
            out.push(signature_of(text, d, &shown, line));
        }
        all.guard().extend(out);
    })?;
    let mut all = all.into_inner().unwrap_or_else(|e| e.into_inner());
    all.sort_by(|a, b| a.path.cmp(&b.path).then(a.line.cmp(&b.line)));
    Ok((all, walked))
}

fn signature_of(text: &str, d: &Definition, path: &str, line: usize) -> Signature {
    let mut sig = d.signature(text);
    // A reader-conditional guard (`#+sbcl`) is part of what is defined where.
    if let Some(guard) = d.guard(text) {
        sig = format!("{guard} {sig}");
    }
    if sig.len() > 300 {
        let mut cut = 300;
        while !sig.is_char_boundary(cut) {
            cut -= 1;
        }
        sig.truncate(cut);
        sig.push_str(" ...");
    }
    Signature {
        path: path.to_string(),
        line,
        kind: d.kind.clone(),
        name: d.full_name(),
        signature: sig,
    }
}
