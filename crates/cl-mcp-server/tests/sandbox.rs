//! `--sandbox workspace|strict` with a real SBCL on
//! this kernel: evaluated code, and the processes it starts, cannot write
//! outside the project root and the allowed dirs, cannot connect anywhere
//! unless allowed, cannot reach the server through `/proc/<pid>/fd`, and in
//! `strict` cannot read outside either; ASDF builds still work.
//!
//! The kernel must offer Landlock ABI 4 or later (network rules); the tests
//! say so and fail otherwise, rather than pass unconfined.

mod common;
mod eval_support;

use std::path::{Path, PathBuf};

use eval_support::{call, eval, Reply};
use serde_json::json;

/// A project root, an outside dir and the server's private temp dir (so
/// the shared /tmp is outside too).
struct Dirs {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    server_tmp: PathBuf,
}

fn dirs() -> Dirs {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let d = Dirs {
        root: base.join("root"),
        outside: base.join("outside"),
        server_tmp: base.join("server-tmp"),
        _tmp: tmp,
    };
    for p in [&d.root, &d.outside, &d.server_tmp] {
        std::fs::create_dir_all(p).unwrap();
    }
    d
}

fn require_landlock() {
    let abi = cl_mcp_server::image::sandbox::kernel_abi();
    assert!(
        abi >= 4,
        "this kernel's Landlock ABI is {abi}; the sandbox tests need 4 or later"
    );
}

fn server(d: &Dirs, extra: &[&str]) -> common::Server {
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cl-mcp-server-test-cache");
    server_with(d, extra, &cache, &[])
}

/// [`server`] with its own cache dir and more environment.
fn server_with(d: &Dirs, extra: &[&str], cache: &Path, env: &[(&str, &str)]) -> common::Server {
    require_landlock();
    let mut args = vec!["--project-root", d.root.to_str().unwrap()];
    args.extend_from_slice(extra);
    let mut all_env = vec![
        ("CL_MCP_CACHE_DIR", cache.to_str().unwrap()),
        ("TMPDIR", d.server_tmp.to_str().unwrap()),
    ];
    all_env.extend_from_slice(env);
    let mut s = common::Server::start_with_env(&args, &all_env);
    let r = s.request(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}));
    assert!(r.get("result").is_some(), "initialize failed: {r}");
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    s
}

fn lisp_path(p: &Path) -> String {
    format!("{:?}", p.to_str().unwrap())
}

fn write_form(p: &Path) -> String {
    format!(
        "(with-open-file (s {} :direction :output :if-exists :supersede) (write-string \"x\" s) :written)",
        lisp_path(p)
    )
}

fn touch_form(p: &Path) -> String {
    format!(
        "(sb-ext:process-exit-code (sb-ext:run-program \"/usr/bin/touch\" (list {}) :output nil :error nil))",
        lisp_path(p)
    )
}

fn connect_form(port: u16) -> String {
    format!(
        "(let ((s (make-instance 'sb-bsd-sockets:inet-socket :type :stream :protocol :tcp)))
           (unwind-protect
                (progn (sb-bsd-sockets:socket-connect s #(127 0 0 1) {port}) :connected)
             (sb-bsd-sockets:socket-close s)))"
    )
}

/// Signal 0 (a probe that delivers nothing) to the server.
const SIGNAL_PARENT: &str = "(progn (require :sb-posix)
  (handler-case (progn (sb-posix:kill (sb-posix:getppid) 0) :sent)
    (sb-posix:syscall-error () :refused)))";

fn assert_refused(r: &Reply, flag: &str) {
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.to_ascii_lowercase().contains("permission denied"),
        "{}",
        r.text
    );
    let sandbox_lines: Vec<&str> = r
        .text
        .lines()
        .filter(|l| l.starts_with("[SANDBOX]"))
        .collect();
    assert_eq!(sandbox_lines.len(), 1, "{}", r.text);
    assert!(sandbox_lines[0].contains("workspace") || sandbox_lines[0].contains("strict"));
    assert!(sandbox_lines[0].contains(flag), "{}", r.text);
}

