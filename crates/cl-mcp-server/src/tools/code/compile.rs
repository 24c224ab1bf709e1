//! `lisp-compile-file`: one file compiled (and loaded) in the image, or a
//! system definition loaded as ASDF loads it; a named pipe swapped in at
//! the file while the image opens it is released (`watch_for_pipes`).

use super::build::{build_result, build_timeout, note_build, BuildOutput};
use crate::tools::fs_paths::{self, Access, ResolvedPath};
use crate::tools::lisp_call::{self, helper_form, plist_bool, plist_items, plist_strings};
use crate::tools::output::DEFAULT_MAX_OUTPUT;
use crate::tools::{ToolContext, ToolError, ToolOutput};
use std::path::Path;

use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::Deserialize;

// ---------------------------------------------------------------------------
// lisp-compile-file

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct CompileArgs {
    path: String,
    load: Option<bool>,
    /// Default 600.
    timeout_seconds: Option<f64>,
}

pub(super) async fn lisp_compile_file(a: CompileArgs, ctx: ToolContext) -> ToolOutput {
    let root = ctx.session.project_root();
    let (resolved, file_id) = match file_to_compile(&ctx, &root, &a.path).await {
        Ok(f) => f,
        Err(e) => return ToolOutput::error(e),
    };
    let load = a.load.unwrap_or(true);
    let timeout = match build_timeout(a.timeout_seconds) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    // A system definition is loaded as ASDF loads it (`asdf:load-asd`), so
    // its systems become known by name; compiling it as plain code in
    // CL-USER fails on ASDF's own symbols.
    let asd = resolved
        .path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("asd"));
    let path = Value::string(resolved.path.display().to_string());
    let max_output = ("max-output", Value::Integer(DEFAULT_MAX_OUTPUT as i64));
    let file_id = ("file-id", file_id);
    let form = if asd {
        // The names its `defsystem`s spell out, so the answer lists each
        // system the file defines, also one ASDF registered before.
        let names = resolved
            .read_capped(1 << 20)
            .map(|b| crate::tools::project_systems::defined_systems(&String::from_utf8_lossy(&b)))
            .unwrap_or_default();
        let names = Value::list([
            Value::symbol("QUOTE"),
            Value::list(names.into_iter().map(Value::string)),
        ]);
        helper_form(
            "load-asd-with-diagnostics",
            vec![path],
            vec![max_output, file_id, ("names", names)],
        )
    } else {
        helper_form(
            "compile-file-with-diagnostics",
            vec![path],
            vec![("load", Value::bool(load)), max_output, file_id],
        )
    };
    let what = format!("lisp-compile-file {}", resolved.display);
    let done = tokio_util::sync::CancellationToken::new();
    let watch = tokio::spawn(watch_for_pipes(
        ctx.image(),
        resolved.path.clone(),
        root.clone(),
        done.clone(),
    ));
    let v = lisp_call::call_build(&ctx, &what, &form, timeout).await;
    done.cancel();
    if watch.await.unwrap_or(false) {
        return ToolOutput::error(format!(
            "{} was replaced by a named pipe (FIFO) while the image opened it to compile: the \
             server opened the pipe's other end, so the compiler read an empty input instead of \
             waiting for a writer forever. What was compiled{} was not your file. Compile again \
             once a regular file is there.",
            resolved.display,
            if load && !asd { " (and loaded)" } else { "" }
        ));
    }
    let v = match v {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let mut out = BuildOutput::from_plist(&v, &root);
    if asd {
        let systems = plist_strings(&v, "systems");
        let mut headline = asd_headline(&resolved.display, &out, &systems);
        for found in plist_items(&v, "found-elsewhere", |e| {
            e.as_list().map(|l| {
                (
                    l.first()
                        .and_then(|n| n.as_str())
                        .unwrap_or_default()
                        .to_string(),
                    l.get(1)
                        .and_then(|p| p.as_str())
                        .unwrap_or_default()
                        .to_string(),
                )
            })
        })
        .into_iter()
        .flatten()
        {
            headline.push_str(&format!(
                "\n{}: ASDF keeps the definition in {}, which its search finds first \
                 (asdf-load-system and asdf-test-system use that one).",
                found.0,
                fs_paths::display_path(&root, Path::new(&found.1))
            ));
        }
        out.systems = Some(systems);
        return build_result(headline, out, &v, "Loading the .asd", timeout);
    }
    let loaded = load && plist_bool(&v, "loaded");
    let headline = compile_headline(&resolved.display, &out, loaded);
    note_build(&ctx, &out, &headline);
    build_result(headline, out, &v, "The compilation", timeout)
}

