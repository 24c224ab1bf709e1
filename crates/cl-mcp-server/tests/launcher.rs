//! `--image-launcher`: images started by an executable the server runs,
//! reached over their Swank endpoint. Through the built binary, a real SBCL
//! and the shipped launchers (`scripts/launchers/`): the local one
//! (evaluate, restart, the image's death and the launcher's), the netns one
//! (the image in a network namespace of its own), a wrong secret, and
//! launchers that fail or print garbage.

mod common;
mod eval_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use eval_support::{call, eval, lisp_server, Reply};
use serde_json::json;

fn launcher(name: &str) -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/launchers");
    repo.join(name)
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn alive(pid: i64) -> bool {
    // A zombie is gone for our purpose: it runs nothing.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

fn parent_of(pid: i64) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    after.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn cmdline(pid: i64) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn info(s: &mut common::Server, id: i64) -> Reply {
    let r = call(s, id, "image-info", json!({}));
    assert!(!r.is_error, "{}", r.text);
    common::assert_conforms("image-info", &r.structured);
    r
}

#[test]
fn local_launcher_starts_restarts_and_notices_deaths() {
    let local = launcher("local");
    let mut s = lisp_server(&["--image-launcher", &local]);
    assert_eq!(eval(&mut s, 1, "(+ 1 2)").text, "=> 3");
    let r = info(&mut s, 2);
    assert_eq!(r.structured["mode"], "launched", "{}", r.text);
    assert_eq!(r.structured["launcher"], local.as_str());
    assert!(r.structured.get("sandbox").is_none(), "{}", r.structured);
    assert!(
        r.text.contains("Launched by: ") && r.text.contains("sandbox: the image launcher's"),
        "{}",
        r.text
    );
    // The image is the launcher's child, not the server's.
    let pid = r.structured["pid"].as_i64().unwrap();
    let launcher_pid = parent_of(pid);
    assert!(
        cmdline(launcher_pid).contains("launchers/local"),
        "{}",
        cmdline(launcher_pid)
    );

    // A restart stops the image through its launcher and launches anew.
    eval(&mut s, 3, "(defvar *kept* 1)");
    let r = call(&mut s, 4, "image-restart", json!({}));
    assert!(!r.is_error, "{}", r.text);
    wait_until(
        "the old image and its launcher gone",
        Duration::from_secs(15),
        || !alive(pid) && !alive(launcher_pid),
    );
    assert_eq!(eval(&mut s, 5, "(boundp '*kept*)").text, "=> NIL");

    // The image dies: the next call says so once and runs in a fresh one.
    let pid = info(&mut s, 6).structured["pid"].as_i64().unwrap();
    let launcher_pid = parent_of(pid);
    // SAFETY: kill(2) on the image's pid, read from image-info just now.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_until(
        "the launcher exits with its image",
        Duration::from_secs(10),
        || !alive(launcher_pid),
    );
    let r = eval(&mut s, 7, "(+ 2 2)");
    assert!(
        r.text.starts_with("[NOTICE] ") && r.text.ends_with("=> 4"),
        "{}",
        r.text
    );

    // The launcher dies (its image would run on): noticed by its exit, the
    // image goes with it (its lifeline closes), a fresh one answers.
    eval(&mut s, 8, "(defvar *kept* 2)");
    let pid = info(&mut s, 9).structured["pid"].as_i64().unwrap();
    let launcher_pid = parent_of(pid);
    // SAFETY: kill(2) on the launcher, the image's parent just now.
    unsafe { libc::kill(launcher_pid as i32, libc::SIGKILL) };
    wait_until("the orphaned image exits", Duration::from_secs(10), || {
        !alive(pid)
    });
    let r = eval(&mut s, 10, "(boundp '*kept*)");
    assert!(r.text.ends_with("=> NIL"), "{}", r.text);
    assert_ne!(info(&mut s, 11).structured["pid"].as_i64().unwrap(), pid);
}

