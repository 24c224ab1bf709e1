//! The pending debuggers of a session ([`Debuggers`]), and what the end
//! of the session does to them (`end_session`).

use super::pending::{Pending, UNWIND_GRACE};
use crate::session::Session;
use crate::sync::MutexExt;
use crate::tools::lisp_call::{helper_form, BUFFER_PACKAGE};
use crate::tools::session_state::SessionTools;
use crate::tools::ToolContext;
use crate::tools::ToolError;
use lisp_syntax::data::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::{CancellationToken, DropGuard};

/// The pending debuggers of a session. Dropping it (the session ends)
/// aborts every one.
pub struct Debuggers {
    pub(super) list: Mutex<Vec<Arc<Pending>>>,
    pub(super) end: CancellationToken,
    _guard: DropGuard,
}

impl Default for Debuggers {
    fn default() -> Self {
        let end = CancellationToken::new();
        Debuggers {
            list: Mutex::new(Vec::new()),
            _guard: end.clone().drop_guard(),
            end,
        }
    }
}

/// Pending debugger `id` (default: the newest), and `ctx` addressed to the
/// image it runs in (whatever the call's own `image` said).
pub(crate) fn find_in_its_image(
    ctx: &ToolContext,
    id: Option<u64>,
) -> Result<(Arc<Pending>, ToolContext), ToolError> {
    let p = ctx.state.debuggers.find(id)?;
    let name = match &p.image {
        Some(name) => name.clone(),
        None => ctx.session.first_image_name(),
    };
    let ctx = ctx
        .for_image(&name)
        .map_err(|e| ToolError::Debugger(format!("Debugger {}: {e}", p.id)))?;
    Ok((p, ctx))
}

/// Pending debugger `id` (default: the newest) with `ctx` addressed to its
/// image, and its Swank thread, which serves requests inside the
/// debugger's dynamic extent; marks it touched.
pub(crate) fn debugger_thread(
    ctx: &ToolContext,
    id: Option<u64>,
) -> Result<(Arc<Pending>, ToolContext, i64), ToolError> {
    let (p, ctx) = find_in_its_image(ctx, id)?;
    p.touch();
    let thread = p
        .state()
        .thread
        .ok_or_else(|| ToolError::Debugger("The evaluation is not in the debugger.".into()))?;
    Ok((p, ctx, thread))
}

impl Debuggers {
    /// Evaluations of this session waiting in the debugger, oldest first.
    pub fn suspended(&self) -> Vec<Arc<Pending>> {
        self.list
            .guard()
            .iter()
            .filter(|p| p.state().level > 0 && p.state().outcome.is_none())
            .cloned()
            .collect()
    }

    pub(super) fn find(&self, id: Option<u64>) -> Result<Arc<Pending>, ToolError> {
        let all = self.suspended();
        let found = match id {
            Some(id) => all.into_iter().find(|p| p.id == id),
            None => all.into_iter().last(),
        };
        found.ok_or_else(|| match id {
            Some(id) => ToolError::Debugger(format!(
                "There is no pending debugger {id} in this session (it was resolved or \
                 aborted). image-info lists the pending ones."
            )),
            None => ToolError::Debugger(
                "There is no pending debugger in this session. evaluate-lisp with \
                 `debug: true` leaves one when the code hits an error, break or \
                 invoke-debugger."
                    .into(),
            ),
        })
    }

    pub(super) fn remove(&self, id: u64) {
        self.list.guard().retain(|p| p.id != id);
    }
}

/// The session ends (its stream closed, HTTP `DELETE`, expiry): aborts its
/// pending debuggers and waits for them to unwind, then, in an image that
/// outlives the session (shared or attached), undoes what the session left
/// there (`cl-mcp:end-session`: the traces only it asked for, its records,
/// inspections and current package). Bounded in time; never starts an
/// image.
pub async fn end_session(session: &Session, state: &SessionTools) {
    state.debuggers.end.cancel();
    let Some(image) = session.image_if_started() else {
        return;
    };
    let deadline = Instant::now() + UNWIND_GRACE;
    while !state.debuggers.list.guard().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !session.config.shared_image && image.mode() != crate::image::ImageMode::Attached {
        // Its own local image goes with it.
        return;
    }
    let form = helper_form(
        "end-session",
        vec![Value::string(crate::tools::lisp_call::session_key_of(
            session,
        ))],
        vec![],
    );
    let r = tokio::time::timeout(
        UNWIND_GRACE,
        image.rex(&form, BUFFER_PACKAGE, crate::image::Thread::T),
    )
    .await;
    tracing::debug!(
        session = session.id,
        ok = matches!(r, Ok(Ok(_))),
        "session ended in the image"
    );
}

/// Pending debuggers of the session, one line each, for `image-info`.
pub fn pending_lines(ctx: &ToolContext) -> Vec<String> {
    ctx.state
        .debuggers
        .suspended()
        .iter()
        .map(|p| {
            format!(
                "debugger {}{} (level {}, idle {} s): {}",
                p.id,
                p.image
                    .as_ref()
                    .map_or(String::new(), |i| format!(" in image {i}")),
                p.state().level,
                p.idle_secs(),
                p.code
            )
        })
        .collect()
}
