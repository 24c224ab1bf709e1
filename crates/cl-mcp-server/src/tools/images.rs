//! A session's several images: `image-start`, `image-list`, `image-stop`.
//! Every tool of the Lisp-backed groups then takes `image` (the framework
//! picks it: `ToolDef::call`); `session::images` keeps them. Each image has
//! a handle (`session::handles`): in the stateless era the one way to
//! address an image started by `image-start`, which then lives until
//! `image-stop` or `--stateless-image-idle-secs` without a call.

use std::time::Instant;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::lisp_call::timeout_arg;
use super::{tool, Annotations, ToolContext, ToolDef, ToolGroup, ToolOutput};
use crate::image::Image;
use crate::session::NamedImage;

/// How long `image-start` waits for the image unless told: an ABCL's or
/// ECL's first start compiles Swank into the cache.
const START_WAIT_SECONDS: f64 = 300.0;

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StartArgs {
    /// `sbcl`, `ecl`, `clisp`, `abcl`, `ccl`, or a path.
    lisp: String,
    name: Option<String>,
    /// Wait for it to be up (default 300).
    timeout_seconds: Option<f64>,
}

/// One image of the session, as `image-list` and `image-start` show it.
#[derive(Serialize, JsonSchema, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImageEntry {
    /// Its name in the session (what `image` takes in a legacy session).
    name: String,
    /// What `image` takes in any era and on any node behind a proxy:
    /// `NODE/NAME~KEY`.
    handle: String,
    /// The `lisp` it was started with (the first image: `--lisp`).
    lisp: String,
    /// The implementation, once it runs (or where its name says it).
    #[serde(skip_serializing_if = "Option::is_none")]
    implementation: Option<String>,
    /// Whether it is the session's first image (the default of `image`).
    first: bool,
    /// `running`, `starting`, or `not started` (the first image starts on
    /// first use).
    state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    /// 1 for its first start, +1 per restart.
    generation: u64,
    /// `local` or `attached`.
    mode: String,
}

fn entry(
    name: String,
    handle: String,
    lisp: String,
    kind: Option<String>,
    first: bool,
    image: Option<&Image>,
) -> ImageEntry {
    let info = image.map(Image::info);
    let state = match (&info, image) {
        (Some(i), _) if i.started_at.is_some() => "running",
        (_, Some(_)) => "starting",
        _ => "not started",
    };
    ImageEntry {
        name,
        handle,
        lisp,
        implementation: info
            .as_ref()
            .and_then(|i| i.kind)
            .map(|k| k.name().to_string())
            .or(kind),
        first,
        state: state.into(),
        pid: info.as_ref().and_then(|i| i.pid),
        generation: info.as_ref().map_or(0, |i| i.generation),
        mode: info
            .map(|i| i.mode.to_string())
            .unwrap_or_else(|| "local".into()),
    }
}

fn other_entry(session: &crate::session::Session, o: &NamedImage) -> ImageEntry {
    entry(
        o.name.clone(),
        session.handle_of(&o.name, &o.key),
        o.lisp.clone(),
        o.kind.map(|k| k.name().to_string()),
        false,
        Some(&o.image),
    )
}

/// Every image of the session, the first first. A stateless call sees the
/// first image only: the others were started by other clients, whose
/// handles are theirs to know.
pub(crate) fn session_images(ctx: &ToolContext) -> Vec<ImageEntry> {
    let session = &ctx.session;
    let config = &session.config.image;
    let first_lisp = match (&config.attach, &config.lisp) {
        (Some(a), _) => format!("swank at {a}"),
        (None, Some(l)) => l.display().to_string(),
        (None, None) => "sbcl".into(),
    };
    let first_kind = session.first_image_kind().map(|k| k.name().to_string());
    let first_handle = session
        .first_image_handle()
        .unwrap_or_else(|e| e.to_string());
    let mut all = vec![entry(
        session.first_image_name(),
        first_handle,
        first_lisp,
        first_kind,
        true,
        session.image_if_started().as_ref(),
    )];
    if !ctx.stateless {
        all.extend(
            session
                .other_images()
                .iter()
                .map(|o| other_entry(session, o)),
        );
    }
    all
}

/// One line of an image, for texts.
pub(crate) fn entry_line(e: &ImageEntry) -> String {
    let mut line = format!(
        "{}: {}",
        e.name,
        e.implementation.as_deref().unwrap_or(&e.lisp)
    );
    line.push_str(&format!(", {}", e.state));
    if let Some(pid) = e.pid {
        line.push_str(&format!(", PID {pid}"));
    }
    if e.mode == "attached" {
        line.push_str(", attached");
    }
    if e.first {
        line.push_str(" (first: the default)");
    }
    line
}

#[derive(Serialize, JsonSchema)]
struct ListOutput {
    images: Vec<ImageEntry>,
}

async fn image_list(_a: NoArgs, ctx: ToolContext) -> ToolOutput {
    let images = session_images(&ctx);
    let mut text = images.iter().map(entry_line).collect::<Vec<_>>().join("\n");
    if ctx.stateless {
        text.push_str(&format!(
            "\nNode {}. Images image-start started are addressed by the handle it gave; not \
             listed here (a stateless call has no session to list them for).",
            ctx.session.config.node_id
        ));
    }
    ToolOutput::structured(
        text,
        serde_json::to_value(ListOutput { images }).unwrap_or_default(),
    )
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// `structuredContent` of `image-start`.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct StartOutput {
    image: ImageEntry,
    /// Whether it was up within `timeoutSeconds`.
    ready: bool,
    /// How long the start took (or has taken so far).
    elapsed_ms: u64,
}

