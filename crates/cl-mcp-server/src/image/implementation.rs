//! Which Common Lisp implementation runs the image, recognised by asking
//! the binary (`--version`), and how each one is started: its own flags for
//! no init file, no banner, loading a file, evaluating a form and a saved
//! image, the way Swank keeps one backend per implementation.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use super::jail::{ProcessJail, Purpose};
use super::stamp::file_stamp;
use super::ImageError;
use crate::sync::MutexExt;

/// A Common Lisp implementation the server knows how to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LispKind {
    /// Steel Bank Common Lisp: cached core (`save-lisp-and-die`).
    Sbcl,
    /// Embeddable Common Lisp: no saved images; Swank and the helpers load
    /// from fasls compiled once into the cache.
    Ecl,
    /// GNU CLISP: cached memory image (`saveinitmem`); no threads.
    Clisp,
    /// Armed Bear Common Lisp (on the JVM): fasls, like ECL.
    Abcl,
    /// Clozure CL: cached image (`save-application`).
    Ccl,
}

/// A capability of the image some implementations lack (see
/// [`LispKind::missing_features`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// Who calls, references, sets or binds a name (Swank's `xref`).
    CrossReferences,
    /// A statistical profiler.
    Profiler,
    /// Evaluating code in a debugger frame's lexical environment (Swank's
    /// `eval-in-frame`).
    EvalInFrame,
    /// A debugger frame's local variables beyond its arguments.
    FrameLocals,
    /// Returning a value from a debugger frame (`return-from-frame`).
    FrameReturn,
    /// Restarting a debugger frame (`restart-frame`).
    FrameRestart,
    /// Single-stepping from the debugger.
    Stepping,
}

impl Feature {
    /// What is missing, in a few words ("no profiler").
    pub fn lack(self) -> &'static str {
        match self {
            Feature::CrossReferences => "no cross-references",
            Feature::Profiler => "no profiler",
            Feature::EvalInFrame => "no code in a frame",
            Feature::FrameLocals => "locals: the arguments only",
            Feature::FrameReturn => "no return from a frame",
            Feature::FrameRestart => "no frame restart",
            Feature::Stepping => "no stepping",
        }
    }
}

impl LispKind {
    /// Every implementation, for error messages and name lookup.
    pub const ALL: [LispKind; 5] = [
        LispKind::Sbcl,
        LispKind::Ecl,
        LispKind::Clisp,
        LispKind::Abcl,
        LispKind::Ccl,
    ];

