//! Several server nodes (`--transport http`, each its own `--node-id`) on
//! loopback behind Debian's HAProxy, configured by
//! `scripts/haproxy-nodes.sh` (the recipe): shared by the `nodes` test and
//! the `nodes` benchmark. Everything it starts dies with it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One server node.
pub struct Node {
    pub name: String,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
    pub child: Child,
}

/// The nodes and the proxy in front.
pub struct Cluster {
    pub nodes: Vec<Node>,
    /// The proxy's `/mcp` URL.
    pub proxy_url: String,
    haproxy: Child,
    _config: tempfile::TempDir,
}

/// Whether `haproxy` can be run here.
pub fn haproxy_installed() -> bool {
    Command::new("haproxy")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Starts `bin` as an HTTP node named `name` on the project `root`, with
/// `extra` arguments, and waits for it to listen.
pub fn start_node(bin: &str, name: &str, root: &Path, extra: &[&str]) -> Node {
    let mut child = Command::new(bin)
        .args(["--log-level", "warn", "http", "--bind", "127.0.0.1:0"])
        .args(["--node-id", name, "--project-root"])
        .arg(root)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cl-mcp-server");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    let url = loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("node {name} exited before listening: {:?}", child.wait());
        }
        if let Some(a) = line.trim().strip_prefix("cl-mcp-server: listening on ") {
            break a.to_string();
        }
    };
    // Keep draining stderr so the node never blocks on it.
    std::thread::spawn(move || for _ in err.lines().map_while(Result::ok) {});
    Node {
        name: name.into(),
        url,
        child,
    }
}

/// A loopback port free now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Cluster {
    /// `names.len()` nodes of `bin` on `root`, and HAProxy in front.
    pub fn start(bin: &str, names: &[&str], root: &Path, extra: &[&str]) -> Cluster {
        let nodes: Vec<Node> = names
            .iter()
            .map(|n| start_node(bin, n, root, extra))
            .collect();
        let listen = format!("127.0.0.1:{}", free_port());
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/haproxy-nodes.sh"
        );
        let mut args = vec![listen.clone()];
        for n in &nodes {
            let hostport = n
                .url
                .trim_start_matches("http://")
                .trim_end_matches("/mcp")
                .to_string();
            args.push(format!("{}={hostport}", n.name));
        }
        let out = Command::new(script)
            .args(&args)
            .output()
            .expect("run haproxy-nodes.sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("haproxy.cfg");
        std::fs::write(&config, &out.stdout).expect("write haproxy.cfg");
        let haproxy = Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn haproxy");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&listen).is_err() {
            assert!(
                Instant::now() < deadline,
                "haproxy did not listen on {listen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Cluster {
            nodes,
            proxy_url: format!("http://{listen}/mcp"),
            haproxy,
            _config: dir,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.haproxy.kill();
        let _ = self.haproxy.wait();
        for n in &mut self.nodes {
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
    }
}
