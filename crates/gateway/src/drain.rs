//! The end of a drain: on SIGTERM or Ctrl-C the gateway refuses new connections and lets open
//! requests finish for `timeouts.drain`; the bodies still open then are told to end, so a
//! stream gets an SSE error event instead of a connection cut mid-chunk.
//!
//! Each forwarded body holds a [`DrainWatch`]. Checking it costs one atomic load per poll; the
//! body's task waker is registered (one lock) when the body first waits and again only if the
//! waker changes, and unregistered when the body is dropped, so [`Drain::end`] can wake every
//! body that is waiting for its upstream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

/// The gateway-wide drain state.
#[derive(Debug, Default)]
pub struct Drain {
    over: AtomicBool,
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, Waker>>,
}

impl Drain {
    /// A watch for one body.
    pub fn watch(self: &Arc<Self>) -> DrainWatch {
        DrainWatch {
            drain: self.clone(),
            key: self.next.fetch_add(1, Ordering::Relaxed),
            waker: None,
        }
    }

    /// Ends the drain: every body still open ends at its next poll, and the waiting ones are
    /// woken for it.
    pub fn end(&self) {
        self.over.store(true, Ordering::SeqCst);
        let waiting = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|e| e.into_inner()));
        for w in waiting.into_values() {
            w.wake();
        }
    }

    /// Whether [`Drain::end`] was called.
    pub fn is_over(&self) -> bool {
        self.over.load(Ordering::SeqCst)
    }
}

/// One body's view of the [`Drain`].
#[derive(Debug)]
pub struct DrainWatch {
    drain: Arc<Drain>,
    key: u64,
    waker: Option<Waker>,
}

impl DrainWatch {
    /// Whether the drain is over; if not, the task will be woken when it ends. Call where the
    /// body is about to return `Pending`.
    pub fn poll_over(&mut self, cx: &mut Context<'_>) -> bool {
        if self.drain.is_over() {
            return true;
        }
        if self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return false;
        }
        let w = cx.waker().clone();
        self.drain
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.key, w.clone());
        self.waker = Some(w);
        // `end` may have emptied the map just before the insert: it set the flag first.
        self.drain.is_over()
    }

    /// Whether the drain is over (for a body that is not about to wait).
    #[inline]
    pub fn is_over(&self) -> bool {
        self.drain.is_over()
    }
}

impl Drop for DrainWatch {
    fn drop(&mut self) {
        if self.waker.is_some() {
            self.drain
                .waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn end_wakes_each_waiting_body_once_and_dropped_ones_not_at_all() {
        let d = Arc::new(Drain::default());
        let counts: Vec<Arc<Count>> = (0..3)
            .map(|_| Arc::new(Count(AtomicUsize::new(0))))
            .collect();
        let mut watches: Vec<DrainWatch> = (0..3).map(|_| d.watch()).collect();
        for (w, c) in watches.iter_mut().zip(&counts) {
            let waker = Waker::from(c.clone());
            let mut cx = Context::from_waker(&waker);
            assert!(!w.poll_over(&mut cx));
            assert!(!w.poll_over(&mut cx), "same waker: registered once");
        }
        assert_eq!(d.waiting.lock().unwrap().len(), 3);
        drop(watches.pop());
        assert_eq!(
            d.waiting.lock().unwrap().len(),
            2,
            "a dropped body unregisters"
        );
        d.end();
        let woken: Vec<usize> = counts.iter().map(|c| c.0.load(Ordering::SeqCst)).collect();
        assert_eq!(woken, [1, 1, 0]);
        let waker = Waker::from(counts[0].clone());
        assert!(watches[0].poll_over(&mut Context::from_waker(&waker)));
        assert!(d.watch().is_over());
    }
}