    /// The short name (`--lisp NAME`).
    pub fn name(self) -> &'static str {
        match self {
            LispKind::Sbcl => "sbcl",
            LispKind::Ecl => "ecl",
            LispKind::Clisp => "clisp",
            LispKind::Abcl => "abcl",
            LispKind::Ccl => "ccl",
        }
    }

    /// The implementation a short name stands for.
    pub fn from_name(name: &str) -> Option<LispKind> {
        LispKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
    }

    /// The executables a short name is looked up as on `PATH`.
    pub fn executables(self) -> &'static [&'static str] {
        match self {
            LispKind::Sbcl => &["sbcl"],
            LispKind::Ecl => &["ecl"],
            LispKind::Clisp => &["clisp"],
            LispKind::Abcl => &["abcl"],
            LispKind::Ccl => &["ccl", "ccl64", "lx86cl64", "lx86cl"],
        }
    }

    /// Recognises the implementation from what its `--version` printed.
    pub fn classify(version: &str) -> Option<LispKind> {
        let v = version.trim_start();
        if v.starts_with("SBCL") {
            Some(LispKind::Sbcl)
        } else if v.starts_with("ECL ") {
            Some(LispKind::Ecl)
        } else if v.contains("GNU CLISP") {
            Some(LispKind::Clisp)
        } else if v.contains("Armed Bear") {
            Some(LispKind::Abcl)
        } else if v.contains("Clozure") || (v.starts_with("Version ") && v.contains("(v")) {
            Some(LispKind::Ccl)
        } else {
            None
        }
    }

    /// Whether the implementation has threads for Swank's `:spawn` style
    /// (evaluations on a worker thread, introspection beside them).
    pub fn has_threads(self) -> bool {
        !matches!(self, LispKind::Clisp)
    }

    /// Start options shared by every start: no init files, no banner, no
    /// interactive low-level debugger. `image` is a saved image to start.
    pub fn start_args(self, image: Option<&Path>) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        match self {
            LispKind::Sbcl => {
                if let Some(c) = image {
                    a.push("--core".into());
                    a.push(c.into());
                }
                // No --lose-on-corruption: it makes control stack
                // exhaustion (deep recursion) fatal, and evaluate-lisp must
                // return it as an error with the image alive.
                for s in [
                    "--noinform",
                    "--disable-ldb",
                    "--end-runtime-options",
                    "--no-sysinit",
                    "--no-userinit",
                ] {
                    a.push(s.into());
                }
            }
            LispKind::Ecl => a.push("--norc".into()),
            LispKind::Clisp => {
                if let Some(m) = image {
                    a.push("-M".into());
                    a.push(m.into());
                }
                // -q -q: no banner, no goodbye; -norc: no ~/.clisprc;
                // -on-error abort: a batch error exits instead of a REPL;
                // -Efile/-Emisc/-Eterminal UTF-8: files, strings and the
                // terminal in UTF-8 whatever the locale (with no LANG,
                // CLISP reads ASCII only). Not every domain (-E alone):
                // UTF-8 for the foreign and pathname domains made Debian's
                // CLISP crash (SIGSEGV) in a FiveAM run.
                for s in [
                    "-q",
                    "-q",
                    "-norc",
                    "-on-error",
                    "abort",
                    "-Efile",
                    "UTF-8",
                    "-Emisc",
                    "UTF-8",
                    "-Eterminal",
                    "UTF-8",
                ] {
                    a.push(s.into());
                }
            }
            LispKind::Abcl => {
                for s in ["--noinform", "--noinit"] {
                    a.push(s.into());
                }
            }
            LispKind::Ccl => {
                if let Some(i) = image {
                    a.push("--image-name".into());
                    a.push(i.into());
                }
                for s in ["--no-init", "--quiet", "--batch"] {
                    a.push(s.into());
                }
            }
        }
        a
    }

    /// The option that evaluates one form.
    pub fn eval_flag(self) -> &'static str {
        match self {
            LispKind::Clisp => "-x",
            _ => "--eval",
        }
    }

    /// The option that loads one file.
    pub fn load_flag(self) -> &'static str {
        match self {
            LispKind::Clisp => "-i",
            _ => "--load",
        }
    }

    /// The form that exits the Lisp with `code` (for generated scripts).
    pub fn exit_form(self, code: i32) -> String {
        match self {
            LispKind::Sbcl => format!("(sb-ext:exit :code {code} :abort t)"),
            // ECL: without joining other threads (see boot.lisp's EXIT-NOW).
            LispKind::Ecl => format!("(ext:quit {code} nil)"),
            LispKind::Clisp => format!("(ext:quit {code})"),
            LispKind::Abcl => format!("(ext:exit :status {code})"),
            LispKind::Ccl => format!("(ccl:quit {code})"),
        }
    }

    /// How this implementation starts fast: a saved image, or fasls.
    pub fn saves_images(self) -> bool {
        matches!(self, LispKind::Sbcl | LispKind::Clisp | LispKind::Ccl)
    }

    /// Runtime options that cap the heap at `mb` MiB (`--memory-limit`),
    /// placed before every other argument; empty where the implementation
    /// takes no such option on its command line (ABCL: see
    /// [`LispKind::memory_env`]).
    pub fn memory_args(self, mb: u64) -> Vec<OsString> {
        match self {
            LispKind::Sbcl => vec![
                "--dynamic-space-size".into(),
                format!("{}", self.heap_mb(mb)).into(),
            ],
            LispKind::Ecl => vec!["--heap-size".into(), format!("{}", mb * 1024 * 1024).into()],
            // CLISP's own option; builds with memory-mapped heaps (Debian's)
            // ignore it, so the address-space cap below is what holds.
            LispKind::Clisp => vec!["-m".into(), format!("{mb}MB").into()],
            LispKind::Ccl => vec!["--heap-reserve".into(), format!("{mb}M").into()],
            LispKind::Abcl => Vec::new(),
        }
    }

    /// Whether `--memory-limit` is a soft limit inside the image: the
    /// helpers check the heap after each garbage collection and stop the
    /// evaluation that keeps more than the limit alive, the image living
    /// on (`check-memory-limit` in `lisp/capture.lisp`). SBCL only: it runs
    /// hooks after each collection.
    pub fn soft_memory_limit(self) -> bool {
        matches!(self, LispKind::Sbcl)
    }

    /// The runtime's own heap (MiB) for `--memory-limit mb`. Where the limit
    /// is soft, the heap is sized so that the collections that find it
    /// passed can still run: SBCL's copying collector needs free space as
    /// large as the generation it copies (a runaway allocation's data can
    /// be one generation), and the check's full collection copies all live
    /// data, so 2 × MB plus 256 MiB for the nursery and the image itself
    /// (measured: with 2 × 512 the image died in the collection that would
    /// have found the limit passed, with 2 × 512 + 256 it never did).
    pub fn heap_mb(self, mb: u64) -> u64 {
        if self.soft_memory_limit() {
            2 * mb + 256
        } else {
            mb
        }
    }

    /// Environment that caps the heap at `mb` MiB, given what the
    /// environment already says: ABCL's launcher is a script that runs
    /// `java`, which reads `JDK_JAVA_OPTIONS` (JDK 9 and later).
    pub fn memory_env(self, mb: u64, current: Option<&str>) -> Vec<(String, String)> {
        match self {
            LispKind::Abcl => {
                let opt = format!("-Xmx{mb}m");
                let v = match current.map(str::trim).filter(|c| !c.is_empty()) {
                    Some(c) => format!("{c} {opt}"),
                    None => opt,
                };
                vec![("JDK_JAVA_OPTIONS".into(), v)]
            }
            _ => Vec::new(),
        }
    }

    /// An address-space cap (`RLIMIT_AS`, bytes) for `--memory-limit mb`,
    /// only where it holds the heap and breaks nothing: CLISP, whose heap
    /// option is not enforced and whose address space is about its heap
    /// (it then reports "No more room for LISP objects"). Not SBCL, CCL
    /// (they reserve their heap's address space up front and cap it
    /// themselves), ECL (its collector caps it) or ABCL (a JVM reserves
    /// far more address space than it uses).
    pub fn address_space_cap(self, mb: u64) -> Option<u64> {
        match self {
            // The heap, plus the runtime, its libraries and stacks.
            LispKind::Clisp => Some((mb + 64) * 1024 * 1024),
            _ => None,
        }
    }

    /// What this implementation's Swank backend cannot do, so that no
    /// description promises what the running Lisp lacks (the caller says
    /// which tools that concerns).
    /// The debugger's come from the backends' unimplemented interfaces
    /// (`swank/ecl.lisp`, `swank/abcl.lisp`: no `eval-in-frame`,
    /// `return-from-frame`, `restart-frame`), and stepping is SBCL's
    /// stepper only; the Lisp side refuses each plainly
    /// (`backend-operation-problem` in `lisp/debug.lisp`).
    pub fn missing_features(self) -> &'static [Feature] {
        use Feature::*;
        match self {
            LispKind::Sbcl => &[],
            // swank/ecl implements no who-calls family.
            LispKind::Ecl => &[
                CrossReferences,
                Profiler,
                FrameReturn,
                FrameRestart,
                Stepping,
            ],
            // swank/clisp's portable xref sees only files compiled through
            // XREF:XREF-FILE. (It returns from and restarts interpreted
            // frames only: said when refused, not here.)
            LispKind::Clisp => &[CrossReferences, Profiler, Stepping],
            // swank/abcl reads a frame's arguments only.
            LispKind::Abcl => &[
                Profiler,
                EvalInFrame,
                FrameLocals,
                FrameReturn,
                FrameRestart,
                Stepping,
            ],
            LispKind::Ccl => &[Profiler, Stepping],
        }
    }

    /// What the runtime option for the heap is called, for `--help` texts
    /// and doctor hints.
    pub fn heap_hint(self) -> &'static str {
        match self {
            LispKind::Sbcl => "--lisp-arg=--dynamic-space-size --lisp-arg=4096",
            LispKind::Ecl => "--lisp-arg=--heap-size --lisp-arg=4294967296",
            LispKind::Clisp => "--lisp-arg=-m --lisp-arg=1GB",
            LispKind::Abcl => "--lisp-arg=-Xmx4g (through the abcl wrapper's JAVA_OPTS)",
            LispKind::Ccl => "--lisp-arg=--heap-reserve --lisp-arg=4g",
        }
    }
}

