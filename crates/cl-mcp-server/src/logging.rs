//! Structured JSON logs on stderr, never stdout.

use tracing_subscriber::EnvFilter;

/// Installs the stderr JSON logger. `level` is `debug|info|warn|error`
/// (`MCP_LOG_LEVEL`); anything else falls back to `info` with a warning.
pub fn init(level: &str) {
    let known = matches!(level, "debug" | "info" | "warn" | "error" | "trace");
    let filter = EnvFilter::new(if known { level } else { "info" });
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_current_span(false)
        .try_init();
    if !known {
        tracing::warn!(
            value = level,
            "MCP_LOG_LEVEL must be debug, info, warn or error; using info"
        );
    }
    // A panic becomes one log line, not a multi-line dump.
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let payload = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        tracing::error!(%location, message = %payload, "panic");
    }));
}
