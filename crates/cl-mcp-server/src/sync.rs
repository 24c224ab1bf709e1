//! Lock poisoning, handled in one place.
//!
//! A lock is poisoned when a thread panicked while holding it. Every panic
//! in this server is caught and answered (a request's `-32603`), and no
//! guarded state is left half-updated by a panic in a way later readers
//! could trip on (the data is replaced whole or appended to), so a poisoned
//! lock is used as it is rather than spreading the panic to every later
//! request.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `Mutex::lock` that takes a poisoned lock as it is.
pub trait MutexExt<T> {
    fn guard(&self) -> MutexGuard<'_, T>;
}

impl<T> MutexExt<T> for Mutex<T> {
    fn guard(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `RwLock::read`/`write` that take a poisoned lock as it is.
pub trait RwLockExt<T> {
    fn reading(&self) -> RwLockReadGuard<'_, T>;
    fn writing(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockExt<T> for RwLock<T> {
    fn reading(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|e| e.into_inner())
    }
    fn writing(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_still_usable() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.lock().is_err());
        *m.guard() += 1;
        assert_eq!(*m.guard(), 2);
        let rw = RwLock::new(3);
        *rw.writing() += 1;
        assert_eq!(*rw.reading(), 4);
    }
}
