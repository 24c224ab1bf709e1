//! Black-box tests of the fs tools and the path policy: the built server
//! over stdio, a real temporary project, real symlinks.

mod common;
mod source_support;

use std::os::unix::fs::{symlink, PermissionsExt};

use serde_json::json;
use source_support::{project, Server};

#[test]
fn write_read_list_round_trip() {
    let (_d, root) = project();
    let mut s = Server::start(&root);
    let w = s.ok(
        "fs-write-file",
        json!({"path": "src/deep/new.lisp", "content": "(defun x () 1)\n"}),
    );
    assert_eq!(w.text, "Created src/deep/new.lisp (15 bytes).");
    assert_eq!(w.structured["created"], true);
    assert_eq!(
        std::fs::read_to_string(root.join("src/deep/new.lisp")).unwrap(),
        "(defun x () 1)\n"
    );
    let w = s.ok(
        "fs-write-file",
        json!({"path": "src/deep/new.lisp", "content": "(defun x () 2)\n"}),
    );
    assert_eq!(w.text, "Replaced src/deep/new.lisp (15 bytes).");

    let r = s.ok("fs-read-file", json!({"path": "src/deep/new.lisp"}));
    assert_eq!(r.text, "(defun x () 2)\n");
    assert_eq!(r.structured["hasMore"], false);

    std::fs::write(root.join(".hidden"), "h").unwrap();
    let l = s.ok("fs-list-directory", json!({}));
    assert_eq!(
        l.text,
        ". (2 entries: 1 directory, 1 file)\n  .hidden  (1 byte)\n  src/\n"
    );
    assert_eq!(l.structured["entries"][1]["type"], "directory");
}

#[test]
fn write_keeps_the_permission_mode_and_leaves_no_temp_files() {
    let (_d, root) = project();
    let f = root.join("run.sh");
    std::fs::write(&f, "old").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o751)).unwrap();
    let mut s = Server::start(&root);
    s.ok("fs-write-file", json!({"path": "run.sh", "content": "new"}));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
    let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o751);
    let names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["run.sh".to_string()]);
}

#[test]
fn paging_by_lines_with_a_next_page_note() {
    let (_d, root) = project();
    let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    std::fs::write(root.join("t.txt"), body).unwrap();
    let mut s = Server::start(&root);
    let r = s.ok(
        "fs-read-file",
        json!({"path": "t.txt", "offset": 2, "limit": 3}),
    );
    assert_eq!(
        r.text,
        "line 3\nline 4\nline 5\n[t.txt: showed lines 3-5; the line limit was reached. Next page: offset=5]"
    );
    assert_eq!(r.structured["nextOffset"], 5);
    let r = s.ok("fs-read-file", json!({"path": "t.txt", "offset": 8}));
    assert_eq!(r.text, "line 9\nline 10\n");
    let e = s.err("fs-read-file", json!({"path": "t.txt", "offset": 20}));
    assert!(
        e.text.contains("past the end") && e.text.contains("10 lines"),
        "{}",
        e.text
    );
}

#[test]
fn the_two_megabyte_cap_pages() {
    let (_d, root) = project();
    let line = "x".repeat(99) + "\n";
    let body = line.repeat(30_000); // 3 MB
    std::fs::write(root.join("big.txt"), &body).unwrap();
    let mut s = Server::start(&root);
    let r = s.ok("fs-read-file", json!({"path": "big.txt"}));
    let next = r.structured["nextOffset"].as_u64().unwrap();
    assert_eq!(next, 20_971, "2 MB of 100-byte lines");
    assert!(r.text.ends_with(&format!(
        "[big.txt: showed lines 1-20971; the 2 MB per-call cap was reached. Next page: offset={next}]"
    )));
    let r = s.ok("fs-read-file", json!({"path": "big.txt", "offset": next}));
    assert_eq!(r.structured["lines"], 30_000 - next);
    assert_eq!(r.structured["hasMore"], false);
}

