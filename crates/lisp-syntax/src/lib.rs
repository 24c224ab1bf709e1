//! Reading Common Lisp text.
//!
//! Two readers live here, for two jobs:
//! - [`cst`]: a lossless concrete syntax tree of source files (every byte in
//!   exactly one node), for the structural source tools.
//! - [`data`]: Lisp data as values (lists, symbols, strings, numbers), for
//!   reading what Swank sends back.
//!
//! [`repair`] places the closing parentheses of text that does not read from
//! its indentation (parinfer's indent mode, for Common Lisp on [`cst`]).

#![forbid(unsafe_code)]

pub mod cst;
pub mod data;
pub mod depth;
pub mod repair;
pub use depth::nesting_depth;
