//! The raw-Swank baseline the image and hot-path benchmarks compare the
//! server with: an SBCL serving Swank (and loading our Lisp helpers), with
//! no server in between.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use swank_client::{SwankClient, Thread};

const LOADER: &str = "/usr/share/common-lisp/source/slime/swank-loader.lisp";

/// An SBCL with Swank on a port of its choosing, for the raw baselines (the
/// caller kills and waits for it).
#[allow(clippy::zombie_processes)]
pub fn start_raw_swank() -> (Child, u16) {
    // Our Lisp helpers too, so the helper's own cost can be measured apart.
    let lisp_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lisp");
    let order = std::fs::read_to_string(format!("{lisp_dir}/ORDER")).unwrap();
    let mut cmd = Command::new("sbcl");
    cmd.args([
        "--noinform",
        "--non-interactive",
        "--no-userinit",
        "--load",
        LOADER,
    ])
    .args(["--eval", "(swank-loader:init)"]);
    for file in order
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        cmd.args(["--load", &format!("{lisp_dir}/{file}")]);
    }
    let mut child = cmd
        .args([
            "--eval",
            "(format t \"~&SWANK-PORT ~D~%\" (swank:create-server :port 0 :dont-close t))",
        ])
        .args(["--eval", "(finish-output)", "--eval", "(loop (sleep 60))"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sbcl on PATH");
    let out = child.stdout.take().unwrap();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        if let Some(p) = line.strip_prefix("SWANK-PORT ") {
            return (child, p.trim().parse().unwrap());
        }
    }
    panic!("Swank did not announce its port");
}

/// The raw-Swank round trips both benchmarks report, `n` of each after
/// `warmup` unmeasured calls.
pub struct Baselines {
    /// `(+ 1 2)` through `swank:eval-and-grab-output`, a fresh thread a call.
    pub fresh: Vec<Duration>,
    /// The same on one persistent worker thread.
    pub worker: Vec<Duration>,
    /// Our helper, `cl-mcp:eval-request`, on that worker.
    pub helper: Vec<Duration>,
}

pub async fn swank_baselines(client: &SwankClient, n: usize, warmup: usize) -> Baselines {
    async fn times(client: &SwankClient, form: &str, thread: Thread, n: usize) -> Vec<Duration> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            client.rex(form, "CL-USER", thread).await.unwrap();
            v.push(t.elapsed());
        }
        v
    }
    let form = "(swank:eval-and-grab-output \"(+ 1 2)\")";
    times(client, form, Thread::T, warmup).await;
    let fresh = times(client, form, Thread::T, n).await;
    let id = client.spawn_worker_thread("bench").await.unwrap();
    let worker = times(client, form, Thread::Id(id), n).await;
    let helper = times(
        client,
        "(cl-mcp:eval-request \"(+ 1 2)\")",
        Thread::Id(id),
        n,
    )
    .await;
    Baselines {
        fresh,
        worker,
        helper,
    }
}
