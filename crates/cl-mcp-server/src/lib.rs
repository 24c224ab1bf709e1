//! cl-mcp-server: an MCP server that gives AI agents a live Common Lisp
//! environment. See ARCHITECTURE.md for the map.
//!
//! Data flows one way: transport → protocol → tool → (image | files) and back.

pub mod cli;
pub mod config;
pub mod doctor;
pub mod fixtures;
pub mod image;
pub mod logging;
pub mod prompts;
pub mod protocol;
pub mod resources;
pub mod session;
pub mod sync;
pub mod tools;
pub mod transport;
pub mod uri;
