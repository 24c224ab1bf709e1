//! Drives a real SBCL running Swank (started by each test) through the client.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lisp_syntax::data::Value;
use swank_client::{lisp_string, RexOutcome, SwankClient, SwankError, SwankEvent, Thread};
use tokio::time::timeout;

const LOADER: &str = "/usr/share/common-lisp/source/slime/swank-loader.lisp";

/// An SBCL child running Swank on a port chosen by the OS; killed on drop.
struct Lisp {
    child: Child,
    port: u16,
}

impl Lisp {
    fn start(secret: Option<&str>) -> Lisp {
        // The first start compiles Swank's fasls; parallel tests doing that at
        // once would race on the fasl files, so starts are serialised.
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        let mut cmd = Command::new("sbcl");
        cmd.args(["--noinform", "--non-interactive", "--load", LOADER]);
        cmd.args(["--eval", "(swank-loader:init)"]);
        if let Some(s) = secret {
            let def = format!("(defun swank::slime-secret () {})", lisp_string(s));
            cmd.args(["--eval", &def]);
        }
        cmd.args([
            "--eval",
            "(format t \"~&SWANK-PORT ~D~%\" (swank:create-server :port 0 :dont-close t))",
            "--eval",
            "(finish-output)",
            "--eval",
            "(loop (sleep 60))",
        ]);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sbcl on PATH");
        let out = child.stdout.take().unwrap();
        let mut port = None;
        for line in BufReader::new(out).lines() {
            let line = line.unwrap();
            if let Some(p) = line.strip_prefix("SWANK-PORT ") {
                port = Some(p.trim().parse().unwrap());
                break;
            }
        }
        Lisp {
            child,
            port: port.expect("Swank announced its port"),
        }
    }

    async fn connect(
        &self,
    ) -> (
        SwankClient,
        tokio::sync::mpsc::UnboundedReceiver<SwankEvent>,
    ) {
        SwankClient::connect(("127.0.0.1", self.port), None)
            .await
            .unwrap()
    }
}

impl Drop for Lisp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn eval_ok(c: &SwankClient, form: &str, thread: Thread) -> Value {
    match timeout(
        Duration::from_secs(20),
        c.rex(form, "COMMON-LISP-USER", thread),
    )
    .await
    .expect("no timeout")
    .unwrap()
    {
        RexOutcome::Ok(v) => v,
        RexOutcome::Abort(r) => panic!("aborted: {r:?}"),
    }
}

#[tokio::test]
async fn round_trip_and_unicode() {
    let lisp = Lisp::start(None);
    let (c, _ev) = lisp.connect().await;
    assert_eq!(
        eval_ok(&c, "(cl:+ 1 2)", Thread::T).await,
        Value::Integer(3)
    );
    // Seven characters, eleven... bytes: the frame length must count bytes.
    let form = format!("(cl:length {})", lisp_string("héllo→😀"));
    assert_eq!(eval_ok(&c, &form, Thread::T).await, Value::Integer(7));
    let back = eval_ok(&c, "(cl:string-upcase \"héllo→😀\")", Thread::T).await;
    assert_eq!(back.as_str(), Some("HÉLLO→😀"));
    // An error aborts the request instead of hanging it.
    let r = c.rex("(cl:error \"boom\")", "COMMON-LISP-USER", Thread::T);
    // The error enters Swank's debugger; answer it by aborting that level.
    let (c2, mut ev2) = (c.clone(), _ev);
    let aborter = tokio::spawn(async move {
        while let Some(e) = ev2.recv().await {
            if let SwankEvent::Debug { thread, .. } = e {
                let _ = c2
                    .rex(
                        "(swank:throw-to-toplevel)",
                        "COMMON-LISP-USER",
                        Thread::Id(thread),
                    )
                    .await;
                return true;
            }
        }
        false
    });
    match timeout(Duration::from_secs(20), r).await.unwrap().unwrap() {
        RexOutcome::Abort(_) => {}
        other => panic!("expected abort, got {other:?}"),
    }
    assert!(aborter.await.unwrap());
}

#[tokio::test]
async fn concurrent_requests_and_ping_pong() {
    let lisp = Lisp::start(None);
    let (c, _ev) = lisp.connect().await;
    let mut tasks = Vec::new();
    for i in 0..50i64 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let v = eval_ok(
                &c,
                &format!("(cl:progn (cl:sleep 0.01) (cl:* {i} 2))"),
                Thread::T,
            )
            .await;
            assert_eq!(v, Value::Integer(i * 2));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // One persistent thread answering 250 requests sends 250 `:return`s from
    // the same thread: Swank pings after 100 and waits for our pong.
    let worker = c.spawn_worker_thread("test-worker").await.unwrap();
    for i in 0..250i64 {
        let v = eval_ok(&c, &format!("(cl:1+ {i})"), Thread::Id(worker)).await;
        assert_eq!(v, Value::Integer(i + 1));
    }
    // The worker keeps state in its own thread: same thread id every time.
    let id = eval_ok(
        &c,
        "(swank/backend:thread-id (swank/backend:current-thread))",
        Thread::Id(worker),
    )
    .await;
    assert_eq!(id, Value::Integer(worker));
    assert_eq!(c.pending_requests(), 0);
}