/// Every way out of the root is refused, with the root named.
#[test]
fn every_way_out_is_refused() {
    let (_d, root) = project();
    let (_o, outside) = project();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    symlink(outside.join("secret.txt"), root.join("link.txt")).unwrap();
    symlink(&outside, root.join("linkdir")).unwrap();
    symlink(outside.join("nowhere"), root.join("dangling")).unwrap();
    let mut s = Server::start(&root);
    let root_s = root.display().to_string();
    let cases = [
        "../secret.txt".to_string(),
        "sub/../../secret.txt".to_string(),
        outside.join("secret.txt").display().to_string(),
        "link.txt".to_string(),
        "linkdir/secret.txt".to_string(),
    ];
    for path in &cases {
        for (tool, args) in [
            ("fs-read-file", json!({"path": path})),
            ("fs-write-file", json!({"path": path, "content": "x"})),
            ("lisp-read-file", json!({"path": path})),
            ("lisp-check-parens", json!({"path": path})),
        ] {
            let e = s.err(tool, args);
            assert!(
                e.text.contains("Refused path") && e.text.contains(&root_s),
                "{tool} {path}: {}",
                e.text
            );
        }
    }
    // Not-yet-existing paths: through a symlinked directory, a `..` after a
    // missing directory, a dangling symlink.
    for path in ["linkdir/new/file.txt", "missing/../../x.txt", "dangling"] {
        let e = s.err("fs-write-file", json!({"path": path, "content": "x"}));
        assert!(e.text.contains("Refused path"), "{path}: {}", e.text);
    }
    let e = s.err("fs-list-directory", json!({"path": "linkdir"}));
    assert!(e.text.contains("outside the project root"), "{}", e.text);
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!outside.join("new").exists());
    assert!(!outside.join("nowhere").exists());
}

#[test]
fn symlinks_inside_the_root_are_fine() {
    let (_d, root) = project();
    std::fs::create_dir(root.join("real")).unwrap();
    std::fs::write(root.join("real/a.lisp"), "(a)\n").unwrap();
    symlink(root.join("real"), root.join("alias")).unwrap();
    let mut s = Server::start(&root);
    let r = s.ok("fs-read-file", json!({"path": "alias/a.lisp"}));
    assert_eq!(r.text, "(a)\n");
    assert_eq!(r.structured["path"], "real/a.lisp");
    let l = s.ok("fs-list-directory", json!({}));
    assert!(
        l.text
            .contains(&format!("  alias -> {}", root.join("real").display())),
        "{}",
        l.text
    );
}

#[test]
fn project_root_stays_inside_the_start_root_unless_allowed() {
    let (_d, root) = project();
    let (_o, other) = project();
    std::fs::create_dir(root.join("sub")).unwrap();
    let mut s = Server::start(&root);
    // The attack: move the root to / and read a system file.
    for outside in [
        "/".to_string(),
        "/etc".to_string(),
        other.display().to_string(),
        "..".into(),
    ] {
        let e = s.err("fs-set-project-root", json!({"path": outside}));
        assert!(
            e.text.contains("outside the roots this session may use")
                && e.text.contains("--allow-any-root"),
            "{outside}: {}",
            e.text
        );
    }
    let e = s.err("fs-read-file", json!({"path": "/etc/passwd"}));
    assert!(!e.text.contains("root:"), "{}", e.text);
    let i = s.ok("fs-get-project-info", json!({}));
    assert_eq!(i.structured["projectRoot"], root.display().to_string());
    // Inside the start root is fine, and back up to it again.
    s.ok("fs-set-project-root", json!({"path": "sub"}));
    s.ok(
        "fs-set-project-root",
        json!({"path": root.display().to_string()}),
    );
}