#[test]
fn the_launcher_is_the_servers_never_a_tools() {
    let local = launcher("local");
    let mut s = lisp_server(&["--image-launcher", &local]);
    // No tool takes a launcher (or any command to run an image with).
    let tools = s.request(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    for tool in tools["result"]["tools"].as_array().unwrap() {
        let props = tool["inputSchema"]["properties"].as_object();
        for name in props.into_iter().flat_map(|p| p.keys()) {
            assert!(
                !["launcher", "command", "cmd"]
                    .iter()
                    .any(|w| name.to_lowercase().contains(w)),
                "{}: {name}",
                tool["name"]
            );
        }
    }
    let r = call(
        &mut s,
        2,
        "image-start",
        json!({"lisp": "sbcl", "name": "second", "launcher": "/bin/sh"}),
    );
    assert!(r.is_error && r.text.contains("launcher"), "{}", r.text);
    // A further image starts through the server's launcher too.
    let r = call(
        &mut s,
        3,
        "image-start",
        json!({"lisp": "sbcl", "name": "second"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(&mut s, 4, "image-info", json!({"image": "second"}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["mode"], "launched", "{}", r.text);
    assert_eq!(r.structured["launcher"], local.as_str());
    let pid = r.structured["pid"].as_i64().unwrap();
    assert!(
        cmdline(parent_of(pid)).contains("launchers/local"),
        "{}",
        cmdline(parent_of(pid))
    );
}

/// A launcher script in a temporary directory.
/// A directory for launcher scripts outside the temp dir, where the image
/// may write (a launcher there is never run).
fn launcher_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn failing_garbage_and_wrong_secret_launchers_are_clear_errors() {
    let dir = launcher_dir();
    let failing = script(
        dir.path(),
        "failing",
        "echo 'cannot reach the cluster' >&2\nexit 3",
    );
    let mut s = lisp_server(&["--image-launcher", &failing]);
    let r = eval(&mut s, 1, "(+ 1 2)");
    assert!(r.is_error, "{}", r.text);
    for said in [
        "did not give a usable image",
        "printed nothing",
        "exit status 3",
        "cannot reach the cluster",
    ] {
        assert!(r.text.contains(said), "{said}: {}", r.text);
    }
    drop(s);

    let garbage = script(
        dir.path(),
        "garbage",
        "echo 'Pod ready at 10.0.0.7'\nexec sleep 60",
    );
    let mut s = lisp_server(&["--image-launcher", &garbage]);
    let r = eval(&mut s, 1, "(+ 1 2)");
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("is not the endpoint line") && r.text.contains("Pod ready at 10.0.0.7"),
        "{}",
        r.text
    );
    drop(s);

    // The image expects another secret than the one the server holds:
    // Swank refuses the connection, and the server says so.
    let wrong = script(
        dir.path(),
        "wrong-secret",
        &format!(
            "CL_MCP_SWANK_SECRET=not-the-servers exec {} \"$@\"",
            launcher("local")
        ),
    );
    let mut s = lisp_server(&["--image-launcher", &wrong]);
    let r = eval(&mut s, 1, "(+ 1 2)");
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("the secret was refused"), "{}", r.text);
}

#[test]
fn a_silent_launcher_fails_the_first_call_after_one_start_timeout() {
    let dir = launcher_dir();
    let silent = script(
        dir.path(),
        "silent",
        "echo 'waiting for the cluster' >&2\nexec sleep 600",
    );
    // The handshake starts the image in the background and the first call
    // waits for that start: it answers when that start gives up, without a
    // second start of its own (two timeouts).
    let began = Instant::now();
    let mut s = lisp_server(&["--image-launcher", &silent, "--image-start-secs", "3"]);
    let r = eval(&mut s, 1, "(+ 1 2)");
    let took = began.elapsed();
    assert!(r.is_error, "{}", r.text);
    for said in [
        "did not give a usable image",
        "printed no endpoint within 3 s",
        "waiting for the cluster",
    ] {
        assert!(r.text.contains(said), "{said}: {}", r.text);
    }
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_millis(5500),
        "one start timeout (3 s), not two: {took:?}"
    );
}

/// Waits for a pid the launcher wrote into `file`.
fn pid_in(file: &Path) -> i64 {
    let mut pid = None;
    wait_until(
        &format!("{} written", file.display()),
        Duration::from_secs(20),
        || {
            pid = std::fs::read_to_string(file)
                .ok()
                .and_then(|t| t.trim().parse().ok());
            pid.is_some()
        },
    );
    pid.unwrap()
}

#[test]
fn a_launcher_still_starting_ends_with_the_server() {
    let dir = launcher_dir();
    let d = dir.path().display();
    // A launcher that never prints, and a process it started.
    let slow = script(
        dir.path(),
        "slow",
        &format!(
            "echo $$ > {d}/launcher.tmp && mv {d}/launcher.tmp {d}/launcher.pid\n\
             sleep 600 &\n\
             echo $! > {d}/child.tmp && mv {d}/child.tmp {d}/child.pid\n\
             wait"
        ),
    );
    let pids = |what: &str| {
        let pid = pid_in(&dir.path().join(format!("{what}.pid")));
        std::fs::remove_file(dir.path().join(format!("{what}.pid"))).unwrap();
        pid
    };

    // The server ends in order (its stdin closed): the launcher and its
    // process group end with it.
    let s = lisp_server(&["--image-launcher", &slow]);
    let (launcher_pid, child_pid) = (pids("launcher"), pids("child"));
    assert!(alive(launcher_pid) && alive(child_pid));
    let began = Instant::now();
    let (status, _) = s.close();
    assert!(status.success(), "{status}");
    wait_until(
        "the launcher and what it started gone",
        Duration::from_secs(5),
        || !alive(launcher_pid) && !alive(child_pid),
    );
    let orderly = began.elapsed();

    // The server is killed (SIGKILL): the launcher hears of it from the
    // kernel (its parent-death signal, SIGTERM) and ends.
    let mut s = lisp_server(&["--image-launcher", &slow]);
    let (launcher_pid, child_pid) = (pids("launcher"), pids("child"));
    let began = Instant::now();
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    wait_until("the launcher gone", Duration::from_secs(5), || {
        !alive(launcher_pid)
    });
    let killed = began.elapsed();
    // What it started is its own to stop (the shipped launchers do, on
    // SIGTERM); this one leaves its sleep behind.
    // SAFETY: kill(2) on the test launcher's sleep, whose pid it wrote.
    unsafe { libc::kill(child_pid as i32, libc::SIGKILL) };
    eprintln!(
        "launcher gone after the server's exit in {orderly:?}, after its SIGKILL in {killed:?}"
    );
}

/// Whether network namespaces can be made here (root, `ip`); a test that
/// needs them records why not and returns.
fn netns_possible(test: &str) -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip_unavailable(test, "root (ip netns needs it)");
        return false;
    }
    if !Path::new("/usr/sbin/ip").exists() && !Path::new("/sbin/ip").exists() {
        common::skip_missing(test, "ip (Debian's iproute2)");
        return false;
    }
    true
}