#[tokio::test]
async fn interrupt_a_loop_on_a_known_thread() {
    let lisp = Lisp::start(None);
    let (c, mut ev) = lisp.connect().await;
    let worker = c.spawn_worker_thread("looper").await.unwrap();
    let c2 = c.clone();
    let looping = tokio::spawn(async move {
        c2.rex("(cl:loop)", "COMMON-LISP-USER", Thread::Id(worker))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!looping.is_finished());
    c.interrupt(Thread::Id(worker)).await.unwrap();
    let debugged = timeout(Duration::from_secs(10), async {
        while let Some(e) = ev.recv().await {
            if let SwankEvent::Debug { thread, .. } = e {
                return thread;
            }
        }
        panic!("event stream ended")
    })
    .await
    .expect("interrupt reached the debugger");
    assert_eq!(debugged, worker);
    let _ = timeout(
        Duration::from_secs(10),
        c.rex(
            "(swank:throw-to-toplevel)",
            "COMMON-LISP-USER",
            Thread::Id(worker),
        ),
    )
    .await
    .unwrap();
    let out = timeout(Duration::from_secs(10), looping)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(out, RexOutcome::Abort(_)), "{out:?}");
    // The worker thread survived the interrupt and still serves requests.
    assert_eq!(
        eval_ok(&c, "(cl:+ 40 2)", Thread::Id(worker)).await,
        Value::Integer(42)
    );
}

#[tokio::test]
async fn dropped_connection_fails_pending_calls() {
    let mut lisp = Lisp::start(None);
    let (c, mut ev) = lisp.connect().await;
    assert_eq!(
        eval_ok(&c, "(cl:+ 1 1)", Thread::T).await,
        Value::Integer(2)
    );
    let c2 = c.clone();
    let slow =
        tokio::spawn(async move { c2.rex("(cl:sleep 30)", "COMMON-LISP-USER", Thread::T).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    lisp.child.kill().unwrap();
    let r = timeout(Duration::from_secs(10), slow)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(r, Err(SwankError::Disconnected(_))), "{r:?}");
    assert!(c.is_closed());
    let again = c.rex("(cl:+ 1 1)", "COMMON-LISP-USER", Thread::T).await;
    let msg = again.unwrap_err().to_string();
    assert!(msg.contains("closed"), "{msg}");
    let mut saw_disconnect = false;
    while let Ok(Some(e)) = timeout(Duration::from_secs(5), ev.recv()).await {
        if matches!(e, SwankEvent::Disconnected(_)) {
            saw_disconnect = true;
        }
    }
    assert!(saw_disconnect);
}

#[tokio::test]
async fn secret_handshake() {
    let lisp = Lisp::start(Some("s3cret \"quoted\""));
    let (c, _ev) = SwankClient::connect(("127.0.0.1", lisp.port), Some("s3cret \"quoted\"".into()))
        .await
        .unwrap();
    assert_eq!(
        eval_ok(&c, "(cl:+ 2 2)", Thread::T).await,
        Value::Integer(4)
    );
    // Without the secret Swank refuses to serve the connection (2.27 leaves
    // the socket open without answering): no request ever succeeds on it.
    let (bad, _ev2) = SwankClient::connect(("127.0.0.1", lisp.port), None)
        .await
        .unwrap();
    let r = timeout(
        Duration::from_secs(3),
        bad.rex("(cl:+ 2 2)", "COMMON-LISP-USER", Thread::T),
    )
    .await;
    assert!(!matches!(r, Ok(Ok(_))), "{r:?}");
}

#[tokio::test]
async fn every_character_comes_back_readable() {
    let lisp = Lisp::start(None);
    let (c, _ev) = lisp.connect().await;
    // All of Latin-1 and some more, as SBCL prints characters (named control
    // characters, Unicode names): each reply must read, none may hang.
    let form = "(cl:loop for i from 0 below 1200 collect (cl:code-char i))";
    let v = eval_ok(&c, form, Thread::T).await;
    let chars = v.as_list().unwrap();
    assert_eq!(chars.len(), 1200);
    for (i, ch) in chars.iter().enumerate() {
        match ch {
            Value::Char(c) => assert_eq!(*c as usize, i),
            Value::Unreadable(t) => assert!(t.starts_with("#\\"), "{t}"),
            other => panic!("{i}: {other:?}"),
        }
    }
    assert_eq!(chars[3], Value::Char('\u{3}'));
    // SBCL prints non-ASCII characters by Unicode name; without a name
    // table those stay as text (strings carry Unicode intact, see above).
    assert_eq!(
        chars[233],
        Value::Unreadable("#\\LATIN_SMALL_LETTER_E_WITH_ACUTE".into())
    );
}

#[tokio::test]
async fn requests_to_an_exited_worker_fail() {
    let lisp = Lisp::start(None);
    let (c, mut ev) = lisp.connect().await;
    let worker = c.spawn_worker_thread("short-lived").await.unwrap();
    let c2 = c.clone();
    // The worker ends itself while serving this request.
    let dying = tokio::spawn(async move {
        c2.rex(
            "(sb-thread:abort-thread)",
            "COMMON-LISP-USER",
            Thread::Id(worker),
        )
        .await
    });
    let r = timeout(Duration::from_secs(10), dying)
        .await
        .expect("no hang")
        .unwrap();
    // Unwinding answers the running request (abort); requests still queued
    // behind it would get `ThreadGone`.
    assert!(
        matches!(r, Ok(RexOutcome::Abort(_)) | Err(SwankError::ThreadGone(_))),
        "{r:?}"
    );
    let exited = timeout(Duration::from_secs(5), async {
        while let Some(e) = ev.recv().await {
            if let SwankEvent::WorkerExited { thread } = e {
                return thread;
            }
        }
        panic!("no exit event")
    })
    .await
    .unwrap();
    assert_eq!(exited, worker);
    // Later requests to it fail at once instead of waiting forever.
    let r = c
        .rex("(cl:+ 1 1)", "COMMON-LISP-USER", Thread::Id(worker))
        .await;
    assert!(matches!(r, Err(SwankError::ThreadGone(_))), "{r:?}");
}
