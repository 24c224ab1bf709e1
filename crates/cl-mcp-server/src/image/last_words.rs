//! What a local image said last, and reading a death from it.
//!
//! A Lisp that dies prints why on its way out: SBCL's runtime writes its
//! fatal-error report on stderr ("fatal error encountered in SBCL …" and the
//! message, e.g. "Heap exhausted, game over.") and, started with
//! `--disable-ldb`, a backtrace of the dying thread on stdout; ECL's
//! collector and CLISP's memory manager print their complaints on stderr.
//! [`LastWords`] keeps a bounded tail of both streams, and [`Death`] is what
//! the supervisor makes of them when the process ends: a short cause for
//! the headline, the fatal lines and the first frames of the user's code.

use crate::sync::MutexExt;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

/// Lines of stderr kept: SBCL's heap report (a table of about 15 lines), the
/// fatal-error block, and what came just before.
const STDERR_LINES: usize = 40;
/// Lines of stdout kept: SBCL prints up to 100 frames of the dying thread,
/// the user's first.
const STDOUT_LINES: usize = 120;
/// Characters of a line kept in a tail (a frame or a message is shorter).
const LINE_CHARS: usize = 512;
/// User frames named in a death report.
const MAX_FRAMES: usize = 5;
/// Fatal lines quoted in a death report.
const MAX_FATAL_LINES: usize = 6;

/// Bounded tails of an image's stdout and stderr.
#[derive(Default)]
pub(super) struct LastWords {
    stdout: Mutex<VecDeque<String>>,
    stderr: Mutex<VecDeque<String>>,
}

impl LastWords {
    pub(super) fn push_stdout(&self, line: &str) {
        push(&self.stdout, line, STDOUT_LINES);
    }

    pub(super) fn push_stderr(&self, line: &str) {
        push(&self.stderr, line, STDERR_LINES);
    }

    /// The stderr tail (start failures quote it).
    pub(super) fn stderr(&self) -> MutexGuard<'_, VecDeque<String>> {
        self.stderr.guard()
    }

    /// What the tails say about how the process died.
    pub(super) fn death(&self) -> Death {
        let stderr = self.stderr.guard();
        let stdout = self.stdout.guard();
        let fatal = fatal_lines(&stderr);
        let frames = if fatal.sbcl {
            user_frames(&stdout)
        } else {
            Vec::new()
        };
        let cause = cause(&stderr, &fatal);
        let mut fatal_lines = fatal.lines;
        // SBCL can fail while it reports a full heap (its statistics
        // printer's own assertion: "GC invariant lost"): the line that
        // said why goes first.
        if cause == Some(Cause::HeapExhausted)
            && !fatal_lines.iter().any(|l| l.contains("Heap exhausted"))
        {
            if let Some(l) = heap_exhausted_line(&stderr) {
                fatal_lines.insert(0, l.clone());
                fatal_lines.truncate(MAX_FATAL_LINES);
            }
        }
        Death {
            cause,
            fatal: fatal_lines,
            frames,
        }
    }
}

fn push(tail: &Mutex<VecDeque<String>>, line: &str, max: usize) {
    let line = match line.char_indices().nth(LINE_CHARS) {
        Some((cut, _)) => format!("{} [cut]", &line[..cut]),
        None => line.to_string(),
    };
    let mut t = tail.guard();
    if t.len() == max {
        t.pop_front();
    }
    t.push_back(line);
}

/// Why a process died, as far as its last words say.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Death {
    /// The kind of death in a few words, if it is one we recognise.
    pub cause: Option<Cause>,
    /// The fatal messages the Lisp printed (at most [`MAX_FATAL_LINES`]).
    pub fatal: Vec<String>,
    /// The first frames of the user's code in the backtrace the Lisp printed
    /// (at most [`MAX_FRAMES`]; SBCL only).
    pub frames: Vec<String>,
}

/// A recognised kind of death.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Cause {
    /// The heap is full (SBCL's "Heap exhausted, game over.").
    HeapExhausted,
    /// CLISP out of address space under `--memory-limit`.
    AddressSpace,
    /// SBCL lost its control stack (a guard page it could not re-protect).
    StackExhausted,
    /// CLISP reset past Swank (a deep recursion it cannot recover from).
    ClispReset,
    /// SBCL's runtime caught SIGABRT and exited.
    Aborted,
    /// The heap ran out in one of Swank's threads, which closed the
    /// connection (ECL's STORAGE-EXHAUSTED, SBCL's HEAP-EXHAUSTED-ERROR).
    SwankOutOfMemory,
}