/// Starts an image, or says why not; waits for it to be up.
async fn image_start(a: StartArgs, ctx: ToolContext) -> ToolOutput {
    let wait = match timeout_arg(a.timeout_seconds, START_WAIT_SECONDS) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    let started = match ctx
        .session
        .start_image(a.name.as_deref(), &a.lisp, ctx.stateless)
    {
        Ok(s) => s,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    let t0 = Instant::now();
    let up = tokio::select! {
        r = tokio::time::timeout(wait, started.image.ready()) => r,
        _ = ctx.cancel.cancelled() => {
            stop(&ctx, &started.name).await;
            return ToolOutput::error(format!(
                "Cancelled: the image {:?} was stopped before it was up.",
                started.name
            ));
        }
    };
    let elapsed_ms = t0.elapsed().as_millis() as u64;
    let ready = match up {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            stop(&ctx, &started.name).await;
            return ToolOutput::error(format!(
                "The image {:?} ({}) did not start: {e}",
                started.name, a.lisp
            ));
        }
        Err(_) => false,
    };
    started
        .usage
        .gone_since_seen(started.image.info().generation);
    if ctx.stateless {
        tokio::spawn(stop_when_idle(ctx.clone(), started.clone()));
    }
    let image = other_entry(&ctx.session, &started);
    // A legacy session may name it; a stateless client has only the handle.
    let address = if ctx.stateless {
        &image.handle
    } else {
        &image.name
    };
    let text = if ready {
        format!(
            "Started image {} in {} ms. Tools take `image: {:?}` to address it (its handle: {}).",
            entry_line(&image),
            elapsed_ms,
            address,
            image.handle
        )
    } else {
        format!(
            "The image {:?} is still starting after {} s; calls addressed to it wait for it \
             (image-list shows its state).",
            address,
            wait.as_secs()
        )
    };
    let out = StartOutput {
        image,
        ready,
        elapsed_ms,
    };
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default())
}

/// Stops an image a stateless request started once no call has addressed
/// it for `--stateless-image-idle-secs` (nobody may hold its handle any
/// more); returns when it is stopped, or gone otherwise.
pub(crate) async fn stop_when_idle(ctx: ToolContext, image: NamedImage) {
    let idle = ctx.session.config.stateless_image_idle;
    let every = (idle / 4).clamp(
        std::time::Duration::from_millis(250),
        std::time::Duration::from_secs(30),
    );
    loop {
        tokio::time::sleep(every).await;
        // Gone with its session's end (`Session::end`) or stopped.
        let still_there = ctx
            .session
            .other_images()
            .iter()
            .any(|o| o.name == image.name && o.key == image.key);
        if !still_there {
            return;
        }
        if image.usage.idle_for(idle) {
            tracing::info!(image = %image.name, idle_secs = idle.as_secs(), "stopping an idle stateless image");
            stop(&ctx, &image.name).await;
            return;
        }
    }
}

/// Takes image `name` out of the session and ends it.
async fn stop(ctx: &ToolContext, name: &str) -> Option<NamedImage> {
    let gone = ctx.session.remove_image(name).ok()?;
    ctx.state.forget_image(name);
    gone.image.shutdown().await;
    Some(gone)
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StopArgs {
    /// The image's handle (or, in a legacy session, its name).
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct StopOutput {
    stopped: String,
}

async fn image_stop(a: StopArgs, ctx: ToolContext) -> ToolOutput {
    let found = ctx
        .session
        .resolve_image(&a.name, ctx.stateless, &ctx.nodes_down)
        .and_then(|found| {
            found.ok_or_else(|| {
                crate::session::ImageChoiceError::First(ctx.session.first_image_name())
            })
        });
    let name = match found {
        Ok(image) => image.name,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    match stop(&ctx, &name).await {
        Some(_) => ToolOutput::structured(
            format!(
                "Stopped image {:?}: its state is gone; image-start starts a new one.",
                a.name
            ),
            serde_json::to_value(StopOutput { stopped: a.name }).unwrap_or_default(),
        ),
        None => ToolOutput::error(format!("The image {:?} was stopped already.", a.name)),
    }
}

/// The tools that start, list and stop a session's images.
pub fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "image-start",
            ToolGroup::Image,
            "Start another image",
            "Start another image of any installed Lisp, named (default: the Lisp's name); Lisp \
             tools then take `image`: its handle (any era; stateless calls must) or name.",
            Annotations::MUTATING,
            image_start,
        )
        .with_output_schema::<StartOutput>()
        .with_task_support()
        .without_image_choice(),
        tool(
            "image-list",
            ToolGroup::Image,
            "List images",
            "The session's images (the first is the default `image`).",
            Annotations::READ_ONLY,
            image_list,
        )
        .with_output_schema::<ListOutput>()
        .without_image_choice(),
        tool(
            "image-stop",
            ToolGroup::Image,
            "Stop an image",
            "Stop one of the session's further images (its state is lost).",
            Annotations::DESTRUCTIVE,
            image_stop,
        )
        .with_output_schema::<StopOutput>()
        .with_param_header("name", super::IMAGE_HEADER)
        .without_image_choice(),
    ]
}
