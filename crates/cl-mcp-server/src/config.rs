//! Server-wide configuration, filled from the command line and environment.

use std::path::PathBuf;

/// Everything the server was told at start.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// `--project-root` / `MCP_PROJECT_ROOT`.
    pub project_root: Option<PathBuf>,
    /// `--tools`: the tool groups offered.
    pub tool_groups: Vec<ToolGroup>,
    /// Longest accepted message line, in bytes.
    pub max_message_bytes: usize,
    /// `--max-connections`: open TCP/HTTP connections served at once.
    pub max_connections: usize,
    /// `--require-approval`: tools that ask the user before running.
    pub require_approval: Vec<String>,
    /// `--approval-fallback token`: without elicitation, hand out
    /// single-use approval tokens instead of refusing.
    pub approval_token_fallback: bool,
    /// `--allow-any-root`: `fs-set-project-root` may leave the start root
    /// and the client's roots.
    pub allow_any_root: bool,
    /// `--shared-image`: every session uses one image.
    pub shared_image: bool,
    /// Start a session's image as soon as the session starts (not at the
    /// first tool call that needs it).
    pub eager_image: bool,
    /// How sessions find, start or attach to their Lisp image.
    pub image: crate::image::ImageConfig,
    /// `--debugger-idle-secs`: a pending debugger nobody touched for this
    /// long is aborted.
    pub debugger_idle_secs: u64,
    /// `--node-id`: this server's name in image handles (`NODE/NAME~KEY`),
    /// which a proxy routes by.
    pub node_id: String,
    /// `--stateless-image-idle-secs`: an image a stateless request started
    /// is stopped after this long without a call.
    pub stateless_image_idle: std::time::Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            project_root: None,
            tool_groups: ToolGroup::ALL.to_vec(),
            max_message_bytes: 16 * 1024 * 1024,
            max_connections: 128,
            require_approval: Vec::new(),
            approval_token_fallback: false,
            allow_any_root: false,
            shared_image: false,
            eager_image: true,
            image: crate::image::ImageConfig::from_env(),
            debugger_idle_secs: 600,
            node_id: default_node_id(),
            stateless_image_idle: std::time::Duration::from_secs(DEFAULT_STATELESS_IMAGE_IDLE_SECS),
        }
    }
}

/// How long an image started statelessly lives without a call, unless told.
pub const DEFAULT_STATELESS_IMAGE_IDLE_SECS: u64 = 1800;
/// The longest `--stateless-image-idle-secs` accepted (a day): an image
/// nobody holds a handle to must end some time.
pub const MAX_STATELESS_IMAGE_IDLE_SECS: u64 = 86_400;

/// Whether `id` may name a node: 1 to 63 letters, digits, `-`, `_`, `.`
/// (a host name's characters; never `/` or `~`, which separate a handle's
/// parts).
pub fn valid_node_id(id: &str) -> bool {
    (1..=63).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The node id when `--node-id` is not given: the host name (its
/// characters outside a node id's replaced by `-`), else `node-` and the
/// first 12 characters of `/etc/machine-id`, both stable across restarts;
/// else `node`.
pub fn default_node_id() -> String {
    let from_file = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if let Some(host) = from_file("/proc/sys/kernel/hostname").filter(|h| !h.is_empty()) {
        let cleaned: String = host
            .chars()
            .take(63)
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if valid_node_id(&cleaned) {
            return cleaned;
        }
    }
    match from_file("/etc/machine-id").filter(|m| m.len() >= 12) {
        Some(m) => format!("node-{}", &m[..12]),
        None => "node".into(),
    }
}

impl ServerConfig {
    /// The root a new session starts with: the configured one, else the
    /// working directory.
    pub fn initial_project_root(&self) -> PathBuf {
        let raw = self
            .project_root
            .clone()
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("/"));
        raw.canonicalize().unwrap_or(raw)
    }
}

/// The groups `--tools` selects from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolGroup {
    Eval,
    Image,
    Code,
    Asdf,
    Source,
    Fs,
    /// Looking into the live image: the debugger that waits, inspector,
    /// trace, profiler, threads.
    Debug,
    /// Test-only tools (cargo feature `test-tools`); always listed when built in.
    Testing,
}

impl ToolGroup {
    pub const ALL: [ToolGroup; 7] = [
        ToolGroup::Eval,
        ToolGroup::Image,
        ToolGroup::Code,
        ToolGroup::Asdf,
        ToolGroup::Source,
        ToolGroup::Fs,
        ToolGroup::Debug,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ToolGroup::Eval => "eval",
            ToolGroup::Image => "image",
            ToolGroup::Code => "code",
            ToolGroup::Asdf => "asdf",
            ToolGroup::Source => "source",
            ToolGroup::Fs => "fs",
            ToolGroup::Debug => "debug",
            ToolGroup::Testing => "testing",
        }
    }

    pub fn parse(name: &str) -> Option<ToolGroup> {
        ToolGroup::ALL
            .into_iter()
            .find(|g| g.name().eq_ignore_ascii_case(name.trim()))
    }
}