impl Cause {
    /// The cause in words, with what to do about it where there is
    /// something (`heap_hint`: the implementation's own heap option).
    pub(super) fn text(self, heap_hint: &str) -> String {
        match self {
            Cause::HeapExhausted => format!(
                "heap exhausted: the image ran out of memory (give it more with --memory-limit \
                 MB, or {heap_hint})"
            ),
            Cause::AddressSpace => {
                "out of memory: the image hit its address-space cap (--memory-limit)".into()
            }
            Cause::StackExhausted => "control stack exhausted".into(),
            Cause::ClispReset => {
                "control stack exhausted: this Lisp (CLISP) cannot recover from deep recursion"
                    .into()
            }
            Cause::Aborted => "aborted: the process received SIGABRT".into(),
            Cause::SwankOutOfMemory => format!(
                "out of memory: the heap ran out in one of Swank's own threads, which closed \
                 the connection (give it more with --memory-limit MB, or {heap_hint})"
            ),
        }
    }
}

struct Fatal {
    lines: Vec<String>,
    /// Whether SBCL's runtime reported a fatal error (it then printed a
    /// backtrace on stdout).
    sbcl: bool,
    /// The message of SBCL's fatal error ("Heap exhausted, game over.").
    message: String,
}

const SBCL_FATAL: &str = "fatal error encountered in SBCL";