#[test]
fn project_root_info_and_change() {
    let (_d, root) = project();
    let (_o, other) = project();
    let mut s = Server::start_with(&root, &["--allow-any-root"]);
    let i = s.ok("fs-get-project-info", json!({}));
    assert_eq!(i.structured["projectRoot"], root.display().to_string());
    assert_eq!(i.structured["projectRootSource"], "command-line");
    let e = s.err("fs-set-project-root", json!({"path": "/no/such/dir"}));
    assert!(e.text.contains("Cannot use '/no/such/dir'"), "{}", e.text);
    std::fs::write(other.join("f.txt"), "other").unwrap();
    let r = s.ok(
        "fs-set-project-root",
        json!({"path": other.display().to_string()}),
    );
    assert_eq!(
        r.text.lines().next().unwrap(),
        format!(
            "Project root set to {} (was {}).",
            other.display(),
            root.display()
        )
    );
    // The image follows the root (the next line says so).
    assert!(
        r.text
            .contains("working directory and *default-pathname-defaults* move there"),
        "{}",
        r.text
    );
    assert_eq!(s.ok("fs-read-file", json!({"path": "f.txt"})).text, "other");
    let i = s.ok("fs-get-project-info", json!({}));
    assert_eq!(i.structured["projectRootSource"], "session");
    let e = s.err("fs-set-project-root", json!({"path": "f.txt"}));
    assert!(e.text.contains("not a directory"), "{}", e.text);
    // An empty path is a mistake, not "keep the root".
    for empty in ["", "  "] {
        let e = s.err("fs-set-project-root", json!({"path": empty}));
        assert!(e.text.starts_with("`path` is empty"), "{}", e.text);
    }
    let i = s.ok("fs-get-project-info", json!({}));
    assert_eq!(i.structured["projectRoot"], other.display().to_string());
}

/// A named pipe would block a reader until some writer comes: the tools
/// refuse it at once. (If one blocks anyway, the watchdog writes to the
/// pipe after 20 s so the test fails instead of hanging.)
#[test]
fn fifos_are_refused_not_read() {
    let (_d, root) = project();
    let pipe = root.join("pipe.lisp");
    let st = std::process::Command::new("mkfifo")
        .arg(&pipe)
        .status()
        .unwrap();
    assert!(st.success());
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let p = pipe.clone();
    let watchdog = std::thread::spawn(move || {
        if wait
            .recv_timeout(std::time::Duration::from_secs(20))
            .is_err()
        {
            // Unblock the reader (open for writing waits for it).
            let _ = std::fs::write(&p, "(unblocked)\n");
        }
    });
    let mut s = Server::start(&root);
    for (tool, args) in [
        ("fs-read-file", json!({"path": "pipe.lisp"})),
        ("lisp-check-parens", json!({"path": "pipe.lisp"})),
        ("lisp-read-file", json!({"path": "pipe.lisp"})),
        (
            "lisp-edit-form",
            json!({"path": "pipe.lisp", "formType": "defun", "formName": "a",
                   "operation": "delete"}),
        ),
    ] {
        let e = s.err(tool, args);
        assert!(
            e.text.contains(
                "'pipe.lisp' is a named pipe (FIFO); only regular files are read or edited"
            ),
            "{tool}: {}",
            e.text
        );
    }
    let _ = done.send(());
    watchdog.join().unwrap();
}

