//! The server-wide budget of request bodies being received (503 past it).

/// A server-wide bound on request bodies held in memory while they arrive:
/// the larger of 64 MiB and one `--max-message-bytes` body. A body that
/// would pass it is answered 503, so slow or stalled uploads cannot add up.
pub(super) struct BodyBudget {
    pub(super) held: std::sync::atomic::AtomicUsize,
    pub(super) max: usize,
}

impl BodyBudget {
    pub(super) fn new(max_message_bytes: usize) -> BodyBudget {
        BodyBudget {
            held: Default::default(),
            max: max_message_bytes.max(64 * 1024 * 1024),
        }
    }
}

/// What one body holds of the [`BodyBudget`]; given back when dropped.
pub(super) struct BodyShare<'a> {
    pub(super) budget: &'a BodyBudget,
    pub(super) held: usize,
}

impl BodyShare<'_> {
    pub(super) fn grow(&mut self, n: usize) -> bool {
        use std::sync::atomic::Ordering;
        let before = self.budget.held.fetch_add(n, Ordering::AcqRel);
        if before + n > self.budget.max {
            self.budget.held.fetch_sub(n, Ordering::AcqRel);
            return false;
        }
        self.held += n;
        true
    }
}

impl Drop for BodyShare<'_> {
    fn drop(&mut self) {
        self.budget
            .held
            .fetch_sub(self.held, std::sync::atomic::Ordering::AcqRel);
    }
}
