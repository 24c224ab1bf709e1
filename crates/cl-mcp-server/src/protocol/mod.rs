//! The protocol engine: JSON-RPC 2.0 and the MCP lifecycle, for both protocol
//! eras. It consumes message text and produces message text through an
//! [`Outbound`] channel; it knows nothing about the transport carrying them.

pub mod approval;
pub mod engine;
pub mod input;
pub mod jsonrpc;
pub mod mcp;
pub mod outbound;
pub mod tasks;
pub mod uri;

pub use engine::{Connection, Engine, Outbound};

/// 128 random bits from the OS as hex: session ids, approval tokens.
pub fn random_token() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom is readable");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