/// A line longer than the 2 MB cap is paged inside the line with
/// `byteOffset`, cut at character boundaries; nothing is lost.
#[test]
fn a_line_longer_than_the_cap_pages_by_bytes() {
    let (_d, root) = project();
    // 1 + 2 * 2.5M bytes of `é`: the 2 MB cut falls inside a character.
    let body = format!("a{}\nend\n", "é".repeat(2_500_000));
    std::fs::write(root.join("long.txt"), &body).unwrap();
    let mut s = Server::start(&root);
    let r = s.ok("fs-read-file", json!({"path": "long.txt"}));
    assert_eq!(r.structured["nextOffset"], 0);
    assert_eq!(r.structured["nextByteOffset"], 2_097_151);
    assert_eq!(r.structured["lines"], 1);
    assert!(
        r.text.ends_with(
            "[long.txt: showed bytes 0-2097151 of line 1, which is longer than the 2 MB \
             per-call cap. Next page: offset=0, byteOffset=2097151]"
        ),
        "{}",
        &r.text[r.text.len() - 200..]
    );
    let mut got = r.structured["content"].as_str().unwrap().to_string();
    let mut pages = 1;
    let mut next = (0u64, r.structured["nextByteOffset"].as_u64());
    while let (offset, Some(byte_offset)) = next {
        let r = s.ok(
            "fs-read-file",
            json!({"path": "long.txt", "offset": offset, "byteOffset": byte_offset}),
        );
        got.push_str(r.structured["content"].as_str().unwrap());
        pages += 1;
        if r.structured["hasMore"] == false {
            break;
        }
        next = (
            r.structured["nextOffset"].as_u64().unwrap(),
            r.structured["nextByteOffset"].as_u64(),
        );
    }
    assert_eq!(pages, 3);
    assert!(got == body, "the pages put together are the file");
    let e = s.err(
        "fs-read-file",
        json!({"path": "long.txt", "offset": 1, "byteOffset": 4}),
    );
    assert_eq!(
        e.text,
        "`byteOffset` 4 is past the end of line 2 of 'long.txt', which has 4 bytes."
    );
}

/// A Latin-1 file is read byte for byte and said so, never with U+FFFD;
/// writing it back keeps Latin-1, and text with U+FFFD is refused over it.
#[test]
fn latin1_files_are_read_and_written_honestly() {
    let (_d, root) = project();
    let mut s = Server::start(&root);
    let path = root.join("legacy.lisp");
    // "café" and "naïve" in Latin-1 (ISO-8859-1).
    std::fs::write(&path, b";; caf\xe9\n(defun na\xefve () 1)\n").unwrap();
    let r = s.ok("fs-read-file", json!({"path": "legacy.lisp"}));
    assert_eq!(r.structured["encoding"], "latin-1");
    assert_eq!(r.structured["content"], ";; café\n(defun naïve () 1)\n");
    assert!(
        r.text
            .starts_with("[legacy.lisp: not UTF-8; decoded as Latin-1"),
        "{}",
        r.text
    );
    assert!(
        r.text.ends_with(";; café\n(defun naïve () 1)\n"),
        "{}",
        r.text
    );
    assert!(!r.text.contains('\u{FFFD}'));

    // Replacement characters would destroy the original bytes: refused.
    let e = s.err(
        "fs-write-file",
        json!({"path": "legacy.lisp", "content": ";; caf\u{FFFD}\n"}),
    );
    assert!(e.text.contains("U+FFFD"), "{}", e.text);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b";; caf\xe9\n(defun na\xefve () 1)\n"
    );
    // The text as read, changed, goes back in Latin-1.
    let w = s.ok(
        "fs-write-file",
        json!({"path": "legacy.lisp", "content": ";; café\n(defun naïve () 2)\n"}),
    );
    assert_eq!(w.structured["encoding"], "latin-1");
    assert!(w.text.contains("in Latin-1 as it was"), "{}", w.text);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b";; caf\xe9\n(defun na\xefve () 2)\n"
    );
    // UTF-8 files are UTF-8 and say so.
    std::fs::write(root.join("u.lisp"), "(defun é () 1)\n").unwrap();
    let r = s.ok("fs-read-file", json!({"path": "u.lisp"}));
    assert_eq!(r.structured["encoding"], "utf-8");
    assert_eq!(r.text, "(defun é () 1)\n");
    let w = s.ok(
        "fs-write-file",
        json!({"path": "u.lisp", "content": "(defun é () 2)\n"}),
    );
    assert!(w.structured.get("encoding").is_none(), "{}", w.structured);
    assert_eq!(
        std::fs::read_to_string(root.join("u.lisp")).unwrap(),
        "(defun é () 2)\n"
    );
}
