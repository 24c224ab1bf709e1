//! The `cl-mcp-server` binary: wires the command line to the transports.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use serde_json::{Map, Value};

use cl_mcp_server::cli::{tcp_addr, Cli, Command};
use cl_mcp_server::protocol::Engine;
use cl_mcp_server::tools::ToolContext;
use cl_mcp_server::transport;

fn main() -> ExitCode {
    let cli = Cli::parse();
    cl_mcp_server::logging::init(&cli.options.log_level);
    let config = match cli.options.to_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cl-mcp-server: {e}");
            return ExitCode::from(2);
        }
    };
    let known = cl_mcp_server::tools::ToolRegistry::standard(&cl_mcp_server::tools::ToolGroup::ALL);
    if let Some(bad) = config
        .require_approval
        .iter()
        .find(|t| known.get(t).is_none())
    {
        let names: Vec<&str> = known.list().map(|t| t.name).collect();
        eprintln!(
            "cl-mcp-server: --require-approval: unknown tool '{bad}'. Tools: {}",
            names.join(", ")
        );
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match cli.command.unwrap_or(Command::Stdio) {
        Command::Stdio => {
            let stdout = match protocol_stdout() {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("cl-mcp-server: cannot set up stdout: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let engine = Engine::new(config);
            runtime.block_on(async {
                transport::stdio::serve(engine, stdout).await;
                cl_mcp_server::image::end_launchers().await;
            });
            runtime.shutdown_timeout(std::time::Duration::from_millis(200));
            ExitCode::SUCCESS
        }
        Command::Tcp { port, host } => runtime.block_on(ending_launchers(async {
            let engine = Engine::new(config);
            match transport::tcp::bind(tcp_addr(host, port)).await {
                Ok(listener) => {
                    let addr = listener.local_addr().ok();
                    tracing::info!(addr = ?addr, "listening (tcp)");
                    eprintln!(
                        "cl-mcp-server: listening on tcp {}",
                        addr.map(|a| a.to_string()).unwrap_or_default()
                    );
                    if let Err(e) = transport::tcp::serve(engine, listener).await {
                        eprintln!("cl-mcp-server: tcp: {e}");
                        return ExitCode::FAILURE;
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("cl-mcp-server: cannot listen on {host}:{port}: {e}");
                    ExitCode::FAILURE
                }
            }
        })),
        Command::Http {
            bind,
            token,
            allow_origins,
            allow_hosts,
            session_idle_secs,
            header_timeout_secs,
            body_timeout_secs,
        } => runtime.block_on(ending_launchers(async {
            let engine = Engine::new(config);
            let options = transport::http::HttpOptions {
                bind,
                token,
                allowed_origins: allow_origins,
                allowed_hosts: allow_hosts,
                session_idle: std::time::Duration::from_secs(session_idle_secs),
                header_timeout: std::time::Duration::from_secs(header_timeout_secs.max(1)),
                body_timeout: std::time::Duration::from_secs(body_timeout_secs.max(1)),
            };
            let listener = match tokio::net::TcpListener::bind(bind).await {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("cl-mcp-server: cannot listen on {bind}: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let addr = listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            tracing::info!(%addr, "listening (http)");
            eprintln!("cl-mcp-server: listening on http://{addr}/mcp");
            if let Err(e) = transport::http::serve(engine, options, listener).await {
                eprintln!("cl-mcp-server: http: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        })),
        Command::Doctor => runtime.block_on(ending_launchers(cl_mcp_server::doctor::run(
            Engine::new(config),
        ))),
        Command::Call { tool, args, json } => runtime.block_on(ending_launchers(call(
            config,
            &tool,
            &args,
            json.as_deref(),
        ))),
    }
}

/// Runs the server's work, then ends the image launchers still running
/// (and what they started) before the runtime goes.
async fn ending_launchers(work: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    let code = work.await;
    cl_mcp_server::image::end_launchers().await;
    code
}

/// Takes fd 1 for the protocol and points fd 1 at stderr, so nothing else in
/// this process (a library's println!, a child that inherits stdout) can put
/// non-protocol text on the protocol stream.
fn protocol_stdout() -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    std::io::stdout().flush()?;
    // SAFETY: plain fd duplication on fds this process owns.
    let private = unsafe { libc::dup(1) };
    if private < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fcntl(2) and dup2(2) on descriptors this process owns.
    unsafe {
        libc::fcntl(private, libc::F_SETFD, libc::FD_CLOEXEC);
        if libc::dup2(2, 1) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: `private` is a fresh fd we own exclusively.
    let file = unsafe { std::fs::File::from_raw_fd(private) };
    Ok(file)
}

async fn call(
    config: cl_mcp_server::config::ServerConfig,
    tool: &str,
    args: &[String],
    json: Option<&str>,
) -> ExitCode {
    let mut arguments = match json {
        None => Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                eprintln!("cl-mcp-server call: --json must be a JSON object");
                return ExitCode::from(2);
            }
            Err(e) => {
                eprintln!("cl-mcp-server call: --json is not valid JSON: {e}");
                return ExitCode::from(2);
            }
        },
    };
    for a in args {
        let Some((k, v)) = a.split_once('=') else {
            eprintln!("cl-mcp-server call: --arg needs KEY=VALUE, got '{a}'");
            return ExitCode::from(2);
        };
        let value =
            serde_json::from_str::<Value>(v).unwrap_or_else(|_| Value::String(v.to_string()));
        arguments.insert(k.to_string(), value);
    }
    let engine = Engine::new(config);
    let Some(def) = engine.tools.get(tool) else {
        let names: Vec<&str> = engine.tools.list().map(|t| t.name).collect();
        eprintln!(
            "cl-mcp-server call: unknown tool '{tool}'. Tools: {}",
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    let session = engine.new_session();
    let ctx = ToolContext::new(session, tokio_util::sync::CancellationToken::new());
    let out = def.call(Value::Object(arguments), ctx).await;
    println!("{}", out.text);
    if let Some(s) = &out.structured {
        eprintln!("{}", serde_json::to_string(s).unwrap_or_default());
    }
    if out.is_error {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