#[test]
fn workspace_confines_writes_children_network_and_proc() {
    let d = dirs();
    let allowed = d.outside.join("allowed");
    std::fs::create_dir_all(&allowed).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut s = server(
        &d,
        &[
            "--sandbox",
            "workspace",
            "--allow-write",
            allowed.to_str().unwrap(),
        ],
    );

    // Inside the root: allowed.
    let inside = d.root.join("inside.txt");
    let r = eval(&mut s, 1, &write_form(&inside));
    assert_eq!(r.text, "=> :WRITTEN");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "x");

    // Outside (a dir of the shared /tmp): refused, with one [SANDBOX] line.
    let outside = d.outside.join("evil.txt");
    let r = eval(&mut s, 2, &write_form(&outside));
    assert_refused(&r, "--allow-write");
    assert!(!outside.exists());

    // A child process inherits the sandbox.
    let touched = d.outside.join("touched");
    let r = eval(&mut s, 3, &touch_form(&touched));
    assert!(!r.is_error, "{}", r.text);
    assert_ne!(r.text, "=> 0", "touch succeeded outside the root");
    assert!(!touched.exists());
    let r = eval(&mut s, 4, &touch_form(&d.root.join("touched")));
    assert_eq!(r.text, "=> 0");
    assert!(d.root.join("touched").exists());

    // --allow-write widens it.
    let r = eval(&mut s, 5, &write_form(&allowed.join("ok.txt")));
    assert_eq!(r.text, "=> :WRITTEN");

    // Renaming a file out of the root, or a symbolic link out of it, does
    // not help.
    let r = eval(
        &mut s,
        6,
        &format!(
            "(rename-file {} {})",
            lisp_path(&inside),
            lisp_path(&d.outside.join("moved.txt"))
        ),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(!d.outside.join("moved.txt").exists());
    std::os::unix::fs::symlink(&d.outside, d.root.join("link")).unwrap();
    let r = eval(&mut s, 7, &write_form(&d.root.join("link/via-link.txt")));
    assert!(r.is_error, "{}", r.text);
    assert!(!d.outside.join("via-link.txt").exists());

    // Reads are allowed in workspace.
    std::fs::write(d.outside.join("readable.txt"), "hello").unwrap();
    let r = eval(
        &mut s,
        8,
        &format!(
            "(with-open-file (s {}) (values (read-line s)))",
            lisp_path(&d.outside.join("readable.txt"))
        ),
    );
    assert_eq!(r.text, "=> \"hello\"");

    // No TCP connection to a port the test listens on (Swank itself, which
    // the server connects to, works: every call here goes through it).
    let r = eval(&mut s, 9, &connect_form(port));
    assert_refused(&r, "--allow-connect");

    // The server's own stdout, through /proc: refused.
    let r = eval(
        &mut s,
        10,
        "(progn (require :sb-posix)
           (with-open-file (s (format nil \"/proc/~D/fd/1\" (sb-posix:getppid))
                              :direction :output :if-exists :append)
             (write-line \"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"id\\\":99,\\\"result\\\":{}}\" s))
           :forged)",
    );
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("Permission denied"), "{}", r.text);

    // No signals to processes outside the sandbox (the server here).
    let r = eval(&mut s, 12, SIGNAL_PARENT);
    assert_eq!(r.text, "=> :REFUSED");

    // image-info shows the mode and the rules.
    let r = call(&mut s, 11, "image-info", json!({}));
    assert!(!r.is_error, "{}", r.text);
    common::assert_conforms("image-info", &r.structured);
    let sb = &r.structured["sandbox"];
    assert_eq!(sb["mode"], "workspace", "{}", r.structured);
    assert_eq!(sb["enforced"], true);
    let write: Vec<&str> = sb["write"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(write.contains(&d.root.to_str().unwrap()), "{write:?}");
    assert!(write.contains(&allowed.to_str().unwrap()), "{write:?}");
    assert!(!write.contains(&"/tmp"), "{write:?}");
    assert!(sb.get("read").is_none());
    assert!(r.text.contains("sandbox: workspace"), "{}", r.text);
    drop(listener);
}

#[test]
fn allow_connect_opens_one_port() {
    let d = dirs();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    let allow = format!("127.0.0.1:{port}");
    let mut s = server(&d, &["--sandbox", "workspace", "--allow-connect", &allow]);
    let r = eval(&mut s, 1, &connect_form(port));
    assert_eq!(r.text, "=> :CONNECTED");
    let r = eval(&mut s, 2, &connect_form(other_port));
    assert_refused(&r, "--allow-connect");
}

#[test]
fn asdf_builds_still_work_in_workspace() {
    let d = dirs();
    let project = d.root.join("sbxdemo");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("sbxdemo.asd"),
        "(asdf:defsystem \"sbxdemo\" :components ((:file \"main\")))\n",
    )
    .unwrap();
    std::fs::write(
        project.join("main.lisp"),
        "(defpackage :sbxdemo (:use :cl) (:export #:answer))\n(in-package :sbxdemo)\n(defun answer () :sandboxed)\n",
    )
    .unwrap();
    let mut s = server(&d, &["--sandbox", "workspace"]);
    let r = call(&mut s, 1, "asdf-load-system", json!({"system": "sbxdemo"}));
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 2, "(sbxdemo:answer)");
    assert_eq!(r.text, "=> :SANDBOXED");
    // lisp-compile-file writes into the private fasl dir of the cache.
    std::fs::write(d.root.join("single.lisp"), "(defun single-answer () 7)\n").unwrap();
    let r = call(
        &mut s,
        3,
        "lisp-compile-file",
        json!({"path": "single.lisp"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 4, "(single-answer)");
    assert_eq!(r.text, "=> 7");
}

#[test]
fn strict_refuses_reads_outside() {
    let d = dirs();
    let secret = d.outside.join("secret.txt");
    std::fs::write(&secret, "s3cret").unwrap();
    std::fs::write(d.root.join("mine.txt"), "mine").unwrap();
    let extra = d.outside.join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(extra.join("granted.txt"), "granted").unwrap();
    let mut s = server(
        &d,
        &[
            "--sandbox",
            "strict",
            "--allow-read",
            extra.to_str().unwrap(),
        ],
    );
    let read = |p: &Path| {
        format!(
            "(with-open-file (s {}) (values (read-line s)))",
            lisp_path(p)
        )
    };
    let r = eval(&mut s, 1, &read(&d.root.join("mine.txt")));
    assert_eq!(r.text, "=> \"mine\"");
    let r = eval(&mut s, 2, &read(&secret));
    assert_refused(&r, "--allow-read");
    assert!(!r.text.contains("s3cret"));
    let r = eval(&mut s, 3, &read(&extra.join("granted.txt")));
    assert_eq!(r.text, "=> \"granted\"");
    let r = eval(&mut s, 4, &write_form(&extra.join("no.txt")));
    assert_refused(&r, "--allow-write");

    let r = call(&mut s, 5, "image-info", json!({}));
    common::assert_conforms("image-info", &r.structured);
    assert_eq!(r.structured["sandbox"]["mode"], "strict");
    assert!(r.structured["sandbox"]["read"].is_array());
}

#[test]
fn off_leaves_the_image_unconfined() {
    let d = dirs();
    let mut s = server(&d, &["--sandbox", "off"]);
    let outside = d.outside.join("free.txt");
    let r = eval(&mut s, 1, &write_form(&outside));
    assert_eq!(r.text, "=> :WRITTEN");
    let r = call(&mut s, 2, "image-info", json!({}));
    assert_eq!(r.structured["sandbox"]["mode"], "off");
    let r = eval(&mut s, 3, SIGNAL_PARENT);
    assert_eq!(r.text, "=> :SENT");
}

#[test]
fn a_new_root_is_writable_after_image_restart() {
    let d = dirs();
    let mut s = server(&d, &["--sandbox", "workspace", "--allow-any-root"]);
    let r = eval(&mut s, 1, "(+ 1 2)");
    assert_eq!(r.text, "=> 3");
    let target = d.outside.join("after-move.txt");
    let r = call(
        &mut s,
        2,
        "fs-set-project-root",
        json!({"path": d.outside.to_str().unwrap()}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.text.contains("[SANDBOX]") && r.text.contains("image-restart"),
        "{}",
        r.text
    );
    // The running image keeps the rules it started with.
    let r = eval(&mut s, 3, &write_form(&target));
    assert_refused(&r, "--allow-write");
    let r = call(&mut s, 4, "image-restart", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 5, &write_form(&target));
    assert_eq!(r.text, "=> :WRITTEN");
    // The old root is outside now.
    let r = eval(&mut s, 6, &write_form(&d.root.join("old.txt")));
    assert_refused(&r, "--allow-write");
}

/// A confined image holds no capabilities, even when the server runs as
/// root, and may create no device node where it may write (a root image
/// once made `mknod c 1 3` and a node for the host's disk).
#[test]
fn a_confined_image_holds_no_capabilities_and_makes_no_device_nodes() {
    let d = dirs();
    for mode in ["workspace", "strict"] {
        let mut s = server(&d, &["--sandbox", mode]);
        let r = eval(
            &mut s,
            1,
            "(with-open-file (in \"/proc/self/status\")
               (loop for line = (read-line in nil) while line
                     when (and (> (length line) 3) (string= \"Cap\" line :end2 3))
                       collect line))",
        );
        assert!(!r.is_error, "{mode}: {}", r.text);
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert!(
                r.text.contains(&format!("{set}:\t0000000000000000")),
                "{mode}: {set} not empty: {}",
                r.text
            );
        }
        let node = d.root.join(format!("mem-{mode}"));
        let r = eval(
            &mut s,
            2,
            &format!(
                "(sb-ext:process-exit-code (sb-ext:run-program \"/usr/bin/mknod\" (list {} \"c\" \"1\" \"3\") :error nil :output nil))",
                lisp_path(&node)
            ),
        );
        assert!(!r.is_error, "{mode}: {}", r.text);
        assert_ne!(r.text, "=> 0", "{mode}: mknod succeeded");
        assert!(!node.exists(), "{mode}: a device node was made");
        // An ordinary file is still written there.
        let r = eval(
            &mut s,
            3,
            &write_form(&d.root.join(format!("ok-{mode}.txt"))),
        );
        assert_eq!(r.text, "=> :WRITTEN", "{mode}");
    }
}

/// The server's caches are read-only to a confined image, and what an
/// unconfined one changes there is found before the next start: an image
/// once saved its own core over the cached one (and could plant fasls in
/// ASDF's shared cache), and a later session of another project, under
/// `--sandbox off`, started from it.
#[test]
fn a_confined_image_cannot_change_what_later_images_load() {
    let d = dirs();
    let cache = d.outside.join("cache");
    let xdg = d.outside.join("xdg-cache");
    std::fs::create_dir_all(xdg.join("common-lisp")).unwrap();
    let env = [("XDG_CACHE_HOME", xdg.to_str().unwrap())];
    let mut s = server_with(&d, &["--sandbox", "workspace"], &cache, &env);
    let r = eval(&mut s, 1, "(+ 1 2)");
    assert_eq!(r.text, "=> 3");
    let find = |prefix: &str, suffix: &str| {
        std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let n = p.file_name().unwrap().to_string_lossy().into_owned();
                n.starts_with(prefix) && n.ends_with(suffix)
            })
            .unwrap_or_else(|| panic!("no {prefix}*{suffix} in {}", cache.display()))
    };
    let core = find("sbcl-", ".core");
    let before = std::fs::read(&core).unwrap();
    // Appending to the core, replacing it by rename, a new file beside it,
    // a fasl among Swank's, one in ASDF's shared cache: all refused.
    let append = format!(
        "(with-open-file (s {} :direction :output :if-exists :append) (write-string \"planted\" s) :written)",
        lisp_path(&core)
    );
    let r = eval(&mut s, 2, &append);
    assert!(
        r.is_error && r.text.contains("Permission denied"),
        "{}",
        r.text
    );
    let fake = d.root.join("fake.core");
    std::fs::write(&fake, "planted").unwrap();
    let r = eval(
        &mut s,
        3,
        &format!("(rename-file {} {})", lisp_path(&fake), lisp_path(&core)),
    );
    assert!(r.is_error, "{}", r.text);
    let swank_fasls = find("swank-fasl-", "");
    for (id, target) in [
        (4, cache.join("planted.lisp")),
        (5, swank_fasls.join("swank.fasl")),
        (6, xdg.join("common-lisp").join("planted.fasl")),
    ] {
        let r = eval(&mut s, id, &write_form(&target));
        assert!(
            r.is_error && r.text.contains("Permission denied"),
            "{}: {}",
            target.display(),
            r.text
        );
    }
    assert_eq!(std::fs::read(&core).unwrap(), before, "the core changed");
    // ASDF compiles into the project's own fasl dir in the cache.
    let r = eval(
        &mut s,
        7,
        "(namestring (asdf:apply-output-translations \"/somewhere/else/x.fasl\"))",
    );
    assert!(
        r.text.contains(&format!("{}/fasl/root-", cache.display()))
            && r.text.contains("/asdf/")
            && r.text.contains("/somewhere/else/x.fasl"),
        "{}",
        r.text
    );
    // sb-cover's reports: into the project's own coverage dir, not another's.
    let own = std::fs::read_dir(cache.join("coverage"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("root-")
        })
        .expect("the project's coverage dir, made at the start");
    let other = cache.join("coverage").join("other-0000000000000000");
    std::fs::create_dir_all(&other).unwrap();
    let r = eval(&mut s, 8, &write_form(&own.join("report.html")));
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 9, &write_form(&other.join("report.html")));
    assert!(
        r.is_error && r.text.contains("Permission denied"),
        "{}",
        r.text
    );
    drop(s);

    // Unconfined, the image can change the core; the next start finds it
    // changed, discards it, builds it again and says so.
    let mut s = server_with(&d, &["--sandbox", "off"], &cache, &env);
    let r = eval(&mut s, 1, &append);
    assert_eq!(r.text, "=> :WRITTEN");
    let r = call(&mut s, 2, "image-restart", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 3, "(+ 1 2)");
    assert!(r.text.contains("=> 3"), "{}", r.text);
    let all = format!(
        "{}{}",
        r.text,
        call(&mut s, 4, "image-info", json!({})).text
    );
    assert!(
        (r.text.contains("[NOTICE]") || all.contains("changed after the server built it")),
        "{all}"
    );
    assert!(
        !std::fs::read(&core).unwrap().ends_with(b"planted"),
        "the planted core is still in place"
    );
}

