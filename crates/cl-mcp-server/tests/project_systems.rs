//! The project's own ASDF systems are findable by name (issue 9): every
//! `.asd` under the session's project root, from the first call, after a
//! restart and after `fs-set-project-root`; and the user's ASDF
//! configuration is read at every image start, cached core or not.

mod common;
mod eval_support;

use std::path::Path;

use eval_support::{call, eval, lisp_server};
use serde_json::json;

fn write_system(dir: &Path, name: &str, value: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(format!("{name}.asd")),
        format!("(defsystem \"{name}\" :components ((:file \"{name}\")))\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join(format!("{name}.lisp")),
        format!("(defpackage #:{name} (:use #:cl) (:export #:answer))\n(in-package #:{name})\n(defun answer () {value})\n"),
    )
    .unwrap();
}

#[test]
fn project_systems_load_by_name_across_restarts_and_root_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let project = root.join("project");
    write_system(&project, "inventory", ":inventory");
    // A nested system (ASDF :tree semantics) and ones that must stay hidden.
    write_system(&project.join("contrib/reports"), "invreports", ":reports");
    write_system(&project.join("node_modules/junk"), "nodejunk", ":junk");
    write_system(&project.join(".hidden"), "hiddenjunk", ":junk");
    let other = root.join("other");
    write_system(&other, "otherproj", ":other");

    let project_s = project.to_string_lossy().into_owned();
    let mut s = lisp_server(&["--project-root", &project_s, "--allow-any-root"]);

    // The first call already finds the project's system.
    let r = call(
        &mut s,
        1,
        "asdf-load-system",
        json!({"system": "inventory"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 2, "(inventory:answer)");
    assert_eq!(r.text, "=> :INVENTORY");

    // Listed, marked as the project's; skipped directories stay out.
    let r = call(&mut s, 3, "asdf-list-systems", json!({}));
    let systems = r.structured["systems"].as_array().unwrap();
    let project_names: Vec<&str> = systems
        .iter()
        .filter(|e| e["project"] == json!(true))
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(project_names, ["inventory", "invreports"], "{}", r.text);
    assert!(
        r.text.contains("inventory (project) (loaded)"),
        "{}",
        r.text
    );
    assert!(
        !r.text.contains("nodejunk") && !r.text.contains("hiddenjunk"),
        "{}",
        r.text
    );

    // From evaluate-lisp too, with no workaround.
    let r = eval(
        &mut s,
        4,
        "(asdf:load-system \"invreports\") (invreports:answer)",
    );
    assert_eq!(r.text, "=> :REPORTS", "{}", r.text);

    // After a restart (all state gone) the project is still findable.
    let r = call(&mut s, 5, "image-restart", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        6,
        "asdf-load-system",
        json!({"system": "inventory"}),
    );
    assert!(!r.is_error, "{}", r.text);

    // A new .asd appears: found without any call to register it.
    write_system(&project.join("late"), "latecomer", ":late");
    let r = eval(
        &mut s,
        7,
        "(asdf:load-system \"latecomer\") (latecomer:answer)",
    );
    assert_eq!(r.text, "=> :LATE", "{}", r.text);

    // Moving the root makes the new project's systems findable.
    let r = call(
        &mut s,
        8,
        "fs-set-project-root",
        json!({"path": other.to_string_lossy()}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        9,
        "asdf-load-system",
        json!({"system": "otherproj"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 10, "(otherproj:answer)");
    assert_eq!(r.text, "=> :OTHER");
}

#[test]
fn the_users_asdf_configuration_is_read_at_every_start() {
    // The shared test core was built without this registry: a cached core
    // must not freeze the configuration of the moment it was saved.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let elsewhere = root.join("registry");
    write_system(&elsewhere, "fromregistry", ":registry");
    let empty = root.join("project");
    std::fs::create_dir_all(&empty).unwrap();
    let cache = std::env::temp_dir().join("cl-mcp-server-test-cache");
    let registry = format!(
        "(:source-registry (:tree \"{}/\") :inherit-configuration)",
        elsewhere.display()
    );
    let mut s = common::Server::start_with_env(
        &["--project-root", empty.to_str().unwrap()],
        &[
            ("CL_MCP_CACHE_DIR", cache.to_str().unwrap()),
            ("CL_SOURCE_REGISTRY", registry.as_str()),
        ],
    );
    let r = s.request(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}));
    assert!(r.get("result").is_some(), "{r}");
    s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let r = call(
        &mut s,
        1,
        "asdf-load-system",
        json!({"system": "fromregistry"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 2, "(fromregistry:answer)");
    assert_eq!(r.text, "=> :REGISTRY");
}
