//! Image handles: how a client names one image across requests and across
//! the servers behind a proxy, `NODE/NAME~KEY` (`node-a/sbcl-2~5f0c…`).
//! `NODE` is the server's `--node-id` (what a proxy routes
//! `Mcp-Param-Image` by), `NAME` the image's name in its session, `KEY` 96
//! random bits minted with the image: a stateless request has no session
//! to scope names by, so knowing a handle is what lets a client use an
//! image, and one client cannot guess another's.

use std::io::Read;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sync::MutexExt;

/// A parsed image handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageHandle {
    pub node: String,
    pub name: String,
    pub key: String,
}

impl ImageHandle {
    /// Reads `NODE/NAME~KEY`; `None` when `text` has not that shape.
    pub fn parse(text: &str) -> Option<ImageHandle> {
        let (node, rest) = text.split_once('/')?;
        let (name, key) = rest.split_once('~')?;
        let ok = crate::config::valid_node_id(node)
            && super::images::valid_name(name)
            && !key.is_empty()
            && key.chars().all(|c| c.is_ascii_hexdigit());
        ok.then(|| ImageHandle {
            node: node.into(),
            name: name.into(),
            key: key.into(),
        })
    }

    /// Whether `key` is this handle's key (compared in constant time: a
    /// key is a secret).
    pub fn key_is(&self, key: &str) -> bool {
        let (a, b) = (self.key.as_bytes(), key.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl std::fmt::Display for ImageHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}~{}", self.node, self.name, self.key)
    }
}

/// A fresh handle key: 12 bytes of `/dev/urandom` in hex.
pub fn new_key() -> std::io::Result<String> {
    let mut bytes = [0u8; 12];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// How an image is used by calls: how many are running on it and when the
/// last one ended, for the idle timeout of images started statelessly;
/// and the image generation its handle was minted for (a handle outlives
/// no image: a death or a stop loses it).
#[derive(Debug)]
pub struct ImageUsage {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
    /// The highest generation seen running (0: not up yet).
    generation: AtomicU64,
}

impl Default for ImageUsage {
    fn default() -> Self {
        ImageUsage {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
            generation: AtomicU64::new(0),
        }
    }
}

impl ImageUsage {
    /// A call starts on the image: it counts as busy until the guard drops.
    pub fn enter(self: &Arc<Self>) -> UsageGuard {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        UsageGuard(self.clone())
    }

    /// Whether no call ran on the image for `idle` and none runs now.
    pub fn idle_for(&self, idle: Duration) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0 && self.last.guard().elapsed() >= idle
    }

    /// Records the generation running now (0: none runs); true when the
    /// image that ran before is gone (it was up and none runs now).
    pub fn gone_since_seen(&self, running: u64) -> bool {
        let seen = self.generation.fetch_max(running, Ordering::SeqCst);
        running == 0 && seen > 0
    }
}

/// Marks one call on an image (see [`ImageUsage::enter`]).
pub struct UsageGuard(Arc<ImageUsage>);

impl Drop for UsageGuard {
    fn drop(&mut self) {
        *self.0.last.guard() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_read_back() {
        let h = ImageHandle {
            node: "node-a".into(),
            name: "sbcl-2".into(),
            key: new_key().unwrap(),
        };
        assert_eq!(h.key.len(), 24);
        assert_eq!(ImageHandle::parse(&h.to_string()), Some(h.clone()));
        assert!(h.key_is(&h.key.clone()));
        assert!(!h.key_is("00"));
        for bad in [
            "sbcl",
            "node-a/sbcl",
            "a/b~",
            "a/b~xyz",
            "a b/c~00",
            "/c~00",
            "a/~00",
        ] {
            assert_eq!(ImageHandle::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn usage_counts_calls_and_losses() {
        let u = Arc::new(ImageUsage::default());
        let g = u.enter();
        assert!(!u.idle_for(Duration::ZERO));
        drop(g);
        assert!(u.idle_for(Duration::ZERO));
        assert!(!u.idle_for(Duration::from_secs(60)));
        assert!(!u.gone_since_seen(0), "never up: not lost");
        assert!(!u.gone_since_seen(1));
        assert!(!u.gone_since_seen(2), "restarted by a call: still there");
        assert!(u.gone_since_seen(0));
    }
}
