//! Test-only tools, compiled in with the `test-tools` cargo feature, so the
//! black-box tests can exercise cancellation, progress, logging and the
//! internal-error path without a Lisp image.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{tool, Annotations, LogLevel, ToolContext, ToolDef, ToolGroup, ToolOutput};

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SleepArgs {
    /// How long to sleep, in seconds.
    seconds: f64,
    /// Send this log message (level info) before sleeping.
    log_message: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

pub fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "test-sleep",
            ToolGroup::Testing,
            "Sleep (test tool)",
            "Sleeps for `seconds`, updating its status line every 100 ms; stops early when cancelled.",
            Annotations::READ_ONLY,
            |a: SleepArgs, ctx: ToolContext| async move {
                if let Some(m) = &a.log_message {
                    ctx.log(LogLevel::Info, m);
                }
                let ticks = (a.seconds * 10.0).ceil() as u64;
                for n in 0..ticks {
                    ctx.set_status(format!("tick {n}"));
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                        _ = ctx.cancel.cancelled() => return ToolOutput::error("cancelled"),
                    }
                }
                ToolOutput::text(format!("slept {}s", a.seconds))
            },
        )
        .with_task_support(),
        tool(
            "test-panic",
            ToolGroup::Testing,
            "Panic (test tool)",
            "Panics, to test that a server bug becomes -32603 and the server lives on.",
            Annotations::READ_ONLY,
            |_a: NoArgs, _ctx: ToolContext| async move {
                if std::hint::black_box(true) {
                    panic!("deliberate test panic");
                }
                ToolOutput::text("unreachable")
            },
        ),
    ]
}
