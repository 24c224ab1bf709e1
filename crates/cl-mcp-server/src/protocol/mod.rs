//! The protocol engine: JSON-RPC 2.0 and the MCP lifecycle, for both protocol
//! eras. It consumes message text and produces message text through an
//! [`Outbound`] channel; it knows nothing about the transport carrying them.
//!
//! From the bottom up: `jsonrpc`, `error` and `era` (the vocabulary every
//! other module speaks), `outbound`, `input_state`, `approval_tokens`,
//! `tasks`; `engine` (the server), `request` (a connection's state and a
//! running request), `input` and `approval`; `methods` (the method table
//! and a handler per family); `connection` on top, which the transports
//! drive.

pub mod approval;
pub mod approval_tokens;
pub mod connection;
pub mod engine;
pub mod era;
pub mod error;
pub mod input;
pub mod input_state;
pub mod jsonrpc;
mod methods;
pub mod outbound;
pub mod request;
pub mod tasks;
pub use crate::uri;

pub use connection::Connection;
pub use engine::Engine;
pub use outbound::Outbound;

/// 128 random bits from the OS as hex: session ids, approval tokens.
pub fn random_token() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom is readable");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
