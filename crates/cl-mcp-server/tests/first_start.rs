//! The first start a user has, not the one a warm test machine has: an empty
//! cache, the minimal environment an SDK gives a server (`HOME`, `PATH`, no
//! `LANG`), a server killed while it builds its cache, two first starts at
//! once, a damaged cache, a Lisp that fails while booting. Each test has a
//! private cache directory (`XDG_CACHE_HOME`) and runs on SBCL, CLISP and
//! ECL side by side (`scripts/setup.sh` installs them; a missing one fails).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// The Lisps every first-start test runs on.
const LISPS: &[&str] = &["sbcl", "clisp", "ecl"];

/// A server started as an MCP SDK starts one: a cleared environment with
/// only `HOME` and `PATH` (and the private cache), no locale.
fn minimal_server(lisp: &str, cache: &Path, home: &Path, extra: &[&str]) -> Server {
    let mut cmd = minimal_command(&[], lisp, cache, home, extra);
    cmd.stderr(Stdio::null());
    Server::spawn(cmd)
}

/// The server binary with `subcommand`, in the minimal environment, on
/// `lisp`, with the private cache and `home` as the project root.
fn minimal_command(
    subcommand: &[&str],
    lisp: &str,
    cache: &Path,
    home: &Path,
    extra: &[&str],
) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("HOME", home)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("XDG_CACHE_HOME", cache)
        .args(subcommand)
        .args(["--lisp", lisp, "--project-root"])
        .arg(home)
        .args(extra);
    cmd
}

fn initialize(s: &mut Server) {
    let r = s.request(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
    );
    assert!(r.get("result").is_some(), "initialize failed: {r}");
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
}

/// An evaluate-lisp call, waiting up to `wait` for its answer.
fn eval_within(s: &mut Server, id: i64, code: &str, wait: Duration) -> Value {
    s.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
                   "params":{"name":"evaluate-lisp","arguments":{"code":code}}}));
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no answer to {code} within {wait:?}");
        let m = s.recv_within(left);
        if m["id"] == json!(id) {
            return m;
        }
    }
}

/// An evaluate-lisp call with a progress token: its answer and the
/// progress messages that came before it.
fn eval_with_progress(s: &mut Server, id: i64, code: &str, wait: Duration) -> (Value, Vec<String>) {
    s.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
                   "params":{"name":"evaluate-lisp","arguments":{"code":code},
                             "_meta":{"progressToken": format!("p{id}")}}}));
    let deadline = Instant::now() + wait;
    let mut progress = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no answer to {code} within {wait:?}");
        let m = s.recv_within(left);
        if m["id"] == json!(id) {
            return (m, progress);
        }
        if m["method"] == "notifications/progress" {
            progress.push(
                m["params"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
    }
}

/// Processes whose command line mentions `needle` (a private cache path).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{name}: {cmd}"));
            }
        }
    }
    found
}

/// Waits for every process of `needle` to be gone: the Lisp within 5 s
/// (it dies with its server), a C compiler ECL had started within 90 s
/// (it finishes the one file it compiles, under a temporary name, and
/// exits: nothing waits for it).
fn assert_all_gone(needle: &str) {
    let started = Instant::now();
    loop {
        let left = processes_mentioning(needle);
        if left.is_empty() {
            return;
        }
        let compilers_only = left.iter().all(|p| {
            let cmd = p.split_once(": ").map_or("", |(_, c)| c);
            ["gcc ", "cc ", "/usr/lib/gcc/", "as ", "ld ", "collect2 "]
                .iter()
                .any(|c| cmd.starts_with(c))
        });
        let limit = if compilers_only { 90 } else { 5 };
        assert!(
            started.elapsed() < Duration::from_secs(limit),
            "processes outlived their killed server: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn require_lisp(lisp: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(lisp).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "{lisp} is not installed: run scripts/setup.sh (apt-get install {lisp})"
    );
}

/// Runs `f` for every Lisp at once, each on its own thread; fails with
/// every Lisp's failure.
fn on_every_lisp(lisps: &[&'static str], f: fn(&'static str)) {
    let handles: Vec<_> = lisps
        .iter()
        .map(|&l| {
            require_lisp(l);
            (l, std::thread::spawn(move || f(l)))
        })
        .collect();
    let failed: Vec<String> = handles
        .into_iter()
        .filter_map(|(l, h)| h.join().err().map(|_| l.to_string()))
        .collect();
    assert!(failed.is_empty(), "failed on: {failed:?} (see above)");
}

fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let home = t.path().join("home");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    (t, cache, home)
}

