//! The `image` tools (`image-info`, `image-restart`, `image-interrupt`).

use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::lisp_call::{
    call_fresh, eval_slot, finish, helper_form, interrupt_evaluation, plist_i64, plist_str,
    plist_strings, session_key,
};
use super::{tool, Annotations, ToolContext, ToolDef, ToolGroup, ToolOutput};
use crate::image::{Image, ImageMode};
use crate::sync::MutexExt;

// ---------------------------------------------------------------------------
// image-info, image-restart, image-interrupt

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// `structuredContent` of `image-info`.
#[derive(Serialize, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
struct InfoOutput {
    /// `local` (started by this server), `launched` (started by
    /// `--image-launcher`) or `attached` (the user's image).
    mode: String,
    /// The `--image-launcher` that started a launched image: its sandbox
    /// and limits are the launcher's, not this server's.
    #[serde(skip_serializing_if = "Option::is_none")]
    launcher: Option<String>,
    /// Where the image's Swank listens (`HOST:PORT`).
    #[serde(skip_serializing_if = "Option::is_none")]
    swank_address: Option<String>,
    implementation: String,
    version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<i64>,
    /// Seconds since this image was started (or attached to).
    #[serde(skip_serializing_if = "Option::is_none")]
    uptime_seconds: Option<u64>,
    /// 1 for the first image, +1 per restart.
    generation: u64,
    swank_version: String,
    /// The session's current package.
    package: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    asdf_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    loaded_systems: Option<i64>,
    features: Vec<String>,
    /// Evaluations of this session waiting in the debugger.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pending_debuggers: Vec<String>,
    /// The cached core the image started from, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    core: Option<String>,
    /// Whether evaluations take the server's own evaluation channel
    /// (false: through Swank, as on a Lisp without threads).
    #[serde(skip_serializing_if = "Option::is_none")]
    evaluation_channel: Option<bool>,
    /// "unix" or "tcp".
    #[serde(skip_serializing_if = "Option::is_none")]
    evaluation_socket: Option<String>,
    machine: String,
    /// What a local image is confined to (`--sandbox`); absent for an
    /// attached image (never confined).
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxInfo>,
    /// The image these details are of (`image` argument).
    image: String,
    /// Every image of the session (`image-start`), the first first.
    images: Vec<super::images::ImageEntry>,
}

/// The image's sandbox (`--sandbox`).
#[derive(Serialize, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
struct SandboxInfo {
    /// `off`, `workspace` or `strict`.
    mode: String,
    /// Whether the kernel enforces it (Landlock present).
    enforced: bool,
    /// The kernel's Landlock ABI (0: none).
    landlock_abi: i32,
    /// Directories the image may write under.
    write: Vec<String>,
    /// Directories it may read under; absent: everywhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    read: Option<Vec<String>>,
    /// The network rule, in words.
    network: String,
    /// Why it is weaker than asked, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
    /// The whole rule set in words.
    summary: String,
}

fn sandbox_info(r: &crate::image::sandbox::SandboxReport) -> SandboxInfo {
    let paths = |v: &[std::path::PathBuf]| v.iter().map(|p| p.display().to_string()).collect();
    SandboxInfo {
        mode: r.mode.as_str().to_string(),
        enforced: r.enforced,
        landlock_abi: r.abi,
        write: paths(&r.write),
        read: r.read.as_deref().map(paths),
        network: r.network.clone(),
        warning: r.warning.clone(),
        summary: r.describe(),
    }
}

fn info_output(image: &Image, v: &Value) -> InfoOutput {
    let info = image.info();
    InfoOutput {
        mode: info.mode.to_string(),
        launcher: info.launcher.clone(),
        swank_address: info.swank_address.clone(),
        implementation: plist_str(v, "implementation").unwrap_or_default(),
        version: plist_str(v, "version").unwrap_or_default(),
        pid: plist_i64(v, "pid").or(info.pid.map(i64::from)),
        uptime_seconds: info
            .started_at
            .and_then(|t| t.elapsed().ok())
            .map(|d| d.as_secs()),
        generation: info.generation,
        swank_version: plist_str(v, "swank-version").unwrap_or_default(),
        package: plist_str(v, "package").unwrap_or_default(),
        asdf_version: plist_str(v, "asdf-version"),
        loaded_systems: plist_i64(v, "loaded-systems"),
        features: plist_strings(v, "features"),
        pending_debuggers: Vec::new(),
        core: info.core.map(|p| p.display().to_string()),
        evaluation_channel: info.eval_channel,
        evaluation_socket: info.eval_socket.map(str::to_string),
        machine: plist_str(v, "machine").unwrap_or_default(),
        sandbox: info.sandbox.as_ref().map(sandbox_info),
        image: String::new(),
        images: Vec::new(),
    }
}