/// The fatal lines of the stderr tail: SBCL's last fatal-error block (with,
/// for a heap exhaustion, the report's first line and its total), else the
/// complaints ECL's collector and CLISP print when they give up.
fn fatal_lines(tail: &VecDeque<String>) -> Fatal {
    // Only a fatal error explains a death: SBCL also reports heap and stack
    // exhaustion it recovers from, and the image may live on and exit later
    // for another reason (e.g. `(sb-ext:exit :abort t)`).
    if let Some(at) = tail.iter().rposition(|l| l.contains(SBCL_FATAL)) {
        let message: Vec<&str> = tail
            .iter()
            .skip(at + 1)
            .map(|l| l.trim())
            .take_while(|l| !l.is_empty())
            .take(3)
            .collect();
        let message = message.join(" ");
        let mut lines = Vec::new();
        if message.contains("Heap exhausted") {
            // The report that came just before: "Heap exhausted during
            // garbage collection: 0 bytes available, 16 requested." and its
            // table, whose last row is the total.
            let report = tail
                .iter()
                .take(at)
                .rposition(|l| l.starts_with("Heap exhausted during"));
            if let Some(r) = report {
                lines.push(tail[r].trim().to_string());
                let total = tail
                    .iter()
                    .take(at)
                    .skip(r)
                    .find(|l| l.starts_with("Tot "))
                    .and_then(|l| heap_total(l));
                if let Some(t) = total {
                    lines.push(t);
                }
            }
        }
        lines.push(format!("{} {message}", tail[at].trim()));
        return Fatal {
            lines,
            sbcl: true,
            message,
        };
    }
    let mut lines: Vec<String> = Vec::new();
    for (i, l) in tail.iter().enumerate() {
        let t = l.trim();
        let line = if t.contains("Internal or unrecoverable error") {
            // ECL: the place follows on the next line.
            match tail.get(i + 1) {
                Some(next) => format!("{t} {}", next.trim()),
                None => t.to_string(),
            }
        } else if t.starts_with(";; swank:close-connection:")
            || t.contains("GC Warning: Out of Memory")
            || t.contains("Too many heap sections")
            || t.contains("errno = 12 (:ENOMEM)")
            || t.starts_with("*** - ")
        {
            t.to_string()
        } else {
            continue;
        };
        // CLISP repeats its complaint for every attempt.
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    let skip = lines.len().saturating_sub(MAX_FATAL_LINES);
    Fatal {
        lines: lines.split_off(skip),
        sbcl: false,
        message: String::new(),
    }
}

/// "heap in use: 532125760 bytes [99.1% of 536870912 max]" from the total
/// row of SBCL's heap report.
fn heap_total(line: &str) -> Option<String> {
    let open = line.find('[')?;
    let bytes = line[..open].split_whitespace().last()?;
    Some(format!(
        "heap in use: {bytes} bytes {}",
        line[open..].trim_end()
    ))
}

fn cause(tail: &VecDeque<String>, fatal: &Fatal) -> Option<Cause> {
    // CLISP out of address space (--memory-limit) also resets past Swank.
    if tail.iter().any(|l| l.contains("errno = 12 (:ENOMEM)")) {
        return Some(Cause::AddressSpace);
    }
    if tail
        .iter()
        .any(|l| l.contains("cl-mcp-boot: the Lisp reset past Swank"))
    {
        return Some(Cause::ClispReset);
    }
    // An error in one of Swank's own threads closes the connection (the
    // server then stops the image): out of memory there, on ECL or SBCL.
    if let Some(closed) = tail
        .iter()
        .rfind(|l| l.starts_with(";; swank:close-connection:"))
    {
        if closed.contains("Memory limit reached") || closed.contains("Heap exhausted") {
            return Some(Cause::SwankOutOfMemory);
        }
    }
    if !fatal.sbcl {
        return None;
    }
    let m = &fatal.message;
    if m.contains("Heap exhausted") || heap_exhausted_line(tail).is_some() {
        Some(Cause::HeapExhausted)
    } else if m.contains("Control stack exhausted") || m.contains("control stack guard page") {
        Some(Cause::StackExhausted)
    } else if m.contains("SIGABRT") {
        Some(Cause::Aborted)
    } else {
        None
    }
}

/// SBCL's "Heap exhausted during garbage collection: …" (or "during
/// allocation"), printed before the report of a full heap.
fn heap_exhausted_line(tail: &VecDeque<String>) -> Option<&String> {
    tail.iter()
        .rfind(|l| l.starts_with("Heap exhausted during "))
}

/// The first frames of the user's code in the last backtrace SBCL printed
/// (`   0: fp=0x… pc=0x… CL-USER::HOG`): frames naming only functions of
/// the implementation, Swank or the server are left out.
fn user_frames(tail: &VecDeque<String>) -> Vec<String> {
    let Some(start) = tail.iter().rposition(|l| frame_name(l, Some(0)).is_some()) else {
        return Vec::new();
    };
    tail.iter()
        .skip(start)
        .map_while(|l| frame_name(l, None))
        .filter(|name| users_frame(name))
        .take(MAX_FRAMES)
        .map(str::to_string)
        .collect()
}

/// The function named by a frame line of SBCL's runtime backtrace, if the
/// line is one (and is frame number `number`, when given).
fn frame_name(line: &str, number: Option<u32>) -> Option<&str> {
    let (n, rest) = line.trim_start().split_once(": fp=")?;
    let n: u32 = n.parse().ok()?;
    if number.is_some_and(|want| want != n) {
        return None;
    }
    let (_, after_pc) = rest.split_once(" pc=")?;
    let (_, name) = after_pc.split_once(' ')?;
    Some(name.trim())
}

/// Whether a frame's name mentions a function of the user's: a symbol of a
/// package other than the implementation's, Swank's, ours and Common Lisp's
/// (`(LAMBDA () :IN CL-USER::F)` is the user's; `LOAD`, printed without a
/// package, is Common Lisp's; "Foreign function kill" is C).
fn users_frame(name: &str) -> bool {
    if name.starts_with("Foreign function") {
        return false;
    }
    name.split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|token| token.split_once(':').map(|(p, _)| p))
        .filter(|package| !package.is_empty() && !package.starts_with('"'))
        .any(|package| !internal_package(package))
}

fn internal_package(name: &str) -> bool {
    name.starts_with("SB-")
        || name == "SWANK"
        || name.starts_with("SWANK/")
        || name.starts_with("SWANK-")
        || name == "CL-MCP-SERVER"
        || name == "CL-MCP-BOOT"
        || name == "COMMON-LISP"
}

/// Whether `lines` hold a boot guard's report (see [`lisp_words`]).
pub(super) fn has_boot_report(lines: &[&str]) -> bool {
    lines.iter().any(|l| is_boot_report(l))
}

fn is_boot_report(line: &str) -> bool {
    let line = line.trim();
    line.starts_with("cl-mcp-boot:") || line.starts_with("cl-mcp:")
}

/// What a Lisp's last lines of output say went wrong: the boot guard's
/// report (`cl-mcp-boot: CONDITION: message (while loading FILE)`) when
/// there is one, else the last 15 lines that are not blank.
pub(super) fn lisp_words(lines: &[&str]) -> String {
    let lines: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let reports: Vec<&str> = lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| is_boot_report(l))
        .collect();
    if !reports.is_empty() {
        return reports.join("\n");
    }
    let tail = &lines[lines.len().saturating_sub(15)..];
    if tail.is_empty() {
        "(it printed nothing)".to_string()
    } else {
        tail.join("\n")
    }
}