/// Kills servers at several moments of their first start, then starts one
/// that must work, in a minimal environment, and read UTF-8 files and code.
/// ECL's first start loads Swank from source and compiles its cache through
/// a C compiler in the background for minutes: it is killed once, while it
/// does.
#[test]
fn first_start_killed_mid_build_then_started_in_a_minimal_environment() {
    on_every_lisp(LISPS, |lisp| {
        let (_t, cache, home) = dirs();
        let needle = cache.to_string_lossy().into_owned();
        let moments: &[f64] = if lisp == "ecl" {
            &[4.0]
        } else {
            &[0.5, 1.5, 3.0]
        };
        for &at in moments {
            let mut s = minimal_server(lisp, &cache, &home, &[]);
            initialize(&mut s);
            std::thread::sleep(Duration::from_secs_f64(at));
            drop(s); // SIGKILL
            assert_all_gone(&needle);
        }
        std::fs::write(
            home.join("utf8.lisp"),
            ";; caf\u{e9} \u{2014} a comment a locale-less Lisp once could not read\n\
             (defun greeting () \"gr\u{fc}\u{df} dich\")\n",
        )
        .unwrap();
        let mut s = minimal_server(lisp, &cache, &home, &[]);
        initialize(&mut s);
        let started = Instant::now();
        let r = eval_within(&mut s, 1, "(+ 1 2)", Duration::from_secs(400));
        assert!(!tool_is_error(&r), "{lisp}: {r}");
        assert!(tool_text(&r).contains("=> 3"), "{lisp}: {r}");
        eprintln!("{lisp}: first start after kills: {:?}", started.elapsed());
        let r = s.call_tool(
            2,
            "lisp-compile-file",
            json!({"path": "utf8.lisp", "load": true}),
        );
        assert!(!tool_is_error(&r), "{lisp}: {r}");
        let r = eval_within(
            &mut s,
            3,
            "(list (length (greeting)) (length \"\u{e9}t\u{e9}\"))",
            Duration::from_secs(30),
        );
        assert!(tool_text(&r).contains("(9 3)"), "{lisp}: {r}");
        if lisp == "ecl" {
            // ECL's image started from source; its compiled cache is built
            // beside it, and the next start loads that.
            ecl_cache_built_in_the_background(s, &cache, &home);
            return;
        }
        // The cache holds one finished entry and no half-built one.
        assert_no_half_built_entry(lisp, &cache);
    });
}

