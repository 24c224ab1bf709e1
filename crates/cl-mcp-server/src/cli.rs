//! The command line: `cl-mcp-server [stdio|tcp|call|doctor] [options]`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::ServerConfig;
use crate::config::ToolGroup;

/// An MCP server that gives AI agents a live Common Lisp environment.
#[derive(Parser, Debug)]
#[command(name = "cl-mcp-server", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub options: ServerOptions,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve MCP on stdin/stdout (the default).
    Stdio,
    /// Serve MCP over loopback TCP, the stdio framing, one session per connection.
    Tcp {
        /// Port to listen on (0: let the OS choose; the chosen port is logged).
        #[arg(long, env = "CL_MCP_TCP_PORT", default_value_t = 4006)]
        port: u16,
        /// Address to bind; loopback unless you say otherwise.
        #[arg(long, env = "CL_MCP_TCP_HOST", default_value = "127.0.0.1")]
        host: std::net::IpAddr,
    },
    /// Serve MCP over Streamable HTTP at /mcp.
    Http {
        /// Address to bind; loopback unless you say otherwise.
        #[arg(long, env = "CL_MCP_HTTP_BIND", default_value = "127.0.0.1:3000")]
        bind: SocketAddr,
        /// Require `Authorization: Bearer TOKEN` on every request.
        #[arg(long, env = "CL_MCP_TOKEN")]
        token: Option<String>,
        /// Also allow this Origin (loopback origins are always allowed). Repeatable.
        #[arg(
            long = "allow-origin",
            env = "CL_MCP_ALLOW_ORIGINS",
            value_delimiter = ','
        )]
        allow_origins: Vec<String>,
        /// Also allow this Host name (loopback names and the bind address are always allowed). Repeatable.
        #[arg(long = "allow-host", env = "CL_MCP_ALLOW_HOSTS", value_delimiter = ',')]
        allow_hosts: Vec<String>,
        /// Forget a session idle this many seconds (later requests with its id get 404).
        #[arg(long, env = "CL_MCP_SESSION_IDLE_SECS", default_value_t = 3600)]
        session_idle_secs: u64,
        /// Close a connection whose request headers have not all arrived this many seconds after it (or its previous request) began.
        #[arg(long, env = "CL_MCP_HEADER_TIMEOUT_SECS", default_value_t = 10)]
        header_timeout_secs: u64,
        /// Answer 408 to a request whose body has not all arrived this many seconds after its headers.
        #[arg(long, env = "CL_MCP_BODY_TIMEOUT_SECS", default_value_t = 30)]
        body_timeout_secs: u64,
    },
    /// Check the Lisp, Swank, the core cache and a live image; print each check with its fix.
    Doctor,
    /// Run one tool once and print its result (scripting, smoke tests).
    Call {
        /// The tool's name, e.g. lisp-check-parens.
        tool: String,
        /// An argument as key=value (value parsed as JSON when it is JSON, else a string). Repeatable.
        #[arg(long = "arg", value_name = "KEY=VALUE")]
        args: Vec<String>,
        /// All arguments as one JSON object (merged under --arg).
        #[arg(long)]
        json: Option<String>,
    },
}