impl std::fmt::Display for LispKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Answers of earlier `--version` runs, by path and file stamp.
static DETECTED: Mutex<Option<HashMap<String, LispKind>>> = Mutex::new(None);

/// Which implementation the binary is: told by its file name when that is
/// one of an implementation's executables (`abcl`, `sbcl`, `lx86cl64`, …;
/// the name given, else the one a symbolic link leads to), else asked
/// (`--version`; a few seconds at most, a JVM takes a while) and remembered
/// per path and stamp. The name spares ABCL a whole JVM's start (2–4 s)
/// before the server answers `initialize` (its tool list notes what the
/// implementation lacks) and again before the image starts.
/// The `--version` run is confined by `jail` (the image's sandbox and caps).
pub fn detect(lisp: &Path, jail: &ProcessJail) -> Result<LispKind, ImageError> {
    if let Some(kind) = kind_by_file_name(lisp) {
        return Ok(kind);
    }
    let key = format!("{}:{}", lisp.display(), file_stamp(lisp));
    if let Some(k) = DETECTED.guard().as_ref().and_then(|m| m.get(&key).copied()) {
        return Ok(k);
    }
    let text = version_text(lisp, Duration::from_secs(30), jail)?;
    let kind = LispKind::classify(&text).ok_or_else(|| {
        ImageError::Implementation(format!(
            "{} is not a Lisp this server knows how to start (its --version said {:?}); \
             supported: {}",
            lisp.display(),
            text.lines().next().unwrap_or(""),
            LispKind::ALL.map(|k| k.name()).join(", ")
        ))
    })?;
    DETECTED
        .guard()
        .get_or_insert_with(HashMap::new)
        .insert(key, kind);
    Ok(kind)
}