fn assert_no_half_built_entry(lisp: &str, cache: &Path) {
    let entries: Vec<String> = std::fs::read_dir(cache.join("cl-mcp-server"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !entries.iter().any(|e| e.contains(".tmp-")),
        "{lisp}: {entries:?}"
    );
}

/// ECL's first start (server `s`, its image loaded from source): the
/// compiled cache is built in the background while `s` runs — every helper
/// and Swank compiled into it — and a second server's image starts from it
/// (its log says so), not from source. Not timed: what is checked is where
/// the image came from.
fn ecl_cache_built_in_the_background(s: Server, cache: &Path, home: &Path) {
    let dir = server_cache(cache);
    let deadline = Instant::now() + Duration::from_secs(600);
    let entry = loop {
        let found = std::fs::read_dir(&dir).unwrap().flatten().find_map(|e| {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            (name.starts_with("ecl-") && !name.contains('.') && p.join("start.lisp").is_file())
                .then_some(p)
        });
        if let Some(p) = found {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "ecl: no compiled cache entry after 600 s: {:?}",
            std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    drop(s);
    assert_no_half_built_entry("ecl", cache);
    for helper in ["util.fas", "eval.fas", "boot.fas"] {
        assert!(
            entry.join(helper).is_file(),
            "ecl: no {helper} in {}",
            entry.display()
        );
    }
    assert!(
        find_file(&dir, &|n| n == "swank.fas").is_some(),
        "ecl: Swank's compiled swank.fas is not in the cache"
    );
    let log = home.join("second-start.log");
    let mut cmd = minimal_command(&[], "ecl", cache, home, &[]);
    cmd.stderr(std::fs::File::create(&log).unwrap());
    let mut s = Server::spawn(cmd);
    initialize(&mut s);
    let r = eval_within(&mut s, 1, "(+ 1 2)", Duration::from_secs(120));
    assert!(tool_text(&r).contains("=> 3"), "ecl: {r}");
    drop(s);
    let log = std::fs::read_to_string(&log).unwrap();
    let ready: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Lisp image ready"))
        .collect();
    assert!(
        !ready.is_empty() && ready.iter().all(|l| l.contains(r#""from_core":true"#)),
        "ecl: the second start did not load the compiled cache: {ready:?}"
    );
}

/// Two servers start for the first time at once on one empty cache: both
/// work, and the cache is built once.
#[test]
fn two_first_starts_at_once() {
    on_every_lisp(&["sbcl", "clisp"], |lisp| {
        let (_t, cache, home) = dirs();
        let mut a = minimal_server(lisp, &cache, &home, &[]);
        let mut b = minimal_server(lisp, &cache, &home, &[]);
        initialize(&mut a);
        initialize(&mut b);
        let (ra, heard) = eval_with_progress(&mut a, 1, "(+ 1 2)", Duration::from_secs(300));
        let rb = eval_within(&mut b, 1, "(+ 2 2)", Duration::from_secs(300));
        // A first start says what it does, not that the call runs.
        assert!(
            heard
                .iter()
                .any(|m| m.starts_with("starting the Lisp image")),
            "{lisp}: {heard:?}"
        );
        assert!(tool_text(&ra).contains("=> 3"), "{lisp}: {ra}");
        assert!(tool_text(&rb).contains("=> 4"), "{lisp}: {rb}");
        let cores = std::fs::read_dir(cache.join("cl-mcp-server"))
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                let n = n.to_string_lossy();
                n.ends_with(".core") || n.ends_with(".mem")
            })
            .count();
        assert_eq!(cores, 1, "{lisp}");
    });
}

/// The server's cache directory for this test.
fn server_cache(cache: &Path) -> PathBuf {
    cache.join("cl-mcp-server")
}

fn find_file(dir: &Path, pred: &dyn Fn(&str) -> bool) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(f) = find_file(&p, pred) {
                return Some(f);
            }
        } else if pred(&e.file_name().to_string_lossy()) {
            return Some(p);
        }
    }
    None
}

/// `doctor` run as a user runs it, in the minimal environment: whether it
/// passed, its report, how long it took.
fn doctor(lisp: &str, cache: &Path, home: &Path) -> (bool, String, Duration) {
    doctor_with(lisp, cache, home, &[])
}

fn doctor_with(lisp: &str, cache: &Path, home: &Path, extra: &[&str]) -> (bool, String, Duration) {
    let started = Instant::now();
    let out = minimal_command(&["doctor"], lisp, cache, home, extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        started.elapsed(),
    )
}