/// Options that apply to every mode.
#[derive(Args, Debug, Clone)]
pub struct ServerOptions {
    /// Project root for file tools (default: the client's root, else the working directory).
    #[arg(long, env = "MCP_PROJECT_ROOT", global = true)]
    pub project_root: Option<PathBuf>,
    /// Tool groups to offer, comma-separated: eval,image,code,asdf,source,fs,debug (default: all).
    #[arg(long, env = "CL_MCP_TOOLS", global = true, value_delimiter = ',')]
    pub tools: Option<Vec<String>>,
    /// Log level of the JSON logs on stderr: debug, info, warn, error.
    #[arg(long, env = "MCP_LOG_LEVEL", global = true, default_value = "info")]
    pub log_level: String,
    /// Tools that must ask the user before running, comma-separated (e.g. fs-write-file,lisp-edit-form).
    #[arg(
        long,
        env = "CL_MCP_REQUIRE_APPROVAL",
        global = true,
        value_delimiter = ','
    )]
    pub require_approval: Vec<String>,
    /// What approval does when the client cannot ask its user (no elicitation):
    /// `refuse` (default) or `token` (the call returns a single-use token to
    /// repeat it with; a guard against accidents, not against a determined model).
    #[arg(long, env = "CL_MCP_APPROVAL_FALLBACK", global = true, default_value = "refuse",
          value_parser = ["refuse", "token"])]
    pub approval_fallback: String,
    /// Let fs-set-project-root move to any directory (default: only inside the
    /// root the server started with and the roots the client declares).
    #[arg(long, env = "CL_MCP_ALLOW_ANY_ROOT", global = true)]
    pub allow_any_root: bool,
    /// The Lisp to run: a path, or sbcl, ecl, clisp, abcl, ccl (found on PATH and recognised by its --version). Default: sbcl.
    #[arg(long, env = "CL_MCP_LISP", global = true, value_name = "PATH|NAME")]
    pub lisp: Option<PathBuf>,
    /// A further Lisp executable that image-start and lisps may run by path, besides the --lisp one (implementations on PATH are taken by name). Repeatable.
    #[arg(
        long = "allow-lisp",
        env = "CL_MCP_ALLOW_LISP",
        global = true,
        value_name = "PATH",
        value_delimiter = ','
    )]
    pub allow_lisp: Vec<PathBuf>,
    /// Swank's swank-loader.lisp (default: Debian's cl-swank, then ASDF, then Quicklisp).
    #[arg(long, env = "SWANK_LOADER", global = true, value_name = "PATH")]
    pub swank_loader: Option<PathBuf>,
    /// Attach to the Swank server of an image you already run (SLIME/SLY) instead of starting one.
    #[arg(
        long = "swank",
        env = "CL_MCP_SWANK",
        global = true,
        value_name = "HOST:PORT"
    )]
    pub swank: Option<String>,
    /// File holding the attached Swank's secret (its first line), if it uses one (~/.slime-secret).
    #[arg(
        long,
        env = "CL_MCP_SWANK_SECRET_FILE",
        global = true,
        value_name = "FILE"
    )]
    pub swank_secret_file: Option<PathBuf>,
    /// Start each image through this executable (its own host, namespace or pod) and connect to the Swank endpoint it prints; `local` (the default) starts images here. See README "Images launched elsewhere".
    #[arg(
        long,
        env = "CL_MCP_IMAGE_LAUNCHER",
        global = true,
        value_name = "CMD",
        conflicts_with = "swank"
    )]
    pub image_launcher: Option<PathBuf>,
    /// All sessions share one image (default: each session has its own).
    #[arg(long, env = "CL_MCP_SHARED_IMAGE", global = true)]
    pub shared_image: bool,
    /// Start a session's image only when a tool first needs it (default: at the handshake, in the background).
    #[arg(long, env = "CL_MCP_LAZY_IMAGE", global = true)]
    pub lazy_image: bool,
    /// Never build or use the cached core: always load Swank and the helpers from source.
    #[arg(long, env = "CL_MCP_NO_CORE_CACHE", global = true)]
    pub no_core_cache: bool,
    /// Directory of the core cache (default: $XDG_CACHE_HOME/cl-mcp-server or ~/.cache/cl-mcp-server).
    #[arg(long, env = "CL_MCP_CACHE_DIR", global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Extra runtime argument for the Lisp, e.g. --lisp-arg=--dynamic-space-size --lisp-arg=4096. Repeatable.
    #[arg(
        long = "lisp-arg",
        env = "CL_MCP_LISP_ARGS",
        global = true,
        value_delimiter = ' ',
        allow_hyphen_values = true
    )]
    pub lisp_args: Vec<String>,
    /// Limit the local image's memory to MB mebibytes: on SBCL an
    /// evaluation that keeps more alive is stopped with an error and the
    /// image kept (SBCL's heap is then 2 × MB + 256); elsewhere the Lisp's
    /// heap cap (ECL's heap, CLISP's address space), so a runaway
    /// allocation never takes the host's memory.
    #[arg(long, env = "CL_MCP_MEMORY_LIMIT", global = true, value_name = "MB")]
    pub memory_limit: Option<u64>,
    /// Most local Lisp images running at once (HTTP/TCP servers: one per
    /// session); beyond it a session's image calls answer with an error
    /// saying so until an image ends. Default: no limit.
    #[arg(long, env = "CL_MCP_MAX_IMAGES", global = true, value_name = "N")]
    pub max_images: Option<usize>,
    /// Stop a session's local image after S seconds without an image call
    /// (its next call starts a fresh one, without the old state). Default: never.
    #[arg(long, env = "CL_MCP_IMAGE_IDLE_SECS", global = true, value_name = "S")]
    pub image_idle_secs: Option<u64>,
    /// Give up an image's start after S seconds: a local image until its
    /// Swank listens, an --image-launcher until it prints its endpoint;
    /// 1 to 3600.
    #[arg(
        long,
        env = "CL_MCP_IMAGE_START_SECS",
        global = true,
        value_name = "S",
        default_value_t = 120
    )]
    pub image_start_secs: u64,
    /// Cap the processes and threads of a local image and everything it
    /// starts (a cgroup's pids.max, else RLIMIT_NPROC); 0: no cap.
    #[arg(
        long,
        env = "CL_MCP_MAX_PROCESSES",
        global = true,
        value_name = "N",
        default_value_t = crate::image::DEFAULT_MAX_PROCESSES
    )]
    pub max_processes: u32,
    /// Abort a pending debugger (evaluate-lisp with debug) nobody has touched for this many seconds.
    #[arg(
        long,
        env = "CL_MCP_DEBUGGER_IDLE_SECS",
        global = true,
        default_value_t = 600
    )]
    pub debugger_idle_secs: u64,
    /// This server's name in image handles (NODE/NAME~KEY), by which a proxy
    /// in front of several servers routes a call to the node running its
    /// image: letters, digits, `-`, `_`, `.`. Default: the host name (give
    /// each server on one host its own).
    #[arg(long, env = "CL_MCP_NODE_ID", global = true, value_name = "NAME")]
    pub node_id: Option<String>,
    /// Stop an image a stateless (2026-07-28) request started after S
    /// seconds without a call addressed to it (its handle is then lost); 1
    /// to 86400.
    #[arg(
        long,
        env = "CL_MCP_STATELESS_IMAGE_IDLE_SECS",
        global = true,
        value_name = "S",
        default_value_t = crate::config::DEFAULT_STATELESS_IMAGE_IDLE_SECS
    )]
    pub stateless_image_idle_secs: u64,
    /// Longest accepted message line, in bytes.
    #[arg(long, env = "CL_MCP_MAX_MESSAGE_BYTES", global = true, default_value_t = 16 * 1024 * 1024)]
    pub max_message_bytes: usize,
    /// Confine local images (Landlock): `off`, `workspace` (writes only under the
    /// project root, caches and temp dir; no network) or `strict` (reads confined too).
    #[arg(long, env = "CL_MCP_SANDBOX", global = true, default_value = "workspace",
          value_parser = ["off", "workspace", "strict"])]
    pub sandbox: String,
    /// Under --sandbox workspace or strict, also let the image write under DIR. Repeatable.
    #[arg(
        long = "allow-write",
        env = "CL_MCP_ALLOW_WRITE",
        global = true,
        value_name = "DIR",
        value_delimiter = ','
    )]
    pub allow_write: Vec<PathBuf>,
    /// Under --sandbox strict, also let the image read under DIR. Repeatable.
    #[arg(
        long = "allow-read",
        env = "CL_MCP_ALLOW_READ",
        global = true,
        value_name = "DIR",
        value_delimiter = ','
    )]
    pub allow_read: Vec<PathBuf>,
    /// Under --sandbox workspace or strict, let the image use the network freely.
    #[arg(long = "allow-net", env = "CL_MCP_ALLOW_NET", global = true)]
    pub allow_net: bool,
    /// Under --sandbox workspace or strict, let the image open TCP connections to PORT (Landlock filters by port, on any host). Repeatable.
    #[arg(
        long = "allow-connect",
        env = "CL_MCP_ALLOW_CONNECT",
        global = true,
        value_name = "HOST:PORT",
        value_delimiter = ','
    )]
    pub allow_connect: Vec<String>,
    /// Most TCP or HTTP connections served at once; one more is told so and closed.
    #[arg(
        long,
        env = "CL_MCP_MAX_CONNECTIONS",
        global = true,
        default_value_t = 128
    )]
    pub max_connections: usize,
}