fn render_info(o: &InfoOutput) -> String {
    let mut text = format!(
        "{} {} ({} image, generation {})",
        o.implementation, o.version, o.mode, o.generation
    );
    if let Some(pid) = o.pid {
        text.push_str(&format!("\nPID: {pid}"));
    }
    if let Some(l) = &o.launcher {
        text.push_str(&format!(
            "\nLaunched by: {l} (Swank at {})",
            o.swank_address.as_deref().unwrap_or("?")
        ));
    }
    if let Some(up) = o.uptime_seconds {
        text.push_str(&format!("\nUptime: {up} s"));
    }
    text.push_str(&format!("\nSwank: {}", o.swank_version));
    text.push_str(&format!("\nCurrent package: {}", o.package));
    if let Some(a) = &o.asdf_version {
        text.push_str(&format!("\nASDF: {a}"));
    }
    if let Some(n) = o.loaded_systems {
        text.push_str(&format!("\nLoaded ASDF systems: {n}"));
    }
    if let Some(c) = &o.core {
        text.push_str(&format!("\nCore: {c}"));
    }
    match o.evaluation_channel {
        Some(true) => text.push_str(&format!(
            "\nEvaluations: the server's evaluation channel ({})",
            match o.evaluation_socket.as_deref() {
                Some("unix") => "Unix socket",
                _ => "loopback TCP",
            }
        )),
        Some(false) => text.push_str("\nEvaluations: through Swank (no evaluation channel)"),
        None => {}
    }
    text.push_str(&format!("\nMachine: {}", o.machine));
    text.push_str(&format!("\nFeatures: {}", o.features.join(" ")));
    match &o.sandbox {
        Some(s) => text.push_str(&format!("\n{}", s.summary.replace("\n", "\n  "))),
        None if o.mode == "attached" => {
            text.push_str("\nsandbox: none (an attached image is never confined by this server)")
        }
        None if o.launcher.is_some() => text.push_str(
            "\nsandbox: the image launcher's (this server does not confine a launched image)",
        ),
        None => {}
    }
    for d in &o.pending_debuggers {
        text.push_str(&format!("\nPending {d}"));
    }
    if o.images.len() > 1 {
        text.push_str(&format!(
            "\nImages of this session (this one: {}):",
            o.image
        ));
        for e in &o.images {
            text.push_str(&format!("\n  {}", super::images::entry_line(e)));
        }
    }
    text
}

async fn image_info(_a: NoArgs, ctx: ToolContext) -> ToolOutput {
    let form = helper_form("image-info", vec![Value::string(session_key(&ctx))], vec![]);
    let v = match call_fresh(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let image = ctx.image();
    let mut out = info_output(&image, &v);
    out.pending_debuggers = super::debug::pending_lines(&ctx);
    out.image = ctx.image_name();
    out.images = super::images::session_images(&ctx);
    let mut text = render_info(&out);
    if let Some(limits) = image.info().limits {
        text.push('\n');
        text.push_str(&limits);
    }
    ToolOutput::structured(text, serde_json::to_value(&out).unwrap_or_default())
}

/// `structuredContent` of `image-restart`.
#[derive(Serialize, JsonSchema)]
struct RestartOutput {
    /// How many images this session has started (1 = the first).
    generation: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
}

/// `structuredContent` of `image-interrupt`.
#[derive(Serialize, JsonSchema)]
struct InterruptOutput {
    /// Whether a running evaluation was interrupted.
    interrupted: bool,
}

fn interrupt_output(text: &str, interrupted: bool) -> ToolOutput {
    ToolOutput::structured(
        text,
        serde_json::to_value(InterruptOutput { interrupted }).unwrap_or_default(),
    )
}

async fn image_restart(_a: NoArgs, ctx: ToolContext) -> ToolOutput {
    let image = ctx.image();
    if image.mode() == ImageMode::Attached {
        return ToolOutput::error(
            "image-restart is refused in attach mode: the image belongs to your own Lisp \
             session (--swank). Restart it from there, or run the server without --swank to \
             let it manage its own image.",
        );
    }
    // A stale notice about an earlier crash would only confuse: the
    // restart is explicit.
    eval_slot(&ctx).notice.guard().take();
    match image.restart().await {
        Ok(info) => {
            let text = format!(
                "Started a fresh image (generation {}{}). All previous state (definitions, \
                 global variables, loaded systems) is gone.",
                info.generation,
                info.pid.map(|p| format!(", PID {p}")).unwrap_or_default()
            );
            let out = RestartOutput {
                generation: info.generation,
                pid: info.pid,
            };
            ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default())
        }
        Err(e) => ToolOutput::error(format!("Could not restart the image: {e}")),
    }
}

async fn image_interrupt(_a: NoArgs, ctx: ToolContext) -> ToolOutput {
    let running = *eval_slot(&ctx).running.guard();
    let Some(id) = running else {
        return interrupt_output(
            "No evaluation of this session is running; nothing to interrupt.",
            false,
        );
    };
    let ids = interrupt_evaluation(&ctx, Some(id)).await;
    if ids.is_empty() {
        interrupt_output(
            "The evaluation had already finished; nothing was interrupted.",
            false,
        )
    } else {
        interrupt_output(
            "Interrupted the running evaluation: its evaluate-lisp call returns [INTERRUPTED] \
             with where it was. The image's state is intact.",
            true,
        )
    }
}

/// The tools of the `image` group.
pub fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "image-info",
            ToolGroup::Image,
            "Image information",
            "The image: implementation, version, PID, uptime, mode, sandbox, Swank/ASDF versions, \
             package, systems, features, pending debuggers.",
            Annotations::READ_ONLY,
            |a: NoArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                finish(&c, image_info(a, ctx).await)
            },
        )
        .with_output_schema::<InfoOutput>(),
        tool(
            "image-restart",
            ToolGroup::Image,
            "Restart the image",
            "Kill the session's local image and start a fresh one; all state is lost. Refused \
             when attached to the user's image.",
            Annotations::DESTRUCTIVE,
            image_restart,
        )
        .with_output_schema::<RestartOutput>(),
        tool(
            "image-interrupt",
            ToolGroup::Image,
            "Interrupt evaluation",
            "Interrupt the session's running evaluation (for clients that cannot cancel); it \
             returns where it was, state kept.",
            Annotations::MUTATING,
            image_interrupt,
        )
        .with_output_schema::<InterruptOutput>(),
    ]
}