#[test]
fn netns_launcher_runs_the_image_in_its_own_network_namespace() {
    let test = "netns_launcher_runs_the_image_in_its_own_network_namespace";
    if !netns_possible(test) {
        return;
    }
    if !Path::new("/usr/sbin/nft").exists() && !Path::new("/sbin/nft").exists() {
        common::skip_missing(test, "nft (Debian's nftables)");
        return;
    }
    // Host services the image must not reach: one on every address, one on
    // the host's side of the veth (bound once its address is known).
    let anywhere = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let mut s = lisp_server(&["--image-launcher", &launcher("netns")]);
    assert_eq!(eval(&mut s, 1, "(+ 1 2)").text, "=> 3");
    let r = info(&mut s, 2);
    let address = r.structured["swankAddress"].as_str().unwrap().to_string();
    assert!(
        address.starts_with("10.213."),
        "reached over the veth: {address}"
    );
    let pid = r.structured["pid"].as_i64().unwrap();
    let ns = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    let image_ns = ns(&pid.to_string());
    assert_ne!(
        image_ns,
        ns("self"),
        "the image runs in another network namespace"
    );
    // Its loopback is its own: a port the image opens there is not ours
    // (asked through SBCL's sockets).
    if common::on_sbcl() {
        let r = eval(
            &mut s,
            3,
            "(let ((s (make-instance 'sb-bsd-sockets:inet-socket :type :stream :protocol :tcp))) \
               (sb-bsd-sockets:socket-bind s #(127 0 0 1) 0) (sb-bsd-sockets:socket-listen s 1) \
               (nth-value 1 (sb-bsd-sockets:socket-name s)))",
        );
        let port: u16 = r.text.trim_start_matches("=> ").parse().unwrap();
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "{port}"
        );
        // Connections the image starts are refused by its namespace's
        // firewall: to the host's side of the veth, where a host listener
        // on 0.0.0.0 and one on that address itself would answer.
        let host: std::net::Ipv4Addr = {
            let image: std::net::Ipv4Addr = address.rsplit_once(':').unwrap().0.parse().unwrap();
            (u32::from(image) - 1).into()
        };
        let on_veth = std::net::TcpListener::bind((host, 0)).unwrap();
        let ports = [
            anywhere.local_addr().unwrap().port(),
            on_veth.local_addr().unwrap().port(),
        ];
        let [a, b, c, d] = host.octets();
        let r = eval(
            &mut s,
            31,
            &format!(
                "(flet ((try (port) \
                   (let ((s (make-instance 'sb-bsd-sockets:inet-socket :type :stream \
                                           :protocol :tcp))) \
                     (unwind-protect \
                          (handler-case (progn (sb-bsd-sockets:socket-connect \
                                                s (vector {a} {b} {c} {d}) port) \
                                               :connected) \
                            (error (e) (type-of e))) \
                       (sb-bsd-sockets:socket-close s))))) \
                   (list (try {}) (try {})))",
                ports[0], ports[1]
            ),
        );
        assert!(
            !r.is_error && r.text.starts_with("=> (") && !r.text.contains("CONNECTED"),
            "the image reached the host: {}",
            r.text
        );
        // The server still evaluates in it; it runs without capabilities
        // (as root too), so it cannot undo its firewall.
        assert_eq!(eval(&mut s, 32, "(+ 20 22)").text, "=> 42");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(
            status.contains("CapEff:\t0000000000000000"),
            "the image keeps capabilities: {status}"
        );
    }
    let slot = {
        let octets: Vec<u32> = address
            .split([':', '.'])
            .take(4)
            .map(|o| o.parse().unwrap())
            .collect();
        (octets[2] * 256 + octets[3] - 2) / 4
    };
    let netns_file = PathBuf::from(format!("/run/netns/clmcp-{slot}"));
    assert!(netns_file.exists(), "{}", netns_file.display());
    // A restart gives a fresh namespace; the server's end removes it.
    let r = call(&mut s, 4, "image-restart", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let pid2 = info(&mut s, 5).structured["pid"].as_i64().unwrap();
    assert!(!alive(pid));
    // Not compared with the old namespace: its inode number, freed once
    // the launcher removed it, may be the new one's.
    assert_ne!(ns(&pid2.to_string()), ns("self"));
    assert_eq!(eval(&mut s, 6, "(* 6 7)").text, "=> 42");
    drop(s);
    wait_until("the namespace removed", Duration::from_secs(15), || {
        !netns_file.exists()
    });
}