/// Why the command line (or its environment variables) describes no
/// server that can run; printed as `cl-mcp-server: <message>`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A path option naming nothing usable.
    #[error("{flag} {}: {source}", path.display())]
    Path {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--project-root {}: not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("--tools: unknown group '{0}' (groups: eval, image, code, asdf, source, fs, debug)")]
    UnknownToolGroup(String),
    #[error("--swank {0}: expected HOST:PORT, e.g. 127.0.0.1:4005")]
    SwankAddress(String),
    #[error("--sandbox {0}: expected off, workspace or strict")]
    SandboxMode(String),
    /// An `--allow-connect` entry the sandbox cannot read.
    #[error("{0}")]
    AllowConnect(String),
    /// A value out of its range, or options that do not go together.
    #[error("{0}")]
    Invalid(&'static str),
}

impl ServerOptions {
    /// The server configuration these options describe. Checked in the
    /// order the options are listed here: the first problem is reported.
    pub fn to_config(&self) -> Result<ServerConfig, ConfigError> {
        let mut config = ServerConfig {
            project_root: self.project_root()?,
            ..ServerConfig::default()
        };
        if let Some(groups) = self.tool_groups()? {
            config.tool_groups = groups;
        }
        self.check_connection_options()?;
        config.max_message_bytes = self.max_message_bytes;
        config.max_connections = self.max_connections;
        config.debugger_idle_secs = self.debugger_idle_secs;
        config.image = self.image_config()?;
        config.shared_image = self.shared_image;
        config.eager_image = !self.lazy_image;
        if let Some(id) = &self.node_id {
            if !crate::config::valid_node_id(id) {
                return Err(ConfigError::Invalid(
                    "--node-id: 1 to 63 letters, digits, `-`, `_` or `.`",
                ));
            }
            config.node_id = id.clone();
        }
        if !(1..=crate::config::MAX_STATELESS_IMAGE_IDLE_SECS)
            .contains(&self.stateless_image_idle_secs)
        {
            return Err(ConfigError::Invalid(
                "--stateless-image-idle-secs: 1 to 86400 (an image nobody may still hold must end)",
            ));
        }
        config.stateless_image_idle =
            std::time::Duration::from_secs(self.stateless_image_idle_secs);
        if self.memory_limit.is_some_and(|m| m < 256) {
            return Err(ConfigError::Invalid(
                "--memory-limit must be at least 256 (MiB): the image itself needs about 100",
            ));
        }
        config.approval_token_fallback = self.approval_fallback == "token";
        config.allow_any_root = self.allow_any_root;
        config.require_approval = self
            .require_approval
            .iter()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        Ok(config)
    }