/// Under `strict` the image reads no other process's `/proc` entries (the
/// server's environment, maps, command line) and gets only a short list of
/// the server's environment variables: a secret planted in the server's
/// environment does not come back.
#[test]
fn strict_keeps_the_servers_environment_and_proc_from_the_image() {
    let d = dirs();
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cl-mcp-server-test-cache");
    let env = [("CL_MCP_PLANTED_SECRET", "s3cret-in-env")];
    let mut s = server_with(&d, &["--sandbox", "strict"], &cache, &env);
    for (id, file) in [(1, "environ"), (2, "maps"), (3, "cmdline"), (4, "status")] {
        let r = eval(
            &mut s,
            id,
            &format!(
                "(progn (require :sb-posix)
                   (with-open-file (s (format nil \"/proc/~D/{file}\" (sb-posix:getppid))
                                      :element-type '(unsigned-byte 8))
                     (let ((v (make-array 100000 :element-type '(unsigned-byte 8))))
                       (map 'string 'code-char (subseq v 0 (read-sequence v s))))))"
            ),
        );
        assert!(
            r.is_error && r.text.contains("Permission denied"),
            "{file}: {}",
            r.text
        );
        assert!(!r.text.contains("s3cret"), "{file}: {}", r.text);
    }
    let r = eval(
        &mut s,
        5,
        "(with-open-file (s \"/proc/1/cmdline\") (read-line s))",
    );
    assert!(r.is_error, "{}", r.text);
    let r = eval(
        &mut s,
        6,
        "(list (sb-ext:posix-getenv \"CL_MCP_PLANTED_SECRET\")
               (with-open-file (s \"/proc/self/environ\") (search \"s3cret\" (read-line s nil \"\")))
               (with-open-file (s \"/proc/self/status\") (read-line s))
               (with-open-file (s \"/proc/meminfo\") (subseq (read-line s) 0 9)))",
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.text.contains("(NIL NIL \"Name:\tsbcl\" \"MemTotal:\")"),
        "{}",
        r.text
    );
    // Workspace keeps the environment (reads are not confined there).
    let mut s = server_with(&d, &["--sandbox", "workspace"], &cache, &env);
    let r = eval(&mut s, 1, "(sb-ext:posix-getenv \"CL_MCP_PLANTED_SECRET\")");
    assert_eq!(r.text, "=> \"s3cret-in-env\"");
}

/// An executable shell script at `path` running `body`.
fn script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Which Lisps may run is decided at start: `image-start` and `lisps` take
/// an implementation's name or a path the server was started with; a
/// script an agent wrote in the project is never run, not even its
/// `--version`, whatever it is given as.
#[test]
fn image_start_runs_only_the_lisps_the_server_was_started_with() {
    let d = dirs();
    let marker = d.outside.join("escaped");
    let planted = d.root.join("tools/lisp");
    script(
        &planted,
        &format!("touch {}\necho 'SBCL 2.2.9'", marker.display()),
    );
    let allowed = d.outside.join("bin/mylisp");
    script(&allowed, "echo 'SBCL 2.2.9'");
    let mut s = server(
        &d,
        &[
            "--sandbox",
            "strict",
            "--allow-lisp",
            allowed.to_str().unwrap(),
        ],
    );
    let planted_s = planted.to_str().unwrap();
    let r = call(&mut s, 1, "image-start", json!({"lisp": planted_s}));
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("--allow-lisp") && r.text.contains("not a Lisp this server may run"),
        "{}",
        r.text
    );
    let r = call(
        &mut s,
        2,
        "asdf-test-system",
        json!({"system": "x", "lisps": [planted_s]}),
    );
    assert!(r.is_error && r.text.contains("--allow-lisp"), "{}", r.text);
    // A path given at start may be named; an implementation by its name.
    let r = call(&mut s, 3, "image-start", json!({"lisp": "/bin/sh"}));
    assert!(r.is_error && r.text.contains("--allow-lisp"), "{}", r.text);
    assert!(!marker.exists(), "the planted script ran");
}

/// A Lisp under the project root or where the image may write is never
/// run, even when the server was started with it: an agent could rewrite
/// it (the file tools write the root; the image, its writable places).
#[test]
fn a_lisp_the_agent_could_write_is_never_run() {
    let d = dirs();
    let marker = d.outside.join("escaped");
    let body = format!("touch {}\necho 'SBCL 2.2.9'", marker.display());
    let in_root = d.root.join("bin/sbcl-local");
    script(&in_root, &body);
    let in_tmp = d.server_tmp.join("sbcl-tmp");
    script(&in_tmp, &body);
    for (id, lisp, place) in [
        (1, &in_root, "under the project root"),
        (2, &in_tmp, "where the image may write"),
    ] {
        let mut s = server(&d, &["--lisp", lisp.to_str().unwrap()]);
        let r = eval(&mut s, id, "(+ 1 2)");
        assert!(r.is_error, "{}", r.text);
        assert!(
            r.text.contains("refusing to run the Lisp") && r.text.contains(place),
            "{}",
            r.text
        );
    }
    // Given at start as a further Lisp: refused when it starts.
    let mut s = server(&d, &["--allow-lisp", in_root.to_str().unwrap()]);
    let r = call(
        &mut s,
        3,
        "image-start",
        json!({"lisp": in_root.to_str().unwrap(), "name": "planted"}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("under the project root"), "{}", r.text);
    assert!(!marker.exists(), "a Lisp the agent could write ran");
}

/// The probe (`--version`) of a Lisp the server may run runs inside the
/// image's sandbox: a write outside the allowed places fails, one into the
/// project root succeeds (so the probe did run).
#[test]
fn the_lisp_probe_runs_inside_the_sandbox() {
    let d = dirs();
    let outside = d.outside.join("probe-outside");
    let inside = d.root.join("probe-inside");
    let lisp = d.outside.join("bin/odd-lisp");
    script(
        &lisp,
        &format!(
            "touch {} 2>/dev/null\ntouch {}\necho 'Frobnicator 1.0'",
            outside.display(),
            inside.display()
        ),
    );
    let mut s = server(&d, &["--lisp", lisp.to_str().unwrap()]);
    let r = eval(&mut s, 1, "(+ 1 2)");
    assert!(r.is_error && r.text.contains("Frobnicator"), "{}", r.text);
    assert!(inside.exists(), "the probe did not run");
    assert!(!outside.exists(), "the probe wrote outside the sandbox");
}

/// A cache the image could write is refused (inside the project root), or
/// kept out of the image's reach (under the temp dir: the image gets a
/// private temp dir instead of the whole one).
#[test]
fn the_cache_is_out_of_the_images_reach() {
    let d = dirs();
    let in_root = d.root.join(".cache");
    let mut s = server_with(&d, &[], &in_root, &[]);
    let r = eval(&mut s, 1, "(+ 1 2)");
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("--cache-dir") && r.text.contains("where the image may write"),
        "{}",
        r.text
    );
    drop(s);
    // Under the server's temp dir: the image writes its own temp dir there,
    // not the cache.
    let cache = d.server_tmp.join("cache");
    let mut s = server_with(&d, &[], &cache, &[]);
    let r = eval(&mut s, 2, "(namestring (uiop:temporary-directory))");
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("cl-mcp-server-tmp-"), "{}", r.text);
    let tmp_file = "(with-open-file (s (merge-pathnames \"t.txt\" (uiop:temporary-directory)) \
                    :direction :output :if-exists :supersede) (write-string \"x\" s) :written)";
    let r = eval(&mut s, 3, tmp_file);
    assert_eq!(r.text, "=> :WRITTEN");
    let r = eval(&mut s, 4, &write_form(&cache.join("planted")));
    assert_refused(&r, "--allow-write");
    let r = eval(&mut s, 5, &write_form(&d.server_tmp.join("loose")));
    assert_refused(&r, "--allow-write");
    let r = call(&mut s, 6, "image-info", json!({}));
    let write = r.structured["sandbox"]["write"].to_string();
    assert!(write.contains("cl-mcp-server-tmp-"), "{write}");
}

/// `strict` reads no other project's compiled code or coverage report in
/// the shared cache; its own are readable and writable.
#[test]
fn strict_reads_no_other_projects_cache() {
    let d = dirs();
    let cache = d.outside.join("cache");
    for sub in [
        "fasl/otherproj-0123456789abcdef",
        "coverage/otherproj-0123456789abcdef",
    ] {
        std::fs::create_dir_all(cache.join(sub)).unwrap();
        std::fs::write(cache.join(sub).join("secret.lisp"), "(secret)").unwrap();
    }
    let mut s = server_with(&d, &["--sandbox", "strict"], &cache, &[]);
    let read = |p: &Path| {
        format!(
            "(with-open-file (s {}) (values (read-line s)))",
            lisp_path(p)
        )
    };
    for (id, sub) in [(1, "fasl"), (2, "coverage")] {
        let p = cache
            .join(sub)
            .join("otherproj-0123456789abcdef/secret.lisp");
        let r = eval(&mut s, id, &read(&p));
        assert_refused(&r, "--allow-read");
        assert!(!r.text.contains("(secret)"), "{}", r.text);
    }
    // Its own fasl directory: writable and readable.
    let r = eval(
        &mut s,
        3,
        "(let ((p (merge-pathnames \"mine.txt\" (uiop:ensure-directory-pathname (uiop:getenv \"CL_MCP_FASL_DIR\"))))) \
         (with-open-file (s p :direction :output :if-exists :supersede) (write-string \"own\" s)) \
         (with-open-file (s p) (values (read-line s))))",
    );
    assert_eq!(r.text, "=> \"own\"");
}
