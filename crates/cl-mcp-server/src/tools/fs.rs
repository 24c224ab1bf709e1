//! The `fs` tool family: project-scoped file reading, writing and listing,
//! and the session's project root. Every path goes through
//! [`super::fs_paths`].

use std::io::BufRead;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::fs_paths::{self, Access, ResolvedPath};
use super::output::counted;
use super::{
    off_workers, tool, Annotations, ToolContext, ToolDef, ToolError, ToolGroup, ToolOutput,
};
use crate::session::Session;

/// Most bytes one read returns (`fs-read-file`, and the source tools' file
/// reads); larger files are paged.
pub const READ_CAP_BYTES: usize = 2 * 1024 * 1024;

/// Most entries `fs-list-directory` shows.
const LIST_CAP: usize = 2000;

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReadArgs {
    path: String,
    /// 0-based first line.
    offset: Option<usize>,
    /// Lines (default: all, up to 2 MB).
    limit: Option<usize>,
    /// For a line over 2 MB: `nextByteOffset`.
    byte_offset: Option<usize>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ReadOutput {
    /// The path as resolved (relative to the project root when inside it).
    path: String,
    /// The text read.
    content: String,
    /// 0-based index of the first line returned.
    offset: usize,
    /// Number of lines returned.
    lines: usize,
    /// True when the file goes on after the returned lines.
    has_more: bool,
    /// The `offset` that reads the next page, when `hasMore`.
    next_offset: Option<usize>,
    /// Set when the page ended inside a line longer than the 2 MB cap:
    /// pass it as `byteOffset` (with `offset: nextOffset`) to read on.
    next_byte_offset: Option<usize>,
    /// How the bytes were decoded: `utf-8`, or `latin-1` (each byte one
    /// character) when they are not UTF-8.
    encoding: &'static str,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
    // Lisp files: default true, missing or extra `)` placed by
    // indentation; false writes `content` as given (no schema description:
    // the README has it).
    repair_parens: Option<bool>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct WriteOutput {
    path: String,
    /// Bytes written.
    bytes: usize,
    /// True when the file did not exist before.
    created: bool,
    /// Set when the file was not UTF-8: `latin-1` (written back so) or
    /// `utf-8` (`content` has characters Latin-1 lacks).
    #[serde(skip_serializing_if = "Option::is_none")]
    encoding: Option<&'static str>,
    /// Closers placed by indentation before writing (Lisp files):
    /// `added ")" at line 12, column 30`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    repairs: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListArgs {
    path: Option<String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ListEntry {
    name: String,
    /// `file`, `directory`, `symlink` or `other`.
    #[serde(rename = "type")]
    kind: &'static str,
    /// Size in bytes (files only).
    size: Option<u64>,
    /// Where a symlink points.
    target: Option<String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ListOutput {
    path: String,
    entries: Vec<ListEntry>,
    /// Entries in the directory (all of them, hidden ones included).
    total: usize,
    directories: usize,
    files: usize,
    /// True when more than the shown entries exist.
    truncated: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ProjectInfo {
    /// The session's project root (absolute, canonical).
    project_root: String,
    /// The server process's working directory.
    cwd: Option<String>,
    /// The working directory relative to the root, when inside it.
    relative_cwd: Option<String>,
    /// How the root was chosen: `command-line` (--project-root or
    /// MCP_PROJECT_ROOT), `working-directory`, or `session` (the client's
    /// rootUri/rootPath/roots, or fs-set-project-root).
    project_root_source: &'static str,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SetRootArgs {
    /// Absolute or relative to the root.
    path: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SetRootOutput {
    project_root: String,
    previous_root: String,
}

/// The tools of the `fs` group.
pub fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "fs-read-file",
            ToolGroup::Fs,
            "Read a file",
            "Read a text file under the project root (or an ASDF system's source directory), 2 MB \
             a call at most; `offset`/`limit` select lines. For Lisp prefer lisp-read-file.",
            Annotations::READ_ONLY,
            |a: ReadArgs, ctx: ToolContext| off_workers(move || read_file(a, &ctx.session)),
        )
        .with_output_schema::<ReadOutput>(),
        tool(
            "fs-write-file",
            ToolGroup::Fs,
            "Write a file",
            "Write `content` as the whole file at `path` under the project root, atomically (mode \
             kept, directories created). For one Lisp definition prefer lisp-edit-form.",
            Annotations::DESTRUCTIVE,
            |a: WriteArgs, ctx: ToolContext| async move {
                let session = ctx.session.clone();
                let out = off_workers(move || write_file(a, &session)).await;
                super::lisp_call::note_project_written(&ctx);
                out
            },
        )
        .with_output_schema::<WriteOutput>(),
        tool(
            "fs-list-directory",
            ToolGroup::Fs,
            "List a directory",
            "List a directory (default: the project root): entries sorted by name, with type and \
             size.",
            Annotations::READ_ONLY,
            |a: ListArgs, ctx: ToolContext| off_workers(move || list_directory(a, &ctx.session)),
        )
        .with_output_schema::<ListOutput>(),
        tool(
            "fs-get-project-info",
            ToolGroup::Fs,
            "Project root info",
            "The session's project root (file tools stay inside it), the working directory, and \
             how the root was chosen.",
            Annotations::READ_ONLY,
            |_a: NoArgs, ctx: ToolContext| async move { project_info(&ctx.session) },
        )
        .with_output_schema::<ProjectInfo>(),
        tool(
            "fs-set-project-root",
            ToolGroup::Fs,
            "Set the project root",
            "Set the session's project root to a directory inside the start root or a client root \
             (anywhere with --allow-any-root).",
            Annotations::MUTATING,
            |a: SetRootArgs, ctx: ToolContext| async move { set_project_root(a, &ctx.session) },
        )
        .with_output_schema::<SetRootOutput>(),
    ]
}

/// Resolves a path for the session under the policy; the one entry point
/// every tool uses.
pub fn resolve_for(
    session: &Session,
    user_path: &str,
    access: Access,
) -> Result<ResolvedPath, fs_paths::PathError> {
    let extra = match access {
        Access::Read => fs_paths::asdf_source_roots(session),
        Access::Write => Vec::new(),
    };
    fs_paths::resolve(&session.project_root(), user_path, access, &extra)
}

/// Resolves `user_path` for reading and requires that something exists
/// there. Open it with [`ResolvedPath::open_regular`] (or
/// [`read_text_capped`]), which refuses anything but a regular file on the
/// opened handle.
pub fn resolve_existing_file(
    session: &Session,
    user_path: &str,
) -> Result<ResolvedPath, ToolError> {
    let r = resolve_for(session, user_path, Access::Read)?;
    if !r.exists {
        return Err(ToolError::File(format!(
            "File not found: '{user_path}' (looked at {}).",
            r.path.display()
        )));
    }
    if r.path.is_dir() {
        return Err(ToolError::File(format!(
            "'{user_path}' is a directory; use fs-list-directory to see its entries."
        )));
    }
    Ok(r)
}

/// Reads a whole text file of at most [`READ_CAP_BYTES`] for the source
/// tools, with errors a model can act on. Never holds more than the cap
/// (+1 byte) in memory.
pub fn read_text_capped(r: &ResolvedPath) -> Result<String, ToolError> {
    let bytes = r.read_capped(READ_CAP_BYTES as u64).map_err(|e| match e {
        fs_paths::ReadCapError::TooBig(n) => ToolError::File(format!(
            "'{}' is {}{n} bytes, over the 2 MB limit of this tool; read parts of it with \
             fs-read-file (offset/limit).",
            r.display,
            if n == READ_CAP_BYTES as u64 + 1 {
                "more than "
            } else {
                ""
            }
        )),
        fs_paths::ReadCapError::Other(m) => m,
    })?;
    String::from_utf8(bytes).map_err(|e| {
        ToolError::File(format!(
            "'{}' is not UTF-8 text (invalid byte at offset {}); fs-read-file reads it as \
             Latin-1.",
            r.display,
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Reads from `reader` into `buf` up to and including the next newline,
/// but at most `max` bytes; nothing beyond what is taken is consumed.
/// Returns the bytes taken (0 at the end of the file).
fn read_line_bounded<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<usize> {
    let mut taken = 0;
    while taken < max {
        let avail = reader.fill_buf()?;
        if avail.is_empty() {
            break;
        }
        let room = (max - taken).min(avail.len());
        let (n, done) = match memchr::memchr(b'\n', &avail[..room]) {
            Some(i) => (i + 1, true),
            None => (room, false),
        };
        buf.extend_from_slice(&avail[..n]);
        reader.consume(n);
        taken += n;
        if done {
            break;
        }
    }
    Ok(taken)
}

/// Skips up to and including the next newline without keeping anything.
/// Returns the bytes skipped (0 at the end of the file).
fn skip_line<R: BufRead>(reader: &mut R) -> std::io::Result<u64> {
    let mut skipped = 0u64;
    loop {
        let avail = reader.fill_buf()?;
        if avail.is_empty() {
            return Ok(skipped);
        }
        match memchr::memchr(b'\n', avail) {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(skipped + i as u64 + 1);
            }
            None => {
                let n = avail.len();
                reader.consume(n);
                skipped += n as u64;
            }
        }
    }
}

/// Skips `n` bytes of the current line. Returns `Err(len)` with the line's
/// length (newline included) when it ends first, or when nothing follows
/// the skipped bytes; nothing is kept.
fn skip_in_line<R: BufRead>(reader: &mut R, n: usize) -> std::io::Result<Result<(), usize>> {
    let mut skipped = 0usize;
    while skipped < n {
        let avail = reader.fill_buf()?;
        if avail.is_empty() {
            return Ok(Err(skipped));
        }
        let room = (n - skipped).min(avail.len());
        if let Some(i) = memchr::memchr(b'\n', &avail[..room]) {
            return Ok(Err(skipped + i + 1));
        }
        reader.consume(room);
        skipped += room;
    }
    if reader.fill_buf()?.is_empty() {
        return Ok(Err(skipped));
    }
    Ok(Ok(()))
}

/// A page of a file: at most `limit` lines and at most the 2 MB cap.
struct Page {
    content: Vec<u8>,
    /// Whole lines taken.
    taken: usize,
    /// The cap stopped the page.
    capped: bool,
    /// Where the page stopped inside a line too long for one page.
    stopped_in_line: Option<usize>,
}

/// Reads the next page from `reader`; `byte_offset` is where in its line
/// the first line starts.
fn read_page<R: BufRead>(
    reader: &mut R,
    limit: usize,
    byte_offset: usize,
) -> std::io::Result<Page> {
    let mut content: Vec<u8> = Vec::new();
    let mut line: Vec<u8> = Vec::new();
    let mut taken = 0usize;
    let mut capped = false;
    let mut stopped_in_line: Option<usize> = None;
    while taken < limit {
        let line_start_byte = if taken == 0 { byte_offset } else { 0 };
        line.clear();
        // One byte more than fits tells a line that does not fit; nothing
        // past the cap is ever held.
        let room = READ_CAP_BYTES - content.len() + 1;
        if read_line_bounded(reader, &mut line, room)? == 0 {
            break;
        }
        if content.len() + line.len() > READ_CAP_BYTES {
            capped = true;
            if taken == 0 {
                // One giant line: return its next 2 MB, cut at a character
                // boundary; the next page goes on inside the same line.
                let mut cut = READ_CAP_BYTES;
                while cut > 0 && (line[cut] & 0xC0) == 0x80 {
                    cut -= 1;
                }
                content.extend_from_slice(&line[..cut]);
                stopped_in_line = Some(line_start_byte + cut);
            }
            break;
        }
        content.extend_from_slice(&line);
        taken += 1;
    }
    Ok(Page {
        content,
        taken,
        capped,
        stopped_in_line,
    })
}

fn read_file(a: ReadArgs, session: &Session) -> ToolOutput {
    let r = match resolve_existing_file(session, &a.path) {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e),
    };
    let offset = a.offset.unwrap_or(0);
    let limit = a.limit.unwrap_or(usize::MAX);
    if limit == 0 {
        return ToolOutput::error("`limit` must be at least 1 (lines).");
    }
    let file = match r.open_regular() {
        Ok((f, _)) => f,
        Err(e) => return ToolOutput::error(e),
    };
    let fail = |e: std::io::Error| ToolOutput::error(fs_paths::io_message("read", &r.display, &e));
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, file);
    let mut index = 0usize;
    // Skip to `offset` without keeping what is skipped (a line of any
    // length costs only the buffer).
    while index < offset {
        match skip_line(&mut reader) {
            Ok(0) => break,
            Ok(_) => index += 1,
            Err(e) => return fail(e),
        }
    }
    if index < offset {
        return ToolOutput::error(format!(
            "`offset` {offset} is past the end of '{}', which has {index} lines.",
            r.display
        ));
    }
    // Continue inside line `offset` from `byteOffset`, when given: the
    // bytes before it are skipped, not read into memory.
    let byte_offset = a.byte_offset.unwrap_or(0);
    if byte_offset > 0 {
        match skip_in_line(&mut reader, byte_offset) {
            Ok(Ok(())) => {}
            Ok(Err(len)) => {
                return ToolOutput::error(format!(
                    "`byteOffset` {byte_offset} is past the end of line {} of '{}', which has \
                     {len} bytes.",
                    offset + 1,
                    r.display
                ))
            }
            Err(e) => return fail(e),
        }
    }
    let Page {
        content,
        taken,
        capped,
        stopped_in_line,
    } = match read_page(&mut reader, limit, byte_offset) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let has_more = capped || reader.fill_buf().map(|b| !b.is_empty()).unwrap_or(false);
    if content.iter().take(8192).any(|&b| b == 0) {
        return ToolOutput::error(format!(
            "'{}' looks like a binary file (it contains NUL bytes); fs-read-file reads text only.",
            r.display
        ));
    }
    // Text that is not UTF-8 is shown as Latin-1, every byte as itself,
    // and said so: no byte is replaced by U+FFFD.
    let (mut text, encoding) = match String::from_utf8(content) {
        Ok(s) => (s, "utf-8"),
        Err(e) => (latin1(e.as_bytes()), "latin-1"),
    };
    let encoding_note = (encoding == "latin-1").then(|| {
        format!(
                "[{}: not UTF-8; decoded as Latin-1 (ISO-8859-1), one character per byte.              fs-write-file writes such a file back in Latin-1.]\n",
            r.display
        )
    });
    let next_offset = has_more.then_some(offset + taken);
    let structured = ReadOutput {
        path: r.display.clone(),
        content: text.clone(),
        offset,
        lines: taken.max(usize::from(stopped_in_line.is_some())),
        has_more,
        next_offset,
        next_byte_offset: stopped_in_line,
        encoding,
    };
    if let Some(note) = encoding_note {
        text.insert_str(0, &note);
    }
    if let Some(next) = next_offset {
        if !text.ends_with('\n') && !text.is_empty() {
            text.push('\n');
        }
        let note = match stopped_in_line {
            Some(end) => format!(
                "[{}: showed bytes {}-{} of line {}, which is longer than the 2 MB per-call cap. \
                 Next page: offset={next}, byteOffset={end}]",
                r.display,
                byte_offset,
                end,
                offset + 1
            ),
            None => format!(
                "[{}: showed lines {}-{}; {}. Next page: offset={next}]",
                r.display,
                offset + 1,
                offset + taken,
                if capped {
                    "the 2 MB per-call cap was reached"
                } else {
                    "the line limit was reached"
                }
            ),
        };
        text.push_str(&note);
    }
    ToolOutput::structured(text, to_json(&structured))
}

/// Latin-1 (ISO-8859-1) text of `bytes`: each byte the character of that code.
fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

/// Whether the existing file `r` holds text that is not UTF-8 (files over
/// 64 MB are not checked).
fn existing_not_utf8(r: &fs_paths::ResolvedPath) -> bool {
    r.exists
        && r.read_capped(64 << 20)
            .is_ok_and(|b| std::str::from_utf8(&b).is_err())
}

fn write_file(a: WriteArgs, session: &Session) -> ToolOutput {
    if a.path.trim().is_empty() {
        return ToolOutput::error(
            "`path` is empty: give a file path relative to the project root.",
        );
    }
    let r = match resolve_for(session, &a.path, Access::Write) {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e.0),
    };
    if r.path.is_dir() {
        return ToolOutput::error(format!("'{}' is a directory; give a file path.", r.display));
    }
    let mut a = a;
    let mut repairs = Vec::new();
    let mut repair_diff = String::new();
    if a.repair_parens != Some(false) && crate::tools::parens::is_lisp_path(&r.path) {
        match crate::tools::parens::repair(&a.content) {
            Ok(None) => {}
            Ok(Some(rep)) => {
                a.content = rep.text;
                repairs = rep.changes;
                repair_diff = rep.diff;
            }
            Err(e) => {
                return ToolOutput::error(format!(
                    "Not written: in {}, {e} Pass `repairParens: false` to write it as it is.",
                    r.display
                ))
            }
        }
    }
    // A file that is not UTF-8 (fs-read-file showed it as Latin-1) is
    // written back in Latin-1; text where U+FFFD stands for bytes a reader
    // could not decode would destroy them, and is refused.
    let mut bytes = std::borrow::Cow::Borrowed(a.content.as_bytes());
    let mut encoding = None;
    if existing_not_utf8(&r) {
        if a.content.contains('\u{FFFD}') {
            return ToolOutput::error(format!(
                "Not written: '{}' is not UTF-8, and `content` holds U+FFFD replacement \
                 characters, which stand for bytes that were lost in decoding; writing would \
                 destroy them. Read the file with fs-read-file (it decodes such files as Latin-1) \
                 and write that text.",
                r.display
            ));
        }
        if a.content.chars().all(|c| u32::from(c) <= 0xFF) {
            bytes = std::borrow::Cow::Owned(a.content.chars().map(|c| c as u8).collect());
            encoding = Some("latin-1");
        } else {
            encoding = Some("utf-8");
        }
    }
    let replaced = match fs_paths::atomic_write(&r, &bytes) {
        Ok(replaced) => replaced,
        Err(e) => return ToolOutput::error(e),
    };
    let out = WriteOutput {
        path: r.display.clone(),
        bytes: bytes.len(),
        created: !replaced,
        encoding,
        repairs,
    };
    let repaired = if out.repairs.is_empty() {
        String::new()
    } else {
        format!(
            "\nRepaired the parentheses by indentation before writing ({}):\n{}",
            crate::tools::parens::changes_phrase(&out.repairs),
            repair_diff.trim_end()
        )
    };
    ToolOutput::structured(
        format!(
            "{} {} ({}{}).{repaired}",
            if replaced { "Replaced" } else { "Created" },
            r.display,
            counted(bytes.len(), "byte", "bytes"),
            match encoding {
                Some("latin-1") => ", in Latin-1 as it was",
                Some(_) =>
                    ", now UTF-8: it was not UTF-8, and `content` has characters Latin-1 lacks",
                None => "",
            }
        ),
        to_json(&out),
    )
}

fn list_directory(a: ListArgs, session: &Session) -> ToolOutput {
    let user = a.path.unwrap_or_default();
    let r = match resolve_for(session, &user, Access::Read) {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e.0),
    };
    if !r.exists {
        return ToolOutput::error(format!("Directory not found: '{user}'."));
    }
    if !r.path.is_dir() {
        return ToolOutput::error(format!(
            "'{}' is a file, not a directory; read it with fs-read-file.",
            r.display
        ));
    }
    // Listed through a handle opened beneath the root, so a directory
    // swapped for a symlink meanwhile is not followed out of it.
    let dir = match r.open_dir() {
        Ok(d) => d,
        Err(e) => return ToolOutput::error(e),
    };
    let rd = match dir.entries() {
        Ok(rd) => rd,
        Err(e) => return ToolOutput::error(fs_paths::io_message("list", &r.display, &e)),
    };
    let mut entries: Vec<ListEntry> = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let (kind, size, target) = match e.file_type() {
            Ok(t) if t.is_symlink() => (
                "symlink",
                None,
                dir.read_link_contents(e.file_name())
                    .ok()
                    .map(|p| p.display().to_string()),
            ),
            Ok(t) if t.is_dir() => ("directory", None, None),
            Ok(t) if t.is_file() => ("file", e.metadata().ok().map(|m| m.len()), None),
            _ => ("other", None, None),
        };
        entries.push(ListEntry {
            name,
            kind,
            size,
            target,
        });
    }
    entries.sort_by(|x, y| x.name.cmp(&y.name));
    let total = entries.len();
    let directories = entries.iter().filter(|e| e.kind == "directory").count();
    let files = entries.iter().filter(|e| e.kind == "file").count();
    let truncated = total > LIST_CAP;
    entries.truncate(LIST_CAP);
    let mut text = format!(
        "{} ({}: {}, {}{})\n",
        r.display,
        counted(total, "entry", "entries"),
        counted(directories, "directory", "directories"),
        counted(files, "file", "files"),
        match total - directories - files {
            0 => String::new(),
            n => format!(", {n} other"),
        }
    );
    for e in &entries {
        match (e.kind, e.size, &e.target) {
            ("directory", _, _) => text.push_str(&format!("  {}/\n", e.name)),
            (_, Some(size), _) => text.push_str(&format!(
                "  {}  ({})\n",
                e.name,
                counted(size as usize, "byte", "bytes")
            )),
            ("symlink", _, Some(t)) => text.push_str(&format!("  {} -> {t}\n", e.name)),
            (kind, _, _) => text.push_str(&format!("  {}  ({kind})\n", e.name)),
        }
    }
    if truncated {
        text.push_str(&format!(
            "[showing the first {LIST_CAP} of {total} entries]\n"
        ));
    }
    let out = ListOutput {
        path: r.display,
        entries,
        total,
        directories,
        files,
        truncated,
    };
    ToolOutput::structured(text, to_json(&out))
}

fn project_info(session: &Session) -> ToolOutput {
    let root = session.project_root();
    let cwd = std::env::current_dir()
        .ok()
        .map(|c| c.canonicalize().unwrap_or(c));
    // The session does not record who set the root; it is inferred from the
    // configuration: a configured root that is still current came from the
    // command line, the working directory is the fallback, anything else
    // was set during the session.
    let source = if session.config.project_root.as_deref() == Some(root.as_path()) {
        "command-line"
    } else if session.config.project_root.is_none() && cwd.as_deref() == Some(root.as_path()) {
        "working-directory"
    } else {
        "session"
    };
    let relative_cwd = cwd
        .as_deref()
        .and_then(|c| c.strip_prefix(&root).ok())
        .map(|p| {
            if p.as_os_str().is_empty() {
                ".".to_string()
            } else {
                p.display().to_string()
            }
        });
    let info = ProjectInfo {
        project_root: root.display().to_string(),
        cwd: cwd.as_ref().map(|c| c.display().to_string()),
        relative_cwd,
        project_root_source: source,
    };
    let how = match source {
        "command-line" => "set by --project-root / MCP_PROJECT_ROOT",
        "working-directory" => "the server's working directory (no root was given)",
        _ => "set during this session (client roots or fs-set-project-root)",
    };
    ToolOutput::structured(
        format!(
            "Project root: {} ({how})\nWorking directory: {}",
            info.project_root,
            info.cwd.as_deref().unwrap_or("unknown")
        ),
        to_json(&info),
    )
}

fn set_project_root(a: SetRootArgs, session: &Session) -> ToolOutput {
    let previous = session.project_root();
    if a.path.trim().is_empty() {
        return ToolOutput::error(format!(
            "`path` is empty: give the new project root, an existing directory (absolute paths \
             are safest). The root stays {}.",
            previous.display()
        ));
    }
    let raw = PathBuf::from(a.path.trim());
    let raw = if raw.is_absolute() {
        raw
    } else {
        previous.join(raw)
    };
    let canon = match raw.canonicalize() {
        Ok(c) => c,
        Err(e) => {
            return ToolOutput::error(format!(
                "Cannot use '{}' as the project root: {e}. Give an existing directory (absolute \
                 paths are safest).",
                a.path
            ))
        }
    };
    if !canon.is_dir() {
        return ToolOutput::error(format!(
            "Cannot use '{}' as the project root: it is not a directory.",
            a.path
        ));
    }
    let allowed = session.allowed_roots();
    if !session.config.allow_any_root && !allowed.iter().any(|r| canon.starts_with(r)) {
        let list: Vec<String> = allowed.iter().map(|r| r.display().to_string()).collect();
        return ToolOutput::error(format!(
            "Cannot move the project root to {}: it is outside the roots this session may use \
             ({}: the root the server started with and the client's roots). Start the server \
             with a --project-root that contains it, declare it as a client root, or start it \
             with --allow-any-root. The root stays {}.",
            canon.display(),
            list.join(", "),
            previous.display()
        ));
    }
    session.set_project_root(&canon);
    let out = SetRootOutput {
        project_root: canon.display().to_string(),
        previous_root: previous.display().to_string(),
    };
    let mut text = format!(
        "Project root set to {} (was {}).",
        out.project_root, out.previous_root
    );
    text.push('\n');
    text.push_str(&image_root_note(session));
    if let Some(line) = sandbox_root_note(session, &canon) {
        text.push('\n');
        text.push_str(&line);
    }
    ToolOutput::structured(text, to_json(&out))
}

/// What the new root means for the session's image: an image of ours moves
/// there (working directory, `*default-pathname-defaults*`); an attached
/// one, the user's, is only told.
fn image_root_note(session: &Session) -> String {
    let attached = match session.image_if_started() {
        Some(image) => image.mode() == crate::image::ImageMode::Attached,
        None => session.config.image.attach.is_some(),
    };
    if attached {
        "The attached image is told (the root's systems become findable by name) but not moved: \
         its working directory and *default-pathname-defaults* stay the user's."
            .into()
    } else {
        "The image's working directory and *default-pathname-defaults* move there with its next \
         call (relative paths in code, e.g. (load \"stub\"), then mean the root's files)."
            .into()
    }
}

/// When the running image's sandbox does not let it write under the new
/// root: a line saying so and how to move it (the rules are fixed at start).
fn sandbox_root_note(session: &Session, root: &Path) -> Option<String> {
    let report = session.image_if_started()?.info().sandbox?;
    if report.mode == crate::image::sandbox::SandboxMode::Off || !report.enforced {
        return None;
    }
    if report.write.iter().any(|w| root.starts_with(w)) {
        return None;
    }
    Some(format!(
        "[SANDBOX] The running image (--sandbox {}) may still write only under its start \
         root, not under {}; image-restart starts one confined to the new root (its Lisp \
         state is lost).",
        report.mode.as_str(),
        root.display()
    ))
}

/// Serializes a tool's output struct (infallible for our plain types).
pub(crate) fn to_json<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_else(|e| json!({ "serializationError": e.to_string() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_cap_refuses_big_files_for_source_tools() {
        let dir = std::env::temp_dir()
            .canonicalize()
            .unwrap()
            .join(format!("fs-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("big.lisp");
        std::fs::write(&p, vec![b'a'; READ_CAP_BYTES + 1]).unwrap();
        let r = fs_paths::resolve(&dir, "big.lisp", Access::Read, &[]).unwrap();
        let e = read_text_capped(&r).unwrap_err();
        assert!(e.to_string().contains("over the 2 MB limit"), "{e}");
        std::fs::write(&p, "(ok)").unwrap();
        assert_eq!(read_text_capped(&r).unwrap(), "(ok)");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bounded_line_reads_keep_at_most_max_bytes() {
        let data = b"abc\ndefghij\nk";
        let mut rd = std::io::BufReader::with_capacity(4, &data[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line_bounded(&mut rd, &mut buf, 100).unwrap(), 4);
        assert_eq!(buf, b"abc\n");
        buf.clear();
        assert_eq!(read_line_bounded(&mut rd, &mut buf, 5).unwrap(), 5);
        assert_eq!(buf, b"defgh");
        buf.clear();
        assert_eq!(read_line_bounded(&mut rd, &mut buf, 100).unwrap(), 3);
        assert_eq!(buf, b"ij\n");
        assert_eq!(skip_line(&mut rd).unwrap(), 1);
        assert_eq!(skip_line(&mut rd).unwrap(), 0);
        let mut rd = std::io::BufReader::with_capacity(4, &data[..]);
        assert_eq!(skip_in_line(&mut rd, 3).unwrap(), Ok(()));
        let mut rd = std::io::BufReader::with_capacity(4, &data[..]);
        assert_eq!(skip_in_line(&mut rd, 4).unwrap(), Err(4));
        let mut rd = std::io::BufReader::with_capacity(4, &b"xy"[..]);
        assert_eq!(skip_in_line(&mut rd, 2).unwrap(), Err(2));
    }
}