    /// `--project-root`, canonical, if given.
    fn project_root(&self) -> Result<Option<PathBuf>, ConfigError> {
        let Some(root) = &self.project_root else {
            return Ok(None);
        };
        let canon = root.canonicalize().map_err(|source| ConfigError::Path {
            flag: "--project-root",
            path: root.clone(),
            source,
        })?;
        if !canon.is_dir() {
            return Err(ConfigError::NotADirectory(root.clone()));
        }
        Ok(Some(canon))
    }

    /// `--tools`, if given.
    fn tool_groups(&self) -> Result<Option<Vec<ToolGroup>>, ConfigError> {
        let Some(groups) = &self.tools else {
            return Ok(None);
        };
        let mut parsed = Vec::new();
        for g in groups.iter().filter(|g| !g.trim().is_empty()) {
            let group =
                ToolGroup::parse(g).ok_or_else(|| ConfigError::UnknownToolGroup(g.clone()))?;
            parsed.push(group);
        }
        Ok(Some(parsed))
    }

    /// The message, connection, debugger and `--swank` options' ranges.
    fn check_connection_options(&self) -> Result<(), ConfigError> {
        if self.max_message_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "--max-message-bytes must be at least 1024",
            ));
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Invalid("--max-connections must be at least 1"));
        }
        if self.debugger_idle_secs == 0 {
            return Err(ConfigError::Invalid(
                "--debugger-idle-secs must be at least 1",
            ));
        }
        if self
            .swank
            .as_deref()
            .is_some_and(|addr| !addr.contains(':'))
        {
            return Err(ConfigError::SwankAddress(
                self.swank.clone().unwrap_or_default(),
            ));
        }
        if self.swank.is_none() && self.swank_secret_file.is_some() {
            return Err(ConfigError::Invalid(
                "--swank-secret-file only makes sense with --swank HOST:PORT",
            ));
        }
        Ok(())
    }

    /// `--image-launcher`: `None` for the built-in local launcher, else an
    /// executable file (a bare name is looked up on `PATH` when run).
    fn launcher(&self) -> Result<Option<PathBuf>, ConfigError> {
        let Some(cmd) = self
            .image_launcher
            .as_ref()
            .filter(|c| !c.as_os_str().is_empty())
        else {
            return Ok(None);
        };
        if cmd.as_os_str() == "local" {
            return Ok(None);
        }
        if cmd.components().count() > 1 {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(cmd).map_err(|source| ConfigError::Path {
                flag: "--image-launcher",
                path: cmd.clone(),
                source,
            })?;
            if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
                return Err(ConfigError::Path {
                    flag: "--image-launcher",
                    path: cmd.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        "not an executable file",
                    ),
                });
            }
            // Absolute: the server's working directory is not the image's.
            return Ok(Some(
                std::path::absolute(cmd).unwrap_or_else(|_| cmd.clone()),
            ));
        }
        Ok(Some(cmd.clone()))
    }

    /// The image's configuration: sandbox, Lisp, cache, limits.
    fn image_config(&self) -> Result<crate::image::ImageConfig, ConfigError> {
        use crate::image::sandbox::{parse_connect, SandboxConfig, SandboxMode};
        let mode = SandboxMode::parse(&self.sandbox)
            .ok_or_else(|| ConfigError::SandboxMode(self.sandbox.clone()))?;
        let dirs = |flag: &'static str, v: &[PathBuf]| -> Result<Vec<PathBuf>, ConfigError> {
            v.iter()
                .filter(|d| !d.as_os_str().is_empty())
                .map(|d| {
                    d.canonicalize().map_err(|source| ConfigError::Path {
                        flag,
                        path: d.clone(),
                        source,
                    })
                })
                .collect()
        };
        let sandbox = SandboxConfig {
            mode,
            allow_write: dirs("--allow-write", &self.allow_write)?,
            allow_read: dirs("--allow-read", &self.allow_read)?,
            allow_net: self.allow_net,
            allow_connect: self
                .allow_connect
                .iter()
                .filter(|c| !c.trim().is_empty())
                .map(|c| parse_connect(c).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()
                .map_err(ConfigError::AllowConnect)?,
        };
        let image = crate::image::ImageConfig {
            sandbox,
            lisp: self.lisp.clone(),
            allowed_lisps: dirs("--allow-lisp", &self.allow_lisp)?,
            swank_loader: self.swank_loader.clone(),
            attach: self.swank.clone(),
            attach_secret_file: self.swank_secret_file.clone(),
            launcher: self.launcher()?,
            use_core_cache: !self.no_core_cache,
            cache_dir: self.cache_dir.clone(),
            lisp_runtime_args: self
                .lisp_args
                .iter()
                .filter(|a| !a.is_empty())
                .cloned()
                .collect(),
            memory_limit_mb: self.memory_limit,
            max_processes: (self.max_processes > 0).then_some(self.max_processes),
            idle_timeout: self.image_idle_secs.map(std::time::Duration::from_secs),
            start_timeout: std::time::Duration::from_secs(self.image_start_secs),
            image_quota: self.max_images.map(crate::image::limits::ImageQuota::new),
            ..crate::image::ImageConfig::default()
        };
        if self.max_images == Some(0) {
            return Err(ConfigError::Invalid("--max-images must be at least 1"));
        }
        if !(1..=3600).contains(&self.image_start_secs) {
            return Err(ConfigError::Invalid(
                "--image-start-secs: 1 to 3600 (seconds an image's start may take)",
            ));
        }
        if self.image_idle_secs == Some(0) {
            return Err(ConfigError::Invalid("--image-idle-secs must be at least 1"));
        }
        if self.max_processes != 0 && self.max_processes < 16 {
            return Err(ConfigError::Invalid(
                "--max-processes must be 0 (no cap) or at least 16: the image itself runs \
                 several threads",
            ));
        }
        Ok(image)
    }
}

/// Builds the TCP listen address.
pub fn tcp_addr(host: std::net::IpAddr, port: u16) -> SocketAddr {
    SocketAddr::new(host, port)
}
