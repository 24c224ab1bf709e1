//! The path policy every file-touching tool goes through, and atomic writes.
//!
//! A user path is resolved against the session's project root and made
//! canonical (symlinks resolved) *before* it is checked, so `..`, absolute
//! paths and symlinks that lead out of the root are all caught by one test:
//! "is the canonical path under an allowed root?". A path that does not exist
//! yet (a file about to be written) is checked through its deepest existing
//! ancestor, which is canonicalized; the missing rest may not contain `..`.
//!
//! Reads are allowed under the project root and under extra read roots (the
//! source directories of ASDF systems, supplied by the image layer through
//! [`asdf_source_roots`]); writes only under the project root.
//!
//! The check above is made by name, and names can change under us: a
//! directory swapped for a symlink between the check and the use would
//! lead a later open or rename by path outside the root. So the check only
//! decides *which* allowed root a path is under and its path relative to
//! it; every open, create and rename then goes through a directory handle
//! opened on that root ([`cap_std::fs::Dir`]: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, or a component-by-component
//! walk where the kernel lacks it), which the kernel keeps beneath the root
//! whatever is renamed meanwhile. Files are opened non-blocking and checked
//! on the opened handle (`fstat`), so a FIFO or device swapped in after the
//! check is refused instead of blocking the open.

use std::ffi::OsString;
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{Dir, FileTypeExt, OpenOptions, OpenOptionsExt};

use super::ToolError;
use crate::session::Session;

/// What the caller wants to do with a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read a file or list a directory: project root or an extra read root.
    Read,
    /// Create, replace or edit: project root only.
    Write,
}

/// A path that passed the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedPath {
    /// Absolute, canonical (for the existing part) path.
    pub path: PathBuf,
    /// Whether something exists there now.
    pub exists: bool,
    /// The path as shown to the user: relative to the project root when
    /// inside it, else absolute.
    pub display: String,
    /// The allowed root (canonical) `path` lies under: the project root, or
    /// for reads an ASDF source directory. Every use of `path` goes through
    /// a handle on this directory.
    pub base: PathBuf,
}

/// Why a path was refused; the message says what and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathError(pub String);

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PathError {}

impl From<PathError> for ToolError {
    fn from(e: PathError) -> Self {
        ToolError::File(e.0)
    }
}

/// Extra directories reads may come from besides the project root: the
/// source directories of the ASDF systems the session's image has
/// registered, as last refreshed from the image. Every read tool
/// (`fs-read-file`, `fs-list-directory`, `lisp-read-file`,
/// `lisp-check-parens`, `clgrep-*`) allows them.
pub fn asdf_source_roots(session: &Session) -> Vec<PathBuf> {
    session.read_roots()
}

