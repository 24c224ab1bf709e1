//! The protocol engine: JSON-RPC 2.0 and the MCP lifecycle, for both protocol
//! eras. It consumes message text and produces message text through an
//! [`Outbound`] channel; it knows nothing about the transport carrying them.

pub mod approval;
pub mod engine;
pub mod jsonrpc;
pub mod mcp;

pub use engine::{Connection, Engine, Outbound};
