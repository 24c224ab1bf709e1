//! Drives the built `cl-mcp-server` binary over stdio, as a client would.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_cl-mcp-server");

/// The Common Lisp implementation the image-backed tests run on, by its
/// short name (`sbcl`, `ecl`, `clisp`, `abcl`, `ccl`): `CL_MCP_LISP` (a name
/// or a path), which the servers the tests start inherit. Unset, `sbcl`.
/// `scripts/test.sh` runs the eval, image, code and ASDF suites once more
/// with `CL_MCP_LISP=ecl` and `CL_MCP_LISP=clisp` (the CI matrix).
pub fn lisp() -> &'static str {
    static NAME: OnceLock<&'static str> = OnceLock::new();
    NAME.get_or_init(|| {
        let Some(v) = std::env::var_os("CL_MCP_LISP").filter(|v| !v.is_empty()) else {
            return "sbcl";
        };
        let file = std::path::Path::new(&v)
            .file_name()
            .map(|f| f.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        ["sbcl", "ecl", "clisp", "abcl", "ccl", "lx86cl"]
            .into_iter()
            .find(|n| file.starts_with(n))
            .map(|n| if n == "lx86cl" { "ccl" } else { n })
            .unwrap_or_else(|| panic!("CL_MCP_LISP={v:?}: not an implementation the tests know"))
    })
}

/// A test (or its rest) that cannot run here because `prerequisite` is
/// missing (a program, a writable cgroup, root): never a silent pass. Under
/// CI (`CI` set), where every prerequisite is installed, it fails saying
/// what is missing; elsewhere it is counted as skipped: a line in the file
/// `CL_MCP_TEST_SKIPS` names (`scripts/test.sh` prints the count in its
/// summary line) and one on stderr. The caller returns after it.
pub fn skip_missing(test: &str, prerequisite: &str) {
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{test} cannot run: {prerequisite} (CI must provide it: see scripts/setup.sh)");
    }
    record_skip("missing", test, prerequisite);
}

/// A test (or its rest) that needs what this machine does not offer and no
/// package installs (a writable cgroup): counted as skipped, even under CI.
/// The caller returns after it.
pub fn skip_unavailable(test: &str, feature: &str) {
    record_skip("unavailable", test, feature);
}

/// The rest of a test that checks what this implementation does not do (a
/// known gap, said in the README): counted as skipped, with its reason,
/// never as passed.
pub fn skip_known_gap(test: &str, gap: &str) {
    record_skip(&format!("gap on {}", lisp()), test, gap);
}

fn record_skip(kind: &str, test: &str, why: &str) {
    let line = format!("{kind}\t{test}\t{}", why.replace('\n', " "));
    eprintln!("SKIPPED {line}");
    if let Some(path) = std::env::var_os("CL_MCP_TEST_SKIPS").filter(|p| !p.is_empty()) {
        use std::io::Write as _;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Whether the tests run on SBCL (the default implementation).
pub fn on_sbcl() -> bool {
    lisp() == "sbcl"
}

/// What `lisp-implementation-type` says on the implementation under test,
/// upper-cased as `image-info` reports it.
pub fn lisp_type() -> &'static str {
    match lisp() {
        "sbcl" => "SBCL",
        "ecl" => "ECL",
        "clisp" => "CLISP",
        "abcl" => "ARMED BEAR COMMON LISP",
        _ => "CLOZURE COMMON LISP",
    }
}

/// A form that makes the image exit at once with `code`, in the
/// implementation's own words.
pub fn exit_form(code: i32) -> String {
    match lisp() {
        "sbcl" => format!("(sb-ext:exit :code {code} :abort t)"),
        "abcl" => format!("(ext:exit :status {code})"),
        "ccl" => format!("(ccl:quit {code})"),
        _ => format!("(ext:quit {code})"),
    }
}

/// A running server with its stdin and a reader thread for its stdout lines.
pub struct Server {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Tool names of the `tools/call` requests sent, by id, so every
    /// response's `structuredContent` is checked against its schema.
    calls: HashMap<String, String>,
}

/// Each tool's `outputSchema`, from the binary's own `tools/list` (read once
/// per test binary, from a separate server so no test sees the request).
pub fn output_schemas() -> &'static HashMap<String, Value> {
    static SCHEMAS: OnceLock<HashMap<String, Value>> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut cmd = Command::new(BIN);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = cmd.spawn().expect("spawn cl-mcp-server for tools/list");
        let mut stdin = child.stdin.take().unwrap();
        let msgs = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"schemas","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            "\n"
        );
        stdin.write_all(msgs.as_bytes()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().expect("tools/list");
        let list = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|m| m["id"] == 2)
            .expect("tools/list answered");
        list["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| Some((t["name"].as_str()?.to_string(), t.get("outputSchema")?.clone())))
            .collect()
    })
}

