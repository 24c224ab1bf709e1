//! `lisp-compile-file` writes its fasls into a private directory of the
//! server's cache (0700, ours), never into the shared temporary directory
//! where another user could plant a symbolic link or swap a fasl (issue 10),
//! and a directory of its project's own (an image may write no other).

mod common;
mod eval_support;

use std::os::unix::fs::PermissionsExt;

use eval_support::call;
use serde_json::json;

#[test]
fn compiled_fasls_go_to_a_private_directory_and_never_follow_planted_links() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap().join("project");
    std::fs::create_dir_all(&root).unwrap();
    let src = root.join("fasl-target.lisp");
    std::fs::write(&src, "(defun fasl-target-answer () 42)\n").unwrap();
    let cache = tmp.path().join("cache");

    // The old shared path, with a link planted where the fasl would go.
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let shared = std::env::temp_dir()
        .join("cl-mcp-server-fasl")
        .join(src.parent().unwrap().strip_prefix("/").unwrap());
    std::fs::create_dir_all(&shared).unwrap();
    let planted = shared.join("fasl-target.fasl");
    let _ = std::fs::remove_file(&planted);
    std::os::unix::fs::symlink(&victim, &planted).unwrap();

    let mut s = common::Server::initialized_with_env(
        &["--project-root", root.to_str().unwrap()],
        &[("CL_MCP_CACHE_DIR", cache.to_str().unwrap())],
    );
    let r = call(
        &mut s,
        1,
        "lisp-compile-file",
        json!({"path": "fasl-target.lisp"}),
    );
    assert!(!r.is_error, "{}", r.text);

    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let _ = std::fs::remove_file(&planted);
    // The project's own directory there (`project-<hash of the root>`),
    // the one an image of this project may write.
    let fasl_dir = cache.join("fasl");
    let mode = std::fs::metadata(&fasl_dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    let project = std::fs::read_dir(&fasl_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("project-")
        })
        .expect("the project's fasl dir");
    let mode = std::fs::metadata(&project).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    let fasl = project
        .join(src.parent().unwrap().strip_prefix("/").unwrap())
        .join("fasl-target.fasl");
    assert!(fasl.is_file(), "no fasl at {}", fasl.display());
}
