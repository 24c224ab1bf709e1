//! `cl-mcp-server doctor`: checks, one by one, what the server needs — the
//! Lisp, Swank, the core cache, a live image — and says how to fix what fails.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::image::core_cache::{self, default_cache_dir, CoreCache};
use crate::image::jail::{ProcessJail, Purpose};
use crate::image::locate;
use crate::protocol::Engine;
use crate::tools::ToolContext;

/// One line of the report.
fn report(ok: bool, what: &str, detail: &str, fix: Option<&str>) {
    let mark = if ok { "ok  " } else { "FAIL" };
    println!("[{mark}] {what:<11} {detail}");
    if let (false, Some(fix)) = (ok, fix) {
        println!("       fix: {fix}");
    }
}

/// The sandbox line: the mode, its rules, and what this kernel offers.
fn report_sandbox(engine: &Engine, info: &crate::image::ImageInfo) {
    use crate::image::sandbox::{kernel_abi, SandboxMode};
    let abi = kernel_abi();
    if engine.config.image.attach.is_some() {
        report(
            true,
            "sandbox",
            "none: an attached image is the user's own and is never confined by this server",
            None,
        );
        return;
    }
    let mode = engine.config.image.sandbox.mode;
    match &info.sandbox {
        Some(r) if r.mode != SandboxMode::Off => {
            let detail = r
                .describe()
                .trim_start_matches("sandbox: ")
                .replace('\n', "\n                 ");
            report(true, "sandbox", &detail, None);
        }
        _ if mode == SandboxMode::Off => {
            let offer = if abi >= 4 {
                format!("this kernel offers Landlock ABI {abi}: --sandbox workspace (or strict) would confine the image's writes and network")
            } else if abi >= 1 {
                format!("this kernel offers Landlock ABI {abi} (files only; the network needs ABI 4, Linux 6.7): --sandbox workspace would confine the image's writes")
            } else {
                "this kernel has no Landlock (Linux 5.13+ with landlock in its lsm= list has it): --sandbox cannot confine the image here".to_string()
            };
            report(
                true,
                "sandbox",
                &format!("off: the image runs with your full rights; {offer}"),
                None,
            );
        }
        _ => report(
            false,
            "sandbox",
            &format!(
                "{} requested, but no image runs to report it (Landlock ABI {abi})",
                mode.as_str()
            ),
            Some("see the image line above; --sandbox strict refuses to start without Landlock"),
        ),
    }
}

/// The core cache line: `[ok]` only for a cache that exists and starts.
/// A cache that does not start is discarded and built again; a missing one
/// is built now (the first start's work, done here).
async fn check_core_cache(cache: CoreCache, dir: &std::path::Path) -> bool {
    let core = cache.core_path();
    let what = if cache.kind().saves_images() {
        "saved image"
    } else {
        "compiled fasls: this Lisp saves no images"
    };
    let t = Instant::now();
    let outcome = tokio::task::spawn_blocking(move || {
        let broken = match cache.cached_plan() {
            Err(why) => Some(why),
            Ok(None) => None,
            Ok(Some(plan)) => {
                match core_cache::check_plan(&plan, core_cache::CHECK_TIMEOUT, Purpose::Ask) {
                    Ok(took) => {
                        return Ok(format!(
                            "cached; starts and passes its check in {} ms",
                            took.as_millis()
                        ))
                    }
                    Err(why) => {
                        cache.discard();
                        Some(why)
                    }
                }
            }
        };
        let built = cache.build().map_err(|e| e.to_string())?;
        let repaired = broken.or(built.tampered).or(built.repaired);
        Ok(match repaired {
            Some(why) => format!(
                "was broken ({why}); discarded it and rebuilt it in {} ms",
                t.elapsed().as_millis()
            ),
            None => format!(
                "built now in {} ms; later starts take it",
                t.elapsed().as_millis()
            ),
        })
    })
    .await
    .unwrap_or_else(|e| Err(format!("the check failed: {e}")));
    match outcome {
        Ok(detail) => {
            report(
                true,
                "core cache",
                &format!("{} ({what}, {detail})", core.display()),
                None,
            );
            true
        }
        Err(e) => {
            // The server already discarded and rebuilt its own files once:
            // a failure naming a file of its cache is worth one more clean
            // start; any other file is the user's or the installation's.
            let fix = if e.contains(dir.to_string_lossy().as_ref()) {
                format!(
                    "the Lisp's words above name the file that failed; `rm -r {}` and run \
                     doctor again. If it fails again, the Lisp installation or its Swank is \
                     broken (reinstall them)",
                    dir.display()
                )
            } else {
                "the file the Lisp names above is not the server's cache, so rebuilding will \
                 not help: fix that file. If it is Swank's loader, pass --swank-loader PATH \
                 (SWANK_LOADER) to a working swank-loader.lisp, or drop the option to use \
                 Debian's (apt-get install cl-swank)"
                    .to_string()
            };
            report(
                false,
                "core cache",
                &format!("{} cannot be built: {e}", core.display()),
                Some(&fix),
            );
            false
        }
    }
}