/// A signal's name and what it usually means.
pub(super) fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP: hang-up",
        libc::SIGINT => "SIGINT: interrupted",
        libc::SIGQUIT => "SIGQUIT: quit",
        libc::SIGILL => "SIGILL: illegal instruction",
        libc::SIGTRAP => "SIGTRAP: trap",
        libc::SIGABRT => "SIGABRT: aborted",
        libc::SIGBUS => "SIGBUS: bus error",
        libc::SIGFPE => "SIGFPE: arithmetic exception",
        libc::SIGKILL => "SIGKILL: killed (by a user, the server, or the kernel's OOM killer)",
        libc::SIGSEGV => "SIGSEGV: segmentation fault",
        libc::SIGPIPE => "SIGPIPE: broken pipe",
        libc::SIGTERM => "SIGTERM: terminated",
        libc::SIGXCPU => "SIGXCPU: CPU time limit exceeded",
        libc::SIGXFSZ => "SIGXFSZ: file size limit exceeded",
        libc::SIGSYS => "SIGSYS: bad system call",
        _ => return None,
    })
}

/// How a process ended, in words: "exit status 3", "killed by signal 6
/// (SIGABRT: aborted)".
pub(super) fn describe_exit(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => match signal_name(sig) {
            Some(name) => format!("killed by signal {sig} ({name})"),
            None => format!("killed by signal {sig}"),
        },
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(stderr: &str, stdout: &str) -> LastWords {
        let w = LastWords::default();
        stderr.lines().for_each(|l| w.push_stderr(l));
        stdout.lines().for_each(|l| w.push_stdout(l));
        w
    }

    /// SBCL 2.2.9's last words after a runaway `(defun hog ...)` filled a
    /// 512 MB heap (the table shortened).
    const HEAP_STDERR: &str = "\
Heap exhausted during garbage collection: 0 bytes available, 16 requested.
        Immobile Object Counts
 Gen layout fdefn symbol   code  Boxed   Cons    Raw   Code  SmMix  Mixed  LgRaw LgCode  LgMix Waste%       Alloc        Trig   Dirty GCs Mem-age
  1      0      0      0      0      0   4971      0      0      0      0      0      0      0    0.8   161540160     5368709    4971   0  1.0000
Tot    730  15691  26670  17518    356  15895     42      3     15     15      0      0     58    0.9   532125760 [99.1% of 536870912 max]
GC control variables:
   *GC-INHIBIT* = true
fatal error encountered in SBCL pid 3895 tid 3910:
Heap exhausted, game over.

";
    const HEAP_STDOUT: &str = "\
   0: fp=0x7ff3af077190 pc=0x534960d2 CL-USER::HOG
   1: fp=0x7ff3af077258 pc=0x52b4fb27 SB-INT::SIMPLE-EVAL-IN-LEXENV
   2: fp=0x7ff3af077280 pc=0x52c6809d (LAMBDA () :IN CL-MCP-SERVER::EVAL-REQUEST)
   3: fp=0x7ff3af077478 pc=0x52bb8846 (FLET CL-USER::INNER :IN CL-USER::OUTER)
   4: fp=0x7ff3af077588 pc=0x52bb8103 (LAMBDA (SB-KERNEL::FORM &KEY :CURRENT-INDEX &ALLOW-OTHER-KEYS) :IN SB-INT::LOAD-AS-SOURCE)
   5: fp=0x7ff3af077640 pc=0x52b83e80 LOAD
   6: fp=0x7ff3af0777c0 pc=0x52bb7a44 SWANK::EVAL-FOR-EMACS
";

    #[test]
    fn reads_sbcl_heap_exhaustion_and_the_users_frames() {
        let d = words(HEAP_STDERR, HEAP_STDOUT).death();
        assert_eq!(d.cause, Some(Cause::HeapExhausted));
        assert_eq!(
            d.fatal,
            vec![
                "Heap exhausted during garbage collection: 0 bytes available, 16 requested.",
                "heap in use: 532125760 bytes [99.1% of 536870912 max]",
                "fatal error encountered in SBCL pid 3895 tid 3910: Heap exhausted, game over.",
            ]
        );
        assert_eq!(
            d.frames,
            vec!["CL-USER::HOG", "(FLET CL-USER::INNER :IN CL-USER::OUTER)"]
        );
    }

    /// SBCL 2.2.9 failing its own assertion while it prints the table of
    /// a full heap: a heap exhaustion still, said as such.
    #[test]
    fn a_heap_report_that_loses_its_gc_invariant_is_a_heap_exhaustion() {
        let stderr = "\
Heap exhausted during garbage collection: 0 bytes available, 16 requested.
        Immobile Object Counts
 Gen layout fdefn symbol   code  Boxed   Cons    Raw   Code  SmMix  Mixed  LgRaw LgCode  LgMix Waste%       Alloc        Trig   Dirty GCs Mem-age
fatal error encountered in SBCL pid 665 tid 673: GC invariant lost, file \"gencgc.c\", line 523
";
        let d = words(stderr, HEAP_STDOUT).death();
        assert_eq!(d.cause, Some(Cause::HeapExhausted));
        assert_eq!(
            d.fatal.first().map(String::as_str),
            Some("Heap exhausted during garbage collection: 0 bytes available, 16 requested.")
        );
        assert!(
            d.fatal.iter().any(|l| l.contains("GC invariant lost")),
            "{:?}",
            d.fatal
        );
    }

    #[test]
    fn a_recovered_heap_exhaustion_explains_no_later_death() {
        let stderr = "Heap exhausted during allocation: 100 bytes available, 800 requested.\n\
                      Tot 1 2 3 [99.0% of 5 max]\n";
        let d = words(stderr, HEAP_STDOUT).death();
        assert_eq!(d, Death::default());
    }

    #[test]
    fn sbcl_catches_sigabrt_and_says_so() {
        let d = words(
            "fatal error encountered in SBCL pid 4039 tid 4039:\nSIGABRT received.\n\n",
            "   0: fp=0x1 pc=0x2 Foreign function kill\n   1: fp=0x3 pc=0x4 CL-USER::DIE\n",
        )
        .death();
        assert_eq!(d.cause, Some(Cause::Aborted));
        assert_eq!(
            d.fatal,
            vec!["fatal error encountered in SBCL pid 4039 tid 4039: SIGABRT received."]
        );
        assert_eq!(d.frames, vec!["CL-USER::DIE"]);
    }

    #[test]
    fn only_the_last_backtrace_counts() {
        let stdout = format!("{HEAP_STDOUT}noise\n   0: fp=0x1 pc=0x2 MY-APP:RUN\n");
        let d = words(
            "fatal error encountered in SBCL pid 1 tid 1:\nsomething\n",
            &stdout,
        )
        .death();
        assert_eq!(d.cause, None);
        assert_eq!(d.frames, vec!["MY-APP:RUN"]);
    }

    #[test]
    fn clisp_out_of_address_space_is_said_once() {
        let line = "[./src/spvw_mmap.d:526] errno = 12 (:ENOMEM): Cannot allocate memory.";
        let stderr =
            format!("Cannot map memory\n{line}\nTrying to make room through a GC...\n{line}\n");
        let d = words(&stderr, "").death();
        assert_eq!(d.cause, Some(Cause::AddressSpace));
        assert_eq!(d.fatal, vec![line]);
    }

    #[test]
    fn ecl_out_of_memory_in_swanks_thread_is_named() {
        let stderr = ";; swank:close-connection: Memory limit reached. Please jump to an outer pointer, quit program and enlarge the\n\
                      memory limits before executing the program again.\n";
        let d = words(stderr, "").death();
        assert_eq!(d.cause, Some(Cause::SwankOutOfMemory));
        assert_eq!(d.fatal.len(), 1);
        assert!(d.fatal[0].contains("Memory limit reached"), "{d:?}");
    }

    #[test]
    fn tails_are_bounded() {
        let w = LastWords::default();
        for i in 0..1000 {
            w.push_stderr(&format!("{i} {}", "x".repeat(5000)));
        }
        let t = w.stderr();
        assert_eq!(t.len(), STDERR_LINES);
        assert!(t.iter().all(|l| l.len() < LINE_CHARS + 10));
    }

    #[test]
    fn names_signals() {
        use std::os::unix::process::ExitStatusExt;
        let s = std::process::ExitStatus::from_raw(libc::SIGABRT);
        assert_eq!(describe_exit(s), "killed by signal 6 (SIGABRT: aborted)");
        let s = std::process::ExitStatus::from_raw(3 << 8);
        assert_eq!(describe_exit(s), "exit status 3");
    }
}