#[test]
fn netns_launcher_starts_no_image_without_its_firewall() {
    let test = "netns_launcher_starts_no_image_without_its_firewall";
    if !netns_possible(test) {
        return;
    }
    // An `nft` that cannot load rules (a kernel without nf_tables).
    let dir = launcher_dir();
    script(
        dir.path(),
        "nft",
        "echo 'Error: Could not process rule: No such file or directory' >&2\nexit 1",
    );
    let wrapper = script(
        dir.path(),
        "no-firewall",
        &format!(
            "PATH={}:$PATH exec {} \"$@\"",
            dir.path().display(),
            launcher("netns")
        ),
    );
    let mut s = lisp_server(&["--image-launcher", &wrapper]);
    let r = eval(&mut s, 1, "(+ 1 2)");
    assert!(r.is_error, "{}", r.text);
    for said in [
        "could not install the firewall",
        "not starting an image that would reach the host",
        "Could not process rule",
    ] {
        assert!(r.text.contains(said), "{said}: {}", r.text);
    }
}

#[test]
fn python_sdk_reads_a_launched_images_info() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = std::process::Command::new(&python)
        .args(["-c", "import mcp"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "the MCP Python SDK is not installed: run `{python} -m pip install mcp` (.ci/run does)"
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/sdk/python_sdk_launcher.py"
    );
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cl-mcp-server-test-cache");
    let out = std::process::Command::new(&python)
        .args([
            script,
            env!("CARGO_BIN_EXE_cl-mcp-server"),
            &launcher("local"),
        ])
        .arg(&cache)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "SDK client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("launched: launched by "), "{stdout}");
}

/// A launcher an agent could have rewritten (under the project root, or
/// where the image may write) is never run: it would run with the
/// server's rights, outside every sandbox.
#[test]
fn a_launcher_the_agent_could_write_is_never_run() {
    let root = tempfile::tempdir().unwrap();
    let marker = root.path().join("ran");
    let planted = script(
        root.path(),
        "launch.sh",
        &format!("touch {}", marker.display()),
    );
    let root_s = root.path().to_str().unwrap();
    let mut s = lisp_server(&["--image-launcher", &planted, "--project-root", root_s]);
    let r = eval(&mut s, 1, "(+ 1 2)");
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("refusing to run the image launcher") && r.text.contains("project root"),
        "{}",
        r.text
    );
    assert!(!marker.exists(), "the planted launcher ran");
}
