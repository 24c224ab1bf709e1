//! Three nodes behind HAProxy (the recipe, `scripts/haproxy-nodes.sh`),
//! driven by concurrent agents through the official Python SDK in the
//! stateless era (`tests/sdk/nodes_agents.py`): images spread by load,
//! calls routed by their handle's node, one node killed midway. Its agents
//! hear "image lost" once and go on elsewhere; nobody else loses anything.

mod common;

#[path = "../benches/support/cluster.rs"]
mod cluster;

use std::process::Command;

const AGENTS: &str = "6";
const STEPS: &str = "6";

#[test]
fn agents_survive_a_node_killed_behind_haproxy() {
    let test = "agents_survive_a_node_killed_behind_haproxy";
    if !cluster::haproxy_installed() {
        return common::skip_missing(test, "haproxy (Debian package haproxy)");
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python).args(["-c", "import mcp"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        return common::skip_missing(test, "the MCP Python SDK (PYTHON=…/sdk-venv/bin/python)");
    }
    let project = tempfile::tempdir().unwrap();
    let cluster = cluster::Cluster::start(
        env!("CARGO_BIN_EXE_cl-mcp-server"),
        &["node-a", "node-b", "node-c"],
        project.path(),
        &["--lazy-image"],
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk/nodes_agents.py");
    let mut args = vec![
        script.to_string(),
        cluster.proxy_url.clone(),
        project.path().display().to_string(),
        AGENTS.into(),
        STEPS.into(),
    ];
    for n in &cluster.nodes {
        args.push(format!("{}={},{}", n.name, n.url, n.child.id()));
    }
    let out = Command::new(&python).args(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "agents failed:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
    for fact in [
        "misrouted handle refused, naming node-",
        "forged key: lost",
        "a name refused in the stateless era",
        "Mcp-Param-Image checked against the argument",
        "legacy session pinned to its node",
        "image lost: The image node-",
        "\"lost\": ",
    ] {
        assert!(stdout.contains(fact), "{fact:?} not in:\n{stdout}");
    }
}