/// Resolves `user_path` (relative to `root`, or absolute) and checks it
/// against the policy for `access`. `extra_read_roots` are accepted for
/// [`Access::Read`] only. An empty path means the root itself.
pub fn resolve(
    root: &Path,
    user_path: &str,
    access: Access,
    extra_read_roots: &[PathBuf],
) -> Result<ResolvedPath, PathError> {
    let root = root.canonicalize().map_err(|e| {
        PathError(format!(
            "The project root {} is not accessible ({e}); set a valid one with fs-set-project-root.",
            root.display()
        ))
    })?;
    let trimmed = user_path.trim();
    let raw = if trimmed.is_empty() {
        root.clone()
    } else if Path::new(trimmed).is_absolute() {
        PathBuf::from(trimmed)
    } else {
        root.join(trimmed)
    };
    let (path, exists) = canonicalize_lenient(&raw).map_err(|why| {
        PathError(format!(
            "Refused path '{user_path}': {why}. The project root is {}.",
            root.display()
        ))
    })?;
    if path.starts_with(&root) {
        return Ok(ResolvedPath {
            display: display_path(&root, &path),
            path,
            exists,
            base: root,
        });
    }
    if access == Access::Read {
        for extra in extra_read_roots {
            let extra = extra.canonicalize().unwrap_or_else(|_| extra.clone());
            if path.starts_with(&extra) {
                return Ok(ResolvedPath {
                    display: path.display().to_string(),
                    path,
                    exists,
                    base: extra,
                });
            }
        }
    }
    let via = if raw != path {
        format!(" (it resolves to {})", path.display())
    } else {
        String::new()
    };
    let allowed = match access {
        Access::Write => "Writes are allowed only under the project root".to_string(),
        Access::Read if extra_read_roots.is_empty() => {
            "Reads are allowed only under the project root".to_string()
        }
        Access::Read => format!(
            "Reads are allowed only under the project root or an ASDF system's source directory ({})",
            extra_read_roots
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    Err(PathError(format!(
        "Refused path '{user_path}'{via}: it is outside the project root {}. {allowed}; \
         use a path inside it, or change the root with fs-set-project-root.",
        root.display()
    )))
}

/// Why a path cannot be resolved (the words complete "Refused path 'p': …").
#[derive(Debug, thiserror::Error)]
enum Unresolvable {
    #[error("cannot resolve it ({0})")]
    Path(std::io::Error),
    #[error("{} is a symbolic link whose target does not exist", .0.display())]
    DanglingLink(PathBuf),
    #[error("'..' may not follow a directory that does not exist")]
    ParentOfMissing,
    #[error("no part of it exists")]
    NothingExists,
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("cannot resolve {dir} ({1})", dir = .0.display())]
    Ancestor(PathBuf, std::io::Error),
}

/// Canonicalizes `raw`; if it does not exist, canonicalizes its deepest
/// existing ancestor and appends the rest, which must be plain names.
/// Returns the path and whether it exists.
fn canonicalize_lenient(raw: &Path) -> Result<(PathBuf, bool), Unresolvable> {
    match raw.canonicalize() {
        Ok(p) => return Ok((p, true)),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Unresolvable::Path(e)),
        Err(_) => {}
    }
    let mut rest: Vec<OsString> = Vec::new();
    let mut cur = raw.to_path_buf();
    loop {
        // A name that exists as a symlink but does not canonicalize is a
        // dangling link: following it later could land anywhere.
        if std::fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(Unresolvable::DanglingLink(cur));
        }
        let name = match cur.components().next_back() {
            Some(Component::Normal(n)) => n.to_os_string(),
            Some(Component::CurDir) => OsString::new(),
            Some(Component::ParentDir) => return Err(Unresolvable::ParentOfMissing),
            _ => return Err(Unresolvable::NothingExists),
        };
        if !name.is_empty() {
            rest.push(name);
        }
        if !cur.pop() {
            return Err(Unresolvable::NothingExists);
        }
        match cur.canonicalize() {
            Ok(base) => {
                if !base.is_dir() {
                    return Err(Unresolvable::NotADirectory(base));
                }
                let mut p = base;
                for n in rest.iter().rev() {
                    p.push(n);
                }
                return Ok((p, false));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Unresolvable::Ancestor(cur, e)),
        }
    }
}

/// `path` relative to `root` when inside it (`.` for the root), else absolute.
pub fn display_path(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// What a non-regular file is, for messages.
fn describe(dir: bool, link: bool, fifo: bool, socket: bool, device: bool) -> &'static str {
    if dir {
        "a directory"
    } else if link {
        "a symbolic link"
    } else if fifo {
        "a named pipe (FIFO)"
    } else if socket {
        "a socket"
    } else if device {
        "a device"
    } else {
        "not a regular file"
    }
}

fn kind_of(t: cap_std::fs::FileType) -> &'static str {
    describe(
        t.is_dir(),
        t.is_symlink(),
        t.is_fifo(),
        t.is_socket(),
        t.is_block_device() || t.is_char_device(),
    )
}

fn kind_of_std(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    describe(
        t.is_dir(),
        t.is_symlink(),
        t.is_fifo(),
        t.is_socket(),
        t.is_block_device() || t.is_char_device(),
    )
}

/// An I/O error on `shown`, worded for the model. cap-std reports a walk
/// that would leave the root (a symlink or a swapped directory) as
/// `PermissionDenied`; say what that means.
pub fn io_message(verb: &str, shown: &str, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::PermissionDenied && e.raw_os_error().is_none() {
        format!(
            "Cannot {verb} '{shown}': the path now leads outside its root (a directory or \
             symbolic link changed while it was being opened); refused."
        )
    } else {
        format!("Cannot {verb} '{shown}': {e}")
    }
}

