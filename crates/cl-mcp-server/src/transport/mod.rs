//! Transports carry message text between a client and the protocol engine.

pub mod http;
pub mod lines;
pub mod listen;
pub mod stdio;
pub mod tcp;