/// A truncated Swank fasl and a truncated core, planted in a built cache:
/// the server discards what is broken, rebuilds it once and works; doctor
/// says what it found and what it did.
#[test]
fn a_damaged_cache_is_discarded_and_rebuilt() {
    let (_t, cache, home) = dirs();
    let (ok, report, _) = doctor("sbcl", &cache, &home);
    assert!(ok, "{report}");
    assert!(report.contains("built now in"), "{report}");
    let (ok, report, took) = doctor("sbcl", &cache, &home);
    assert!(ok, "{report}");
    assert!(report.contains("passes its check"), "{report}");
    assert!(took < Duration::from_secs(30), "{took:?}");

    // A half-written Swank fasl, as a killed compilation once left.
    let dir = server_cache(&cache);
    let fasl = find_file(&dir, &|n| n == "swank.fasl").expect("swank.fasl in the cache");
    let len = std::fs::metadata(&fasl).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&fasl).unwrap();
    f.set_len(len / 3).unwrap();
    let core = find_file(&dir, &|n| n.ends_with(".core")).unwrap();
    std::fs::remove_file(&core).unwrap();
    let mut s = minimal_server("sbcl", &cache, &home, &[]);
    initialize(&mut s);
    let r = eval_within(&mut s, 1, "(+ 1 2)", Duration::from_secs(120));
    let text = tool_text(&r);
    assert!(text.contains("=> 3"), "{r}");
    // The caller hears of the repair once, without asking for logs.
    assert!(
        text.contains("[NOTICE]") && text.contains("discarded the cache and built it again"),
        "{text}"
    );
    let r = eval_within(&mut s, 2, "(+ 1 2)", Duration::from_secs(30));
    assert!(!tool_text(&r).contains("[NOTICE]"), "{r}");
    drop(s);

    // A truncated core: it no longer matches the hash its build recorded,
    // so it is discarded before it starts, rebuilt, and the same call gets
    // its answer.
    let len = std::fs::metadata(&core).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&core).unwrap();
    f.set_len(len / 2).unwrap();
    let mut s = minimal_server("sbcl", &cache, &home, &[]);
    initialize(&mut s);
    let started = Instant::now();
    let r = eval_within(&mut s, 1, "(+ 1 2)", Duration::from_secs(120));
    let text = tool_text(&r);
    assert!(text.contains("=> 3"), "{r}");
    assert!(
        text.contains("[NOTICE]")
            && text.contains("was changed after the server built it")
            && text.contains("built it again"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(90));
    drop(s);

    // doctor on a damaged core: found, said, rebuilt, in seconds.
    let len = std::fs::metadata(&core).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&core).unwrap();
    f.set_len(len / 2).unwrap();
    let (ok, report, took) = doctor("sbcl", &cache, &home);
    assert!(ok, "{report}");
    assert!(
        report.contains("was broken") && report.contains("rebuilt it"),
        "{report}"
    );
    assert!(took < Duration::from_secs(90), "{took:?}");
}

/// A Lisp that fails while booting (here: a Swank loader that signals an
/// error) ends at once, and the call says why in the Lisp's own words,
/// naming the file; doctor fails in seconds and names the fix. Before, the
/// Lisp sat in its debugger on the stdin the server holds and the server
/// waited 120 s for Swank.
#[test]
fn a_boot_failure_is_reported_in_seconds_in_the_lisps_words() {
    on_every_lisp(LISPS, |lisp| {
        let (_t, cache, home) = dirs();
        let loader = home.join("swank-loader.lisp");
        std::fs::write(
            &loader,
            "(error \"this Swank loader is broken on purpose\")\n",
        )
        .unwrap();
        let loader_arg = loader.to_string_lossy().into_owned();
        let mut s = minimal_server(lisp, &cache, &home, &["--swank-loader", &loader_arg]);
        initialize(&mut s);
        let started = Instant::now();
        let r = eval_within(&mut s, 1, "(+ 1 2)", Duration::from_secs(60));
        let took = started.elapsed();
        assert!(tool_is_error(&r), "{lisp}: {r}");
        let text = tool_text(&r);
        assert!(
            text.contains("broken on purpose") && text.contains("swank-loader.lisp"),
            "{lisp}: {text}"
        );
        assert!(took < Duration::from_secs(30), "{lisp}: took {took:?}");
        drop(s);
        let (ok, report, took) = doctor_with(lisp, &cache, &home, &["--swank-loader", &loader_arg]);
        assert!(!ok, "{lisp}: {report}");
        assert!(
            took < Duration::from_secs(30),
            "{lisp}: doctor took {took:?}"
        );
        assert!(
            report.contains("[FAIL] core cache") && report.contains("broken on purpose"),
            "{lisp}: {report}"
        );
        assert!(
            report.contains("fix:") && report.contains("--swank-loader"),
            "{lisp}: {report}"
        );
    });
}
