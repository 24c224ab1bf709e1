//! The built server driven over stdio by a benchmark, one request at a
//! time (the tools the benchmarks call send no notifications between a
//! request and its answer). Each benchmark uses the part it needs.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Server {
    /// Starts `bin` on the project `root` with `args` besides, and
    /// completes the handshake.
    pub fn spawn_bin(bin: &str, root: &std::path::Path, args: &[&str]) -> Server {
        let root = root.to_string_lossy();
        let mut all = vec!["--project-root", root.as_ref()];
        all.extend_from_slice(args);
        let mut s = Server::start(bin, &all);
        s.initialize();
        s
    }

    /// Starts `bin` with `args`, before any handshake.
    pub fn start(bin: &str, args: &[&str]) -> Server {
        Server::start_with_env(bin, args, &[])
    }

    /// Starts `bin` with `args` and extra environment `env`, before any
    /// handshake.
    pub fn start_with_env(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(bin)
            .envs(env.iter().copied())
            .args(["--log-level", "error"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cl-mcp-server");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Server {
            child,
            stdin,
            stdout,
            next_id: 1,
        }
    }

    /// The handshake: `initialize` (its answer) and `initialized`.
    pub fn initialize(&mut self) -> String {
        let r = self.roundtrip(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#);
        self.stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .unwrap();
        r
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one message and reads one line back.
    pub fn roundtrip(&mut self, msg: &str) -> String {
        self.stdin.write_all(msg.as_bytes()).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line
    }

    /// A `tools/call`: its round-trip time and the answer's line.
    pub fn call(&mut self, tool: &str, arguments: serde_json::Value) -> (Duration, String) {
        self.next_id += 1;
        let msg = serde_json::json!({"jsonrpc":"2.0","id":self.next_id,"method":"tools/call",
            "params":{"name":tool,"arguments":arguments}});
        let msg = msg.to_string();
        let t = Instant::now();
        let r = self.roundtrip(&msg);
        (t.elapsed(), r)
    }

    /// Closes stdin and waits for the server to exit.
    pub fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}
