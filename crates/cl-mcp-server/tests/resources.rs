//! The live image as MCP resources and completion.

mod common;

use common::Server;
use serde_json::{json, Value};

fn read(s: &mut Server, id: i64, uri: &str) -> Value {
    s.request(json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri":uri}}))
}

fn text(r: &Value) -> String {
    r["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {r}"))
        .to_string()
}

#[test]
fn image_resources_and_templates() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::initialized(&["--project-root", dir.path().to_str().unwrap()]);
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"resources/list"}));
    assert_eq!(r["result"]["resources"][0]["uri"], "lisp://image/info");
    let r = s.request(json!({"jsonrpc":"2.0","id":2,"method":"resources/templates/list"}));
    let templates: Vec<&str> = r["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        // The conformance fixtures' `test://` template (test-tools only).
        .filter(|t| !t.starts_with("test://"))
        .collect();
    assert_eq!(
        templates,
        [
            "lisp://package/{name}",
            "lisp://symbol/{package}/{name}",
            "lisp://system/{name}",
            "lisp://coverage/{system}/{page}"
        ]
    );

    assert!(text(&read(&mut s, 3, "lisp://image/info")).contains("SBCL"));
    let pkg = text(&read(&mut s, 4, "lisp://package/common-lisp-user"));
    assert!(
        pkg.contains("Package COMMON-LISP-USER") && pkg.contains("Nicknames: CL-USER"),
        "{pkg}"
    );
    let sym = text(&read(&mut s, 5, "lisp://symbol/CL/MAPCAR"));
    assert!(sym.to_lowercase().contains("function"), "{sym}");
    let sys = text(&read(&mut s, 6, "lisp://system/uiop"));
    assert!(sys.contains("uiop"), "{sys}");
    let r = read(&mut s, 7, "lisp://package/NO-SUCH-PACKAGE");
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert_eq!(r["error"]["data"]["uri"], "lisp://package/NO-SUCH-PACKAGE");
    assert!(r["error"]["data"]["detail"]
        .as_str()
        .unwrap()
        .contains("NO-SUCH-PACKAGE"));
    // An unknown kind of lisp:// resource is not found either, and says
    // which ones exist.
    let r = read(&mut s, 8, "lisp://elsewhere");
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(r["error"]["data"]["detail"]
        .as_str()
        .unwrap()
        .contains("lisp://image/info"));
}

#[test]
fn completion_of_template_variables_from_the_image() {
    let mut s = Server::initialized(&[]);
    let complete = |s: &mut Server, id: i64, uri: &str, arg: &str, value: &str, ctx: Value| {
        let r = s.request(json!({"jsonrpc":"2.0","id":id,"method":"completion/complete","params":{
            "ref":{"type":"ref/resource","uri":uri},"argument":{"name":arg,"value":value},"context":ctx}}));
        r["result"]["completion"]["values"].clone()
    };
    assert_eq!(
        complete(
            &mut s,
            1,
            "lisp://package/{name}",
            "name",
            "common-l",
            json!({})
        ),
        json!(["COMMON-LISP", "COMMON-LISP-USER"])
    );
    assert_eq!(
        complete(
            &mut s,
            2,
            "lisp://symbol/{package}/{name}",
            "name",
            "mapc",
            json!({"arguments":{"package":"CL"}})
        ),
        json!(["MAPC", "MAPCAN", "MAPCAR", "MAPCON"])
    );
    let systems = complete(&mut s, 3, "lisp://system/{name}", "name", "uio", json!({}));
    assert!(
        systems.as_array().unwrap().contains(&json!("uiop")),
        "{systems}"
    );
}

/// The coverage directory of the project at `root` under `cache`
/// (`<cache>/coverage/<root name>-<FNV-1a of the root's path>/`, as the
/// server names it).
fn coverage_dir(cache: &std::path::Path, root: &std::path::Path) -> std::path::PathBuf {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in root.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let name = root.file_name().unwrap().to_string_lossy();
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    cache.join("coverage").join(format!("{name}-{h:016x}"))
}

fn mkfifo(p: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {p:?}");
}

/// A named pipe where a coverage report's page should be (the image can
/// write there), or a project document that is one: reading it is refused
/// at once, saying what stands there, and the server goes on answering. A watchdog opens the pipes for
/// writing after 20 s, so a read that blocks fails the test instead of
/// hanging it.
#[test]
fn a_fifo_in_the_coverage_reports_is_refused_at_once() {
    use std::time::{Duration, Instant};
    let cache = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let root = project.path().canonicalize().unwrap();
    let report = coverage_dir(cache.path(), &root).join("calc");
    std::fs::create_dir_all(&report).unwrap();
    mkfifo(&report.join("cover-index.html"));
    mkfifo(&report.join("src-calc.html"));
    // A project document that is a pipe: file:// reads take the same path.
    mkfifo(&root.join("notes.md"));
    std::fs::write(report.join("ok.html"), "<html>ok</html>").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (stop, report, root) = (stop.clone(), report.clone(), root.clone());
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && t0.elapsed() < Duration::from_secs(20)
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            for f in ["cover-index.html", "src-calc.html"] {
                use std::os::unix::fs::OpenOptionsExt;
                let _ = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(report.join(f));
            }
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(root.join("notes.md"));
        })
    };
    let mut s = Server::initialized(&[
        "--project-root",
        root.to_str().unwrap(),
        "--cache-dir",
        cache.path().to_str().unwrap(),
        "--lazy-image",
    ]);
    let t0 = Instant::now();
    let doc = format!("file://{}", root.join("notes.md").display());
    for (id, uri) in [
        (1, "lisp://coverage/calc/index.html".to_string()),
        (2, "lisp://coverage/calc/src-calc.html".to_string()),
        (5, doc),
    ] {
        s.send(&json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri":uri}}));
    }
    s.send(&json!({"jsonrpc":"2.0","id":3,"method":"ping"}));
    let mut answered = std::collections::HashMap::new();
    while answered.len() < 4 {
        let m = s.recv_within(Duration::from_secs(10));
        if let Some(id) = m["id"].as_i64() {
            answered.insert(id, m);
        }
    }
    let took = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    watchdog.join().unwrap();
    assert!(took < Duration::from_secs(5), "took {took:?}");
    for id in [1, 2, 5] {
        let r = &answered[&id];
        let e = r["error"].to_string();
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert!(e.contains("named pipe (FIFO)"), "{e}");
    }
    assert_eq!(answered[&3]["result"], json!({}), "{}", answered[&3]);
    let ok = read(&mut s, 4, "lisp://coverage/calc/ok.html");
    assert_eq!(text(&ok), "<html>ok</html>");
}