/// Panics unless `structured` validates against `tool`'s `outputSchema`
/// (JSON Schema 2020-12), as the official SDKs and the Inspector require.
pub fn assert_conforms(tool: &str, structured: &Value) {
    let Some(schema) = output_schemas().get(tool) else {
        panic!("{tool} returned structuredContent but lists no outputSchema: {structured}");
    };
    let validator = jsonschema::draft202012::new(schema)
        .unwrap_or_else(|e| panic!("{tool}: outputSchema is not valid JSON Schema: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(structured)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{tool}: structuredContent does not match its outputSchema: {errors:?}\n{structured}"
    );
}

impl Server {
    /// Starts `cl-mcp-server` with these extra arguments.
    pub fn start(args: &[&str]) -> Server {
        Server::start_with_env(args, &[])
    }

    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_with_stderr(args, env, Stdio::null())
    }

    /// Starts `cl-mcp-server` with its stderr (the JSON log) going to `stderr`.
    pub fn start_with_stderr(args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Server {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Server::spawn(cmd)
    }

    /// Starts the server `cmd` describes (its stdin and stdout are set
    /// here), e.g. one with a cleared environment.
    pub fn spawn(mut cmd: Command) -> Server {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn cl-mcp-server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        Server {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            calls: HashMap::new(),
        }
    }

    /// Starts a server and completes the legacy handshake.
    pub fn initialized(args: &[&str]) -> Server {
        Server::initialized_with_env(args, &[])
    }

    /// Starts a server with extra environment and completes the handshake.
    pub fn initialized_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut s = Server::start_with_env(args, env);
        let r = s.request(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}));
        assert!(r.get("result").is_some(), "initialize failed: {r}");
        s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        s
    }

    /// Writes one raw line (a newline is added).
    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Writes raw bytes followed by a newline.
    pub fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, msg: &Value) {
        if msg["method"] == "tools/call" {
            if let (Some(id), Some(name)) = (msg.get("id"), msg["params"]["name"].as_str()) {
                self.calls.insert(id.to_string(), name.to_string());
            }
        }
        self.send_raw(&msg.to_string());
    }

    /// Checks a tool result against the tool's output schema.
    fn check_structured(&mut self, m: &Value) {
        let Some(id) = m.get("id") else { return };
        if m.get("result").is_none() && m.get("error").is_none() {
            return;
        }
        let Some(tool) = self.calls.remove(&id.to_string()) else {
            return;
        };
        if let Some(sc) = m["result"].get("structuredContent") {
            assert_conforms(&tool, sc);
        }
    }

    /// The next stdout line, parsed; panics after `timeout`.
    pub fn recv_within(&mut self, timeout: Duration) -> Value {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => {
                let m: Value = serde_json::from_str(&l)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {l}"));
                self.check_structured(&m);
                m
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!("no message from the server within {timeout:?}")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("server closed stdout"),
        }
    }

    pub fn recv(&mut self) -> Value {
        self.recv_within(Duration::from_secs(30))
    }

    /// The next raw stdout line, if one comes within `timeout`.
    pub fn try_recv_raw(&mut self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// Sends a request and returns the response with the same id, keeping
    /// nothing else that arrived before it (use `collect_until` to see those).
    pub fn request(&mut self, msg: Value) -> Value {
        let id = msg["id"].clone();
        self.send(&msg);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.recv_within(left.max(Duration::from_millis(1)));
            if m.get("id") == Some(&id) && (m.get("result").is_some() || m.get("error").is_some()) {
                return m;
            }
        }
    }

    /// Calls a tool and returns the JSON-RPC response.
    pub fn call_tool(&mut self, id: i64, name: &str, arguments: Value) -> Value {
        self.request(json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
            "params":{"name":name,"arguments":arguments}}))
    }

    /// Reads messages until one satisfies `done`; returns all of them.
    pub fn collect_until(
        &mut self,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut all = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.recv_within(left.max(Duration::from_millis(1)));
            let stop = done(&m);
            all.push(m);
            if stop {
                return all;
            }
        }
    }

    /// Closes stdin and waits for the exit status.
    pub fn close(mut self) -> (std::process::ExitStatus, Vec<String>) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("server did not exit after stdin closed");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // The child has exited, but the reader thread may not have passed on
        // its last lines yet: read until the pipe's end closes the channel.
        let mut rest = Vec::new();
        let until = Instant::now() + Duration::from_secs(10);
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => rest.push(l),
                Err(_) => break,
            }
        }
        (status, rest)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text content of a tools/call response.
pub fn tool_text(resp: &Value) -> String {
    resp["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {resp}"))
        .to_string()
}

/// `result.isError` of a tools/call response.
pub fn tool_is_error(resp: &Value) -> bool {
    resp["result"]["isError"]
        .as_bool()
        .unwrap_or_else(|| panic!("no isError in {resp}"))
}

/// A server listening on a socket (`http`/`tcp` with port 0), its announced
/// address, and its stderr log lines; killed on drop.
pub struct Listening {
    pub child: Child,
    /// What followed `cl-mcp-server: listening on ` (e.g. `http://127.0.0.1:PORT/mcp`).
    pub address: String,
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Listening {
    /// Starts `cl-mcp-server ARGS` and waits for its "listening on" line.
    pub fn start(args: &[&str]) -> Listening {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cl-mcp-server");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut address = None;
        let mut line = String::new();
        while address.is_none() {
            line.clear();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                let status = child.wait();
                panic!("cl-mcp-server {args:?} exited before listening: {status:?}");
            }
            address = line
                .trim()
                .strip_prefix("cl-mcp-server: listening on ")
                .map(str::to_string);
        }
        // Keep draining stderr (the JSON log) so the server never blocks on it.
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Listening {
            child,
            address: address.unwrap(),
            log,
        }
    }

    pub fn log_contains(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(needle))
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
