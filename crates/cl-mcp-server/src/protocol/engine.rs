//! The server: configuration, the tool registry and what lives as long as
//! the server does (the shared image, stateless input states, every
//! session's tasks). Connections are opened on it (`connection.rs`).

use std::sync::Arc;

use serde_json::Value;

use super::input_state::StateStore;
use super::tasks::TaskStores;
use crate::config::ServerConfig;
use crate::session::{ImageSlot, Session};
use crate::tools::ToolRegistry;

/// The server: configuration and tools, shared by every connection.
pub struct Engine {
    pub config: Arc<ServerConfig>,
    pub tools: Arc<ToolRegistry>,
    /// `tools/list`'s array, described once.
    pub(crate) tools_list: Value,
    /// The image all sessions use with `--shared-image`.
    shared_image: Arc<std::sync::OnceLock<crate::image::Image>>,
    /// `requestState`s handed to stateless clients (SEP-2322).
    pub(crate) input_states: StateStore,
    /// Every session's tasks, dropped when its session ends.
    pub(crate) tasks: Arc<TaskStores>,
}

impl Engine {
    pub fn new(config: ServerConfig) -> Arc<Engine> {
        let tools = Arc::new(ToolRegistry::standard(&config.tool_groups));
        // `approvalToken` is an argument only where tokens are handed out.
        let token_tools: &[String] = if config.approval_token_fallback {
            &config.require_approval
        } else {
            &[]
        };
        let mut tools_list = describe_tools(&tools, token_tools);
        note_missing_features(&mut tools_list, &config);
        Arc::new(Engine {
            tools_list,
            config: Arc::new(config),
            tools,
            shared_image: Arc::new(std::sync::OnceLock::new()),
            input_states: Default::default(),
            tasks: Default::default(),
        })
    }
    /// A new session: with its own image, or the shared one.
    pub fn new_session(&self) -> Arc<Session> {
        let slot = if self.config.shared_image {
            ImageSlot::Shared {
                image: self.shared_image.clone(),
            }
        } else {
            ImageSlot::Own(std::sync::OnceLock::new())
        };
        let session = Session::with_image(self.config.clone(), slot);
        crate::tools::attach_session(&session);
        let tasks = self.tasks.clone();
        session.on_end(Box::new(move |s| {
            Box::pin(async move { tasks.end_session(s.id) })
        }));
        session
    }
}

/// Appends to each tool's description what the implementations a session
/// may run cannot do ([`LispKind::missing_features`](crate::image::implementation::LispKind::missing_features)):
/// the first image's (only a local image named by `--lisp` is asked, its
/// `--version`, once: the default is SBCL, and an attached image's
/// implementation is known only once connected), and, where `image-start`
/// is offered, every implementation installed here (" Not on ECL, CLISP
/// (no cross-references).").
fn note_missing_features(tools_list: &mut Value, config: &ServerConfig) {
    use crate::image::implementation::LispKind;
    let image = &config.image;
    if image.attach.is_some() {
        return;
    }
    let mut kinds: Vec<LispKind> = Vec::new();
    match &image.lisp {
        None => kinds.push(LispKind::Sbcl),
        Some(_) => {
            // Asked as an image would be: confined, and never a Lisp an
            // agent could have written.
            let kind = crate::image::places::confined_lisp(image)
                .and_then(|(lisp, _, jail)| crate::image::locate::lisp_kind(&lisp, &jail));
            if let Ok(kind) = kind {
                kinds.push(kind);
            }
        }
    }
    if config
        .tool_groups
        .contains(&crate::config::ToolGroup::Image)
    {
        for kind in crate::session::images::installed() {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    // (tool, what is missing) → the implementations that lack it.
    let mut lacking: Vec<((&str, String), Vec<String>)> = Vec::new();
    for kind in kinds {
        for (tool, lacks) in crate::tools::missing_features_by_tool(kind) {
            let key = (tool, lacks);
            let name = kind.name().to_uppercase();
            match lacking.iter_mut().find(|(k, _)| *k == key) {
                Some((_, names)) => names.push(name),
                None => lacking.push((key, vec![name])),
            }
        }
    }
    for ((tool, lack), names) in lacking {
        if let Some(d) = tools_list
            .as_array_mut()
            .into_iter()
            .flatten()
            .find(|t| t["name"] == tool)
        {
            if let Some(text) = d["description"].as_str() {
                let clause = format!(" Not on {} ({lack}).", names.join(", "));
                d["description"] = Value::String(format!("{text}{clause}"));
            }
        }
    }
}

/// The `tools` array of `tools/list`: every offered tool, with
/// `approvalToken` in the schemas of tools that need approval. Computed once.
pub(crate) fn describe_tools(
    tools: &crate::tools::ToolRegistry,
    require_approval: &[String],
) -> Value {
    Value::Array(
        tools
            .list()
            .map(|t| {
                let mut d = t.describe();
                if require_approval.iter().any(|a| a == t.name) {
                    d["inputSchema"] =
                        super::approval_tokens::schema_with_token(d["inputSchema"].take());
                }
                d
            })
            .collect(),
    )
}
