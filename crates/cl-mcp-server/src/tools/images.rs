//! A session's several images: `image-start`, `image-list`, `image-stop`.
//! Every tool of the Lisp-backed groups then takes `image` (the framework
//! picks it: `ToolDef::call`); `session::images` keeps them.

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
    /// What the `image` argument of a tool takes.
    name: String,
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

fn other_entry(o: &NamedImage) -> ImageEntry {
    entry(
        o.name.clone(),
        o.lisp.clone(),
        o.kind.map(|k| k.name().to_string()),
        false,
        Some(&o.image),
    )
}

/// Every image of the session, the first first.
pub(crate) fn session_images(ctx: &ToolContext) -> Vec<ImageEntry> {
    let session = &ctx.session;
    let config = &session.config.image;
    let first_lisp = match (&config.attach, &config.lisp) {
        (Some(a), _) => format!("swank at {a}"),
        (None, Some(l)) => l.display().to_string(),
        (None, None) => "sbcl".into(),
    };
    let first_kind = session.first_image_kind().map(|k| k.name().to_string());
    let mut all = vec![entry(
        session.first_image_name(),
        first_lisp,
        first_kind,
        true,
        session.image_if_started().as_ref(),
    )];
    all.extend(session.other_images().iter().map(other_entry));
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
    let text = images.iter().map(entry_line).collect::<Vec<_>>().join("\n");
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
    let started = match ctx.session.start_image(a.name.as_deref(), &a.lisp) {
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
    let image = other_entry(&started);
    let text = if ready {
        format!(
            "Started image {} in {} ms. Tools take `image: {:?}` to address it.",
            entry_line(&image),
            elapsed_ms,
            image.name
        )
    } else {
        format!(
            "The image {:?} is still starting after {} s; calls addressed to it wait for it \
             (image-list shows its state).",
            image.name,
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
    name: String,
}

#[derive(Serialize, JsonSchema)]
struct StopOutput {
    stopped: String,
}

async fn image_stop(a: StopArgs, ctx: ToolContext) -> ToolOutput {
    if let Err(e) = ctx
        .session
        .image_named(&a.name)
        .and_then(|found| match found {
            None => Err(crate::session::ImageChoiceError::First(a.name.clone())),
            Some(_) => Ok(()),
        })
    {
        return ToolOutput::error(e.to_string());
    }
    match stop(&ctx, &a.name).await {
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
             tools then take `image: NAME`.",
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
        .without_image_choice(),
    ]
}