/// The file `path` names, checked to be a regular file on a non-blocking
/// handle, and its `(list DEV INO)` for the image to check the file it
/// opens against (nil when they do not fit a fixnum).
pub(crate) async fn file_to_compile(
    ctx: &ToolContext,
    root: &Path,
    path: &str,
) -> Result<(ResolvedPath, Value), ToolError> {
    let extra = fs_paths::asdf_source_roots(&ctx.session);
    let resolved = fs_paths::resolve(root, path, Access::Read, &extra)?;
    if !resolved.exists {
        return Err(ToolError::File(format!(
            "No such file: {}",
            resolved.display
        )));
    }
    if resolved.path.is_dir() {
        return Err(ToolError::File(format!(
            "{} is a directory: lisp-compile-file compiles one file (to build a system, use \
             asdf-load-system).",
            resolved.display
        )));
    }
    // The image opens the file by name, and opening a named pipe would wait
    // for a writer until the build timeout: check what is there on a
    // non-blocking handle first, off the async workers. The image checks
    // the file it opens against this one (device and inode) before it
    // compiles, and a pipe swapped in after that is released (see
    // `watch_for_pipes`).
    let check = resolved.clone();
    let checked = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::MetadataExt;
        check.open_regular().map(|(_, m)| (m.dev(), m.ino()))
    })
    .await
    .unwrap_or_else(|e| {
        Err(ToolError::File(format!(
            "Cannot check '{}': {e}",
            resolved.display
        )))
    });
    let (dev, ino) = checked?;
    let file_id = match (i64::try_from(dev), i64::try_from(ino)) {
        // `(list DEV INO)`: the form's arguments are evaluated.
        (Ok(d), Ok(i)) => Value::list(vec![
            Value::symbol_named(Some("COMMON-LISP"), "LIST"),
            Value::Integer(d),
            Value::Integer(i),
        ]),
        _ => Value::nil(),
    };
    Ok((resolved, file_id))
}

/// The headline of an `.asd` loaded with `asdf:load-asd`.
fn asd_headline(display: &str, out: &BuildOutput, systems: &[String]) -> String {
    if out.success {
        format!(
            "Loaded {} with asdf:load-asd in {} ms: defines {}; {}",
            display,
            out.elapsed_ms,
            if systems.is_empty() {
                "no system".to_string()
            } else {
                format!(
                    "{} {}",
                    if systems.len() == 1 {
                        "system"
                    } else {
                        "systems"
                    },
                    systems.join(", ")
                )
            },
            out.summary()
        )
    } else {
        format!(
            "Loading {} with asdf:load-asd failed in {} ms: {}",
            display,
            out.elapsed_ms,
            out.summary()
        )
    }
}

/// The headline of a compile (and load).
fn compile_headline(display: &str, out: &BuildOutput, loaded: bool) -> String {
    if out.success {
        format!(
            "{} {} in {} ms: {}",
            if loaded {
                "Compiled and loaded"
            } else {
                "Compiled"
            },
            display,
            out.elapsed_ms,
            out.summary()
        )
    } else {
        format!(
            "Compilation failed for {} in {} ms (compile-file's failure-p{}): {}",
            display,
            out.elapsed_ms,
            if loaded {
                "; the fasl was loaded anyway"
            } else {
                ""
            },
            out.summary()
        )
    }
}

/// How often a compile looks whether a named pipe was swapped in at its
/// file while the image opens it.
const PIPE_WATCH: std::time::Duration = std::time::Duration::from_millis(100);

/// Until `done`: releases a reader stuck opening a named pipe swapped in
/// at `path` after the server and the image checked it (the compiler opens
/// the file by name once more; no portable Lisp can compile an opened
/// file; SBCL's helper refuses such an open itself, see
/// `call-with-guarded-opens`). A pipe swapped in for an instant and out
/// again under another name is found beside the file, when a thread of the
/// image is seen waiting to open a pipe. Returns true when it released
/// one.
async fn watch_for_pipes(
    image: crate::image::Image,
    path: std::path::PathBuf,
    root: std::path::PathBuf,
    done: tokio_util::sync::CancellationToken,
) -> bool {
    let mut released = false;
    loop {
        tokio::select! {
            _ = done.cancelled() => return released,
            _ = tokio::time::sleep(PIPE_WATCH) => {}
        }
        let (p, r, image) = (path.clone(), root.clone(), image.clone());
        released |= tokio::task::spawn_blocking(move || {
            fs_paths::release_pipe_readers(&p, &r)
                || (image.opening_a_pipe() && fs_paths::release_pipes_beside(&p, &r))
        })
        .await
        .unwrap_or(false);
    }
}