impl ResolvedPath {
    /// `path` relative to [`Self::base`] (`.` for the base itself).
    pub fn rel(&self) -> PathBuf {
        rel_under(&self.base, &self.path)
    }

    /// A handle on the allowed root this path lies under.
    pub fn base_dir(&self) -> std::io::Result<Dir> {
        Dir::open_ambient_dir(&self.base, cap_std::ambient_authority())
    }

    /// Opens the directory at this path beneath its root (for listing).
    pub fn open_dir(&self) -> Result<Dir, ToolError> {
        let base = self
            .base_dir()
            .map_err(|e| ToolError::File(io_message("open", &self.display, &e)))?;
        base.open_dir(self.rel())
            .map_err(|e| ToolError::File(io_message("open", &self.display, &e)))
    }

    /// Opens the regular file at this path for reading, beneath its root,
    /// without blocking: a FIFO, socket or device (even one swapped in after
    /// the policy check) is refused on the opened handle.
    pub fn open_regular(&self) -> Result<(std::fs::File, std::fs::Metadata), ToolError> {
        let base = self
            .base_dir()
            .map_err(|e| ToolError::File(io_message("read", &self.display, &e)))?;
        open_regular_in(&base, &self.rel(), &self.display)
    }

    /// Reads the whole regular file, refusing one over `cap` bytes; never
    /// holds more than `cap + 1` bytes, even if the file grows meanwhile.
    pub fn read_capped(&self, cap: u64) -> Result<Vec<u8>, ReadCapError> {
        let (file, meta) = self.open_regular().map_err(ReadCapError::Other)?;
        read_capped(file, meta.len(), cap, &self.display)
    }
}

/// Why [`ResolvedPath::read_capped`] failed.
#[derive(Debug)]
pub enum ReadCapError {
    /// The file has more bytes than the cap (at least this many).
    TooBig(u64),
    /// Anything else, worded for the model.
    Other(ToolError),
}

/// Reads at most `cap + 1` bytes of `file`: `TooBig` when there are more
/// than `cap`.
pub fn read_capped(
    file: std::fs::File,
    size_hint: u64,
    cap: u64,
    shown: &str,
) -> Result<Vec<u8>, ReadCapError> {
    if size_hint > cap {
        return Err(ReadCapError::TooBig(size_hint));
    }
    let mut bytes = Vec::with_capacity(size_hint as usize);
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ReadCapError::Other(ToolError::File(io_message("read", shown, &e))))?;
    if bytes.len() as u64 > cap {
        return Err(ReadCapError::TooBig(bytes.len() as u64));
    }
    Ok(bytes)
}

/// `path` relative to `base` (`.` for `base` itself).
pub fn rel_under(base: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix(base) {
        Ok(r) if r.as_os_str().is_empty() => PathBuf::from("."),
        Ok(r) => r.to_path_buf(),
        // Not reached for a ResolvedPath; a relative "." keeps any use
        // inside the base rather than escaping it.
        Err(_) => PathBuf::from("."),
    }
}

/// Opens `rel` beneath `dir` for reading with `O_NONBLOCK` (a FIFO's open
/// returns at once instead of waiting for a writer) and `O_NOCTTY`, then
/// requires the opened handle to be a regular file (`fstat`) and clears
/// `O_NONBLOCK` again. Returns the file and its metadata.
pub fn open_regular_in(
    dir: &Dir,
    rel: &Path,
    shown: &str,
) -> Result<(std::fs::File, std::fs::Metadata), ToolError> {
    let mut opts = OpenOptions::new();
    opts.read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC);
    let file = dir
        .open_with(rel, &opts)
        .map_err(|e| ToolError::File(io_message("read", shown, &e)))?
        .into_std();
    let meta = file
        .metadata()
        .map_err(|e| ToolError::File(io_message("read", shown, &e)))?;
    if !meta.is_file() {
        let t = meta.file_type();
        return Err(ToolError::File(if t.is_dir() {
            format!("'{shown}' is a directory; use fs-list-directory to see its entries.")
        } else {
            format!(
                "'{shown}' is {}; only regular files are read or edited (nothing waits on a \
                 pipe, socket or device).",
                kind_of_std(t)
            )
        }));
    }
    // SAFETY: fcntl on a descriptor we own; only the status flags change.
    unsafe {
        let fd = file.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok((file, meta))
}

