//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! installed under `target/js` by scripts/setup.sh) against the built binary
//! over Streamable HTTP: 0.1.16 for protocol 2025-11-25 and 2025-06-18, and
//! 0.2 for the 2025-11-25 and 2026-07-28 requirement sets. Each run has its
//! own server and its own expected-failures file in `tests/conformance/`
//! (every entry with its reason); a new failure, or an entry that now
//! passes, fails the test. The suite's fixtures (`test_*` tools, `test://`
//! resources, `test_*` prompts) exist only with the `test-tools` feature.

mod common;

use std::path::PathBuf;
use std::process::Command;

/// One run of a suite: which package, its arguments, its baseline.
struct Run {
    name: &'static str,
    package: &'static str,
    args: &'static [&'static str],
    expected_failures: &'static str,
}

const RUNS: &[Run] = &[
    Run {
        name: "0.1.16 --spec-version 2025-11-25",
        package: "conformance-0.1",
        args: &["--spec-version", "2025-11-25"],
        expected_failures: "expected-failures-0.1-2025-11-25.yml",
    },
    Run {
        name: "0.1.16 --spec-version 2025-06-18",
        package: "conformance-0.1",
        args: &["--spec-version", "2025-06-18"],
        expected_failures: "expected-failures-0.1-2025-06-18.yml",
    },
    Run {
        name: "0.2 --requirements 2025-11-25",
        package: "conformance-0.2",
        args: &["--requirements", "2025-11-25"],
        expected_failures: "expected-failures-0.2-2025-11-25.yml",
    },
    Run {
        name: "0.2 --requirements 2026-07-28",
        package: "conformance-0.2",
        args: &["--requirements", "2026-07-28"],
        expected_failures: "expected-failures-0.2-2026-07-28.yml",
    },
];

/// `target/js` of the repository (`CL_MCP_JS_DIR` overrides it).
fn js_dir() -> PathBuf {
    std::env::var_os("CL_MCP_JS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/js"))
}

/// Runs one suite against a fresh server: `Err(report)` when it fails.
fn run(r: &Run, node: &PathBuf) -> Result<(), String> {
    let suite = js_dir()
        .join("node_modules")
        .join(r.package)
        .join("dist/index.js");
    let baseline = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(r.expected_failures);
    let server = common::Listening::start(&["http", "--bind", "127.0.0.1:0"]);
    let out = Command::new(node)
        .arg(&suite)
        .args(["server", "--url", &server.address])
        .args(r.args)
        .arg("--expected-failures")
        .arg(&baseline)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", node.display()));
    drop(server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() && stdout.contains("Baseline check passed") {
        return Ok(());
    }
    // The summary and the baseline verdict are at the end; the per-scenario
    // detail of a failure is in the suite's own output (rerun with
    // `--scenario NAME`, see README).
    let summary = stdout
        .find("=== SUMMARY ===")
        .map(|i| &stdout[i..])
        .unwrap_or(&stdout);
    Err(format!(
        "conformance {} failed ({}):\n{summary}\n{stderr}",
        r.name, out.status
    ))
}

#[test]
fn official_conformance_suites_pass() {
    let node = js_dir().join("bin/node");
    assert!(
        node.exists(),
        "Node and the conformance suites are not installed ({} is missing): run scripts/setup.sh",
        node.display()
    );
    for r in RUNS {
        let suite = js_dir().join("node_modules").join(r.package);
        assert!(
            suite.exists(),
            "the conformance suite {} is missing ({}): run scripts/setup.sh",
            r.package,
            suite.display()
        );
    }
    // The runs are independent (a server each): in parallel.
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = RUNS.iter().map(|r| s.spawn(|| run(r, &node))).collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().expect("suite thread").err())
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
