//! What the HTTP transport keeps: its options, the legacy sessions by
//! `Mcp-Session-Id`, the shared stateless session, the body budget.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::budget::BodyBudget;
use crate::protocol::{Connection, Engine};
use crate::session::Session;
use crate::sync::MutexExt;

/// Settings of the HTTP transport.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub bind: SocketAddr,
    /// Required bearer token, if any.
    pub token: Option<String>,
    /// Extra allowed `Origin` values (loopback origins are always allowed).
    pub allowed_origins: Vec<String>,
    /// Extra allowed `Host` names (loopback names and the bind address are
    /// always allowed).
    pub allowed_hosts: Vec<String>,
    /// A legacy session idle this long is forgotten (404 afterwards).
    pub session_idle: Duration,
    /// A connection's request headers must all arrive within this (counted
    /// from when the server starts waiting for them); else it is closed.
    pub header_timeout: Duration,
    /// A request's body must all arrive within this after its headers.
    pub body_timeout: Duration,
}

pub(super) struct Sessions {
    pub(super) by_id: HashMap<String, (Connection, Instant)>,
}

pub(super) struct HttpState {
    pub(super) engine: Arc<Engine>,
    pub(super) options: HttpOptions,
    pub(super) sessions: Mutex<Sessions>,
    /// The one session stateless requests share (project root, image).
    pub(super) stateless: Arc<Session>,
    /// Bytes of request bodies being received, across all connections.
    pub(super) bodies: Arc<BodyBudget>,
}

impl HttpState {
    pub(super) fn session(&self, id: &str) -> Option<Connection> {
        let mut s = self.sessions.guard();
        let entry = s.by_id.get_mut(id)?;
        entry.1 = Instant::now();
        Some(entry.0.clone())
    }
}