/// Opens, for an instant, the writing end of a named pipe that now stands
/// at `path` (a file that was checked as regular, then replaced), so that a
/// reader stuck opening it (a compiler given the path) gets end-of-file
/// instead of waiting for a writer forever. Only a pipe beneath `root` is
/// touched. Returns true when a reader was waiting on one.
pub fn release_pipe_readers(path: &Path, root: &Path) -> bool {
    let (Ok(real), Ok(root)) = (std::fs::canonicalize(path), std::fs::canonicalize(root)) else {
        return false;
    };
    real.starts_with(&root) && release_pipe(&real)
}

/// Most entries of one directory [`release_pipes_beside`] looks through.
const PIPES_BESIDE_LIMIT: usize = 10_000;

/// [`release_pipe_readers`] for every named pipe in the directory of
/// `path` (beneath `root`): for a reader stuck on a pipe that was swapped
/// in at `path` for an instant and swapped out again, under another name
/// beside it. Returns true when a reader was waiting on one.
pub fn release_pipes_beside(path: &Path, root: &Path) -> bool {
    let (Some(dir), Ok(root)) = (path.parent(), std::fs::canonicalize(root)) else {
        return false;
    };
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return false;
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return false;
    };
    if !dir.starts_with(&root) {
        return false;
    }
    let mut released = false;
    for e in entries.take(PIPES_BESIDE_LIMIT).flatten() {
        if e.file_type().is_ok_and(|t| {
            use std::os::unix::fs::FileTypeExt as _;
            t.is_fifo()
        }) {
            released |= release_pipe(&e.path());
        }
    }
    released
}