/// Runs every check; exit status 0 when all pass.
pub async fn run(engine: Arc<Engine>) -> ExitCode {
    let config = &engine.config.image;
    let mut all_ok = true;

    if let Some(addr) = &config.attach {
        report(true, "mode", &format!("attach to Swank at {addr}"), None);
    } else if !check_local_setup(config).await {
        return ExitCode::FAILURE;
    }

    let session = engine.new_session();
    let started = Instant::now();
    let image = session.image();
    // The cache is built by now: a start takes seconds (a JVM's, ABCL's,
    // the longest), and a start that fails says why at once.
    all_ok &= check_image_start(&image, started).await;
    report_sandbox(&engine, &image.info());
    report_limits(&image.info());
    if all_ok {
        all_ok &= check_eval(&engine, &session).await;
    }
    if session.image().mode().owned() {
        session.image().shutdown().await;
    }
    if all_ok {
        println!("All checks passed.");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A local image's setup: the Lisp, Swank, the core cache. False when the
/// doctor cannot go on.
async fn check_local_setup(config: &crate::image::ImageConfig) -> bool {
    // The user's own command: what it runs runs with the user's rights.
    let jail = ProcessJail::none();
    let (lisp, kind) = match locate::find_lisp_kind(config, &jail) {
        Ok(l) => l,
        Err(e) => {
            report(
                false,
                "lisp",
                &e.to_string(),
                Some(
                    "apt-get install sbcl (or ecl, clisp), or pass --lisp PATH|NAME \
                     (CL_MCP_LISP)",
                ),
            );
            return false;
        }
    };
    let version = crate::image::implementation::version_text(&lisp, Duration::from_secs(30), &jail)
        .unwrap_or_default();
    let version = version.lines().next().unwrap_or_default();
    report(
        true,
        "lisp",
        &format!("{} ({kind}: {version})", lisp.display()),
        None,
    );
    let swank = match locate::find_swank(config, || locate::asdf_finds_swank(&lisp, kind, &jail)) {
        Ok(s) => s,
        Err(e) => {
            report(
                false,
                "swank",
                &e.to_string(),
                Some("apt-get install cl-swank, or pass --swank-loader PATH (SWANK_LOADER)"),
            );
            return false;
        }
    };
    let source = match &swank {
        locate::SwankSource::Loader(p) => format!("{} (swank-loader)", p.display()),
        locate::SwankSource::Asdf => "the ASDF system swank".to_string(),
        locate::SwankSource::Quicklisp(p) => format!("Quicklisp ({})", p.display()),
    };
    report(true, "swank", &source, None);
    if config.use_core_cache {
        let dir = config.cache_dir.clone().unwrap_or_else(default_cache_dir);
        let quicklisp = config.load_quicklisp.then(locate::find_quicklisp).flatten();
        let cache = CoreCache::new(dir.clone(), lisp, kind, swank, quicklisp);
        if !check_core_cache(cache, &dir).await {
            return false;
        }
    } else {
        report(
            true,
            "core cache",
            "off (--no-core-cache): loading from source",
            None,
        );
    }
    true
}

/// The image starts within 60 s.
async fn check_image_start(image: &crate::image::Image, started: Instant) -> bool {
    match tokio::time::timeout(Duration::from_secs(60), image.ready()).await {
        Ok(Ok(())) => {
            let info = image.info();
            let pid = info.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
            report(
                true,
                "image",
                &format!(
                    "{} image ready in {} ms{pid}",
                    info.mode,
                    started.elapsed().as_millis()
                ),
                None,
            );
            true
        }
        Ok(Err(e)) => {
            report(
                false,
                "image",
                &e.to_string(),
                Some("the Lisp's own words are above; MCP_LOG_LEVEL=debug shows all it printed"),
            );
            false
        }
        Err(_) => {
            report(
                false,
                "image",
                "not ready after 60 s",
                Some("run with MCP_LOG_LEVEL=debug"),
            );
            false
        }
    }
}

/// Process and memory limits, when the image reports them.
fn report_limits(info: &crate::image::ImageInfo) {
    if let Some(limits) = &info.limits {
        let detail = limits
            .trim_start_matches("limits:")
            .trim_start()
            .replace("\n  ", "\n                   ");
        let enforced = !limits.contains("NOT enforced");
        report(
            enforced,
            "limits",
            &detail,
            Some("run as a user other than root (RLIMIT_NPROC), or give the server a writable cgroup with the pids controller"),
        );
    }
}

/// `(+ 1 2)` through `evaluate-lisp`, when the eval tools are enabled.
async fn check_eval(engine: &Engine, session: &Arc<crate::session::Session>) -> bool {
    match engine.tools.get("evaluate-lisp") {
        None => {
            report(
                true,
                "eval",
                "skipped (the eval tools are not enabled)",
                None,
            );
            true
        }
        Some(tool) => {
            let t = Instant::now();
            let ctx = ToolContext::new(session.clone(), CancellationToken::new());
            let out = tool.call(json!({"code": "(+ 1 2)"}), ctx).await;
            let ok = !out.is_error && out.text.trim_end().ends_with("=> 3");
            report(
                ok,
                "eval",
                &format!(
                    "(+ 1 2) {} in {:.1} ms",
                    out.text.trim(),
                    t.elapsed().as_secs_f64() * 1e3
                ),
                Some("the image answers but evaluation fails: run with MCP_LOG_LEVEL=debug"),
            );
            ok
        }
    }
}