/// The implementation whose executable `lisp` is named as (the path's own
/// file name, else its canonical one's), if any.
fn kind_by_file_name(lisp: &Path) -> Option<LispKind> {
    let by_name = |p: &Path| {
        let name = p.file_name()?.to_str()?;
        LispKind::ALL
            .into_iter()
            .find(|k| k.executables().contains(&name))
    };
    by_name(lisp).or_else(|| by_name(&std::fs::canonicalize(lisp).ok()?))
}

/// What `lisp --version` prints (stdout, else stderr), waiting at most
/// `wait`; its stdin is closed so a Lisp that starts a REPL instead ends.
/// Run in `jail`.
pub fn version_text(lisp: &Path, wait: Duration, jail: &ProcessJail) -> Result<String, ImageError> {
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(lisp);
    cmd.arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    jail.run(Purpose::Ask, &mut cmd, |cmd| {
        wait_for_version(cmd, lisp, wait)
    })
}

fn wait_for_version(
    cmd: &mut std::process::Command,
    lisp: &Path,
    wait: Duration,
) -> Result<String, ImageError> {
    let mut child = cmd
        .spawn()
        .map_err(|e| ImageError::Implementation(format!("cannot run {}: {e}", lisp.display())))?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ImageError::Implementation(format!(
                    "{} --version did not answer within {} s",
                    lisp.display(),
                    wait.as_secs()
                )));
            }
        }
    }
    let out = child.wait_with_output().map_err(|e| {
        ImageError::Implementation(format!("cannot read {} --version: {e}", lisp.display()))
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(if stdout.is_empty() {
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    } else {
        stdout
    })
}

/// The executable a `--lisp` value names: a path, or an implementation's
/// short name (`ccl` also finds `lx86cl64`), or any command on `PATH`.
pub fn resolve(given: &str, which: impl Fn(&str) -> Option<PathBuf>) -> Option<PathBuf> {
    if let Some(p) = which(given) {
        return Some(p);
    }
    LispKind::from_name(given)?
        .executables()
        .iter()
        .find_map(|n| which(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_version_lines() {
        assert_eq!(
            LispKind::classify("SBCL 2.2.9.debian"),
            Some(LispKind::Sbcl)
        );
        assert_eq!(LispKind::classify("ECL 21.2.1"), Some(LispKind::Ecl));
        assert_eq!(
            LispKind::classify("GNU CLISP 2.49.93+ (2018-02-18) (built on x)"),
            Some(LispKind::Clisp)
        );
        assert_eq!(
            LispKind::classify("Armed Bear Common Lisp 1.9.0"),
            Some(LispKind::Abcl)
        );
        assert_eq!(
            LispKind::classify("Version 1.12.2 (v1.12.2) LinuxX8664"),
            Some(LispKind::Ccl)
        );
        assert_eq!(LispKind::classify("bash 5.2"), None);
    }

    #[test]
    fn memory_limits_per_implementation() {
        assert_eq!(
            LispKind::Clisp.memory_args(512),
            vec![OsString::from("-m"), OsString::from("512MB")]
        );
        assert_eq!(
            LispKind::Ccl.memory_args(512),
            vec![OsString::from("--heap-reserve"), OsString::from("512M")]
        );
        assert!(LispKind::Abcl.memory_args(512).is_empty());
        assert_eq!(
            LispKind::Sbcl.memory_args(512),
            vec![
                OsString::from("--dynamic-space-size"),
                OsString::from("1280")
            ]
        );
        assert_eq!(LispKind::Ecl.heap_mb(512), 512);
        assert_eq!(
            LispKind::Abcl.memory_env(512, Some("-Dx=1")),
            vec![("JDK_JAVA_OPTIONS".to_string(), "-Dx=1 -Xmx512m".to_string())]
        );
        assert!(LispKind::Sbcl.memory_env(512, None).is_empty());
        assert_eq!(
            LispKind::Clisp.address_space_cap(256),
            Some(320 * 1024 * 1024)
        );
        assert_eq!(LispKind::Sbcl.address_space_cap(256), None);
    }

    #[test]
    fn names_round_trip() {
        for k in LispKind::ALL {
            assert_eq!(LispKind::from_name(k.name()), Some(k));
        }
        assert_eq!(LispKind::from_name("ECL"), Some(LispKind::Ecl));
        assert_eq!(LispKind::from_name("cmucl"), None);
    }

    #[test]
    fn detects_installed_sbcl() {
        let sbcl = super::super::locate::which("sbcl").expect("sbcl on PATH");
        assert_eq!(detect(&sbcl, &ProcessJail::none()), Ok(LispKind::Sbcl));
        assert!(detect(Path::new("/bin/true"), &ProcessJail::none()).is_err());
    }

    #[test]
    fn a_known_executable_name_is_not_run() {
        // Run, this script would print nothing and not be recognised.
        let dir = tempfile::tempdir().unwrap();
        let abcl = dir.path().join("abcl");
        std::fs::write(&abcl, "#!/bin/sh\nexit 0\n").unwrap();
        std::os::unix::fs::symlink(&abcl, dir.path().join("my-lisp")).unwrap();
        let quiet = dir.path().join("quiet");
        std::fs::copy(&abcl, &quiet).unwrap();
        use std::os::unix::fs::PermissionsExt;
        for p in [&abcl, &quiet] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        assert_eq!(detect(&abcl, &ProcessJail::none()), Ok(LispKind::Abcl));
        assert_eq!(
            detect(&dir.path().join("my-lisp"), &ProcessJail::none()),
            Ok(LispKind::Abcl)
        );
        assert!(detect(&quiet, &ProcessJail::none()).is_err());
    }
}