/// Opens the writing end of the named pipe at `real` for an instant
/// (without waiting, without following a link): a reader waiting on it gets
/// end-of-file. True when one was waiting.
fn release_pipe(real: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
    let is_pipe = |m: &std::fs::Metadata| m.file_type().is_fifo();
    if !std::fs::symlink_metadata(real).is_ok_and(|m| is_pipe(&m)) {
        return false;
    }
    // Without a reader waiting, a non-blocking open for writing fails
    // (ENXIO): nothing happens then.
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(real)
        .is_ok_and(|f| f.metadata().is_ok_and(|m| is_pipe(&m)))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `content` as the file at `r` atomically and beneath its root: the
/// parent directory (created when missing) is opened as a handle beneath
/// the root; a temporary file in it is written, synced, given the original
/// file's permission mode (when replacing one), then renamed over the name,
/// both relative to that same handle. Readers see the old or the new
/// content, never a mix; a failure leaves the original untouched. Only a
/// regular file is replaced: a directory, FIFO, socket, device or a symlink
/// that appeared since the check is refused. Returns whether a file was
/// replaced (false: created).
pub fn atomic_write(r: &ResolvedPath, content: &[u8]) -> Result<bool, ToolError> {
    let shown = r.display.as_str();
    let rel = r.rel();
    let name = match rel.file_name() {
        Some(n) if rel != Path::new(".") => n.to_os_string(),
        _ => {
            return Err(ToolError::File(format!(
                "'{shown}' is a directory; give a file path."
            )))
        }
    };
    let fail = |e: std::io::Error| ToolError::File(io_message("write", shown, &e));
    let base = r.base_dir().map_err(fail)?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    let dir = if parent.as_os_str().is_empty() {
        base
    } else {
        // "Exists" but not as a directory beneath the root (a file, or a
        // symlink out of it): opening it says which.
        match base.create_dir_all(parent) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(fail(e)),
            _ => {}
        }
        base.open_dir(parent).map_err(fail)?
    };
    let original_mode = match dir.symlink_metadata(&name) {
        Ok(m) if m.is_file() => Some(m.permissions()),
        Ok(m) if m.is_dir() => {
            return Err(ToolError::File(format!(
                "'{shown}' is a directory; give a file path."
            )))
        }
        Ok(m) => {
            return Err(ToolError::File(format!(
                "'{shown}' is {}; only a regular file is replaced. Remove it first if you \
                 mean to replace it.",
                kind_of(m.file_type())
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(fail(e)),
    };
    let tmp = format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let result = (|| {
        let mut opts = OpenOptions::new();
        opts.write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        let mut f = dir.open_with(&tmp, &opts)?;
        f.write_all(content)?;
        if let Some(perm) = original_mode.clone() {
            f.set_permissions(perm)?;
        }
        let f = f.into_std();
        f.set_modified(next_whole_second(std::time::SystemTime::now()))?;
        f.sync_all()?;
        dir.rename(&tmp, &dir, &name)
    })();
    if let Err(e) = result {
        let _ = dir.remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(original_mode.is_some())
}

/// The modification time a written file gets: the next whole second.
/// ASDF (like `file-write-date`) compares dates by the second and rebuilds
/// only an output older than its source, so a file edited in the same
/// second as its fasl was compiled would otherwise look up to date, and the
/// fix an agent just wrote would not be built.
fn next_whole_second(now: std::time::SystemTime) -> std::time::SystemTime {
    let secs = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_are_dated_the_next_whole_second() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(10_300);
        assert_eq!(
            next_whole_second(t),
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(11)
        );
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(10);
        assert_eq!(
            next_whole_second(t),
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(11)
        );
    }

    #[test]
    fn dot_components_in_missing_rest() {
        let dir = std::env::temp_dir().canonicalize().unwrap();
        let (p, exists) = canonicalize_lenient(&dir.join("no-such-x/./y")).unwrap();
        assert!(!exists);
        assert_eq!(p, dir.join("no-such-x/y"));
        assert!(canonicalize_lenient(&dir.join("no-such-x/../y")).is_err());
    }

    #[test]
    fn extra_read_roots_allow_reads_only() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let root = base.join("root");
        let lib = base.join("lib");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("x.lisp"), "(x)").unwrap();
        let target = lib.join("x.lisp").display().to_string();
        let extra = [lib.clone()];
        let r = resolve(&root, &target, Access::Read, &extra).unwrap();
        assert_eq!(r.display, target, "outside the root: shown absolute");
        let e = resolve(&root, &target, Access::Write, &extra).unwrap_err();
        assert!(
            e.0.contains("Writes are allowed only under the project root"),
            "{e}"
        );
        let e = resolve(&root, &target, Access::Read, &[]).unwrap_err();
        assert!(
            e.0.contains("Reads are allowed only under the project root;"),
            "{e}"
        );
    }

    /// What a race could leave between the check and the use: the handle
    /// refuses a symlink out of the root, and a write never replaces a
    /// symlink or FIFO.
    #[test]
    fn handles_refuse_what_a_race_could_swap_in() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let root = base.join("root");
        let out = base.join("out");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("x"), "outside").unwrap();
        std::os::unix::fs::symlink(&out, root.join("sub")).unwrap();
        std::os::unix::fs::symlink(out.join("x"), root.join("l")).unwrap();
        let at = |rel: &str| ResolvedPath {
            path: root.join(rel),
            exists: true,
            display: rel.to_string(),
            base: root.clone(),
        };
        let e = at("sub/x").open_regular().unwrap_err();
        assert!(e.to_string().contains("leads outside its root"), "{e}");
        let e = atomic_write(&at("sub/y"), b"new").unwrap_err();
        assert!(e.to_string().contains("leads outside its root"), "{e}");
        let e = atomic_write(&at("l"), b"new").unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(out.join("x")).unwrap(), "outside");
        assert!(!out.join("y").exists());
        let fifo = std::ffi::CString::new(root.join("p").as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let e = atomic_write(&at("p"), b"new").unwrap_err();
        assert!(e.to_string().contains("named pipe (FIFO)"), "{e}");
        let e = at("p").open_regular().unwrap_err();
        assert!(e.to_string().contains("named pipe (FIFO)"), "{e}");
        assert_eq!(atomic_write(&at("new/f"), b"ok"), Ok(false));
        assert_eq!(atomic_write(&at("new/f"), b"ok2"), Ok(true));
        assert_eq!(std::fs::read_to_string(root.join("new/f")).unwrap(), "ok2");
    }
}
