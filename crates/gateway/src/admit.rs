//! Admission: a per-class concurrency limit with a bounded, first-come-first-served wait queue.
//!
//! A request takes a slot at once when one is free. Otherwise it joins the queue when fewer than
//! `queue` requests wait, and waits at most `queue_timeout`. Refusals, with `Retry-After`:
//! * queue full → **429 Too Many Requests** (the client is asking faster than the class is
//!   allowed to run; back off);
//! * queue timeout → **503 Service Unavailable** (the class is saturated for longer than a
//!   request should wait).
//!
//! Every wait that ends in a slot, in a queue timeout or in the client leaving the queue is
//! observed in `headroom_gateway_queue_seconds`; a queue-full refusal, which never waited, is
//! not ([`crate::metrics::QueueWait`]).
//!
//! A request takes as many slots as it runs sequences ([`crate::classify::RequestFacts::sequences`]:
//! prompts of a batch × `n`), so the limit counts what the engine runs, not HTTP requests; one
//! wider than the whole limit could never be admitted and is refused at once (400).
//!
//! The slot is held until the response ends (stream end, error or client disconnect). This is
//! the decision table's first corrective action for admission saturation: cap what reaches the
//! engine per class so one class cannot fill its queue for the others.

use crate::config::Concurrency;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One class's limiter.
#[derive(Debug)]
pub struct Limiter {
    sem: Arc<Semaphore>,
    waiting: AtomicUsize,
    cfg: Concurrency,
    in_flight: Gauge,
    queued: Gauge,
}

/// A held slot; dropping it frees the slot.
#[derive(Debug)]
pub struct Slot {
    _permit: Option<OwnedSemaphorePermit>,
    /// The class's in-flight gauge and the sequences this slot holds.
    in_flight: Option<(Gauge, u32)>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((g, n)) = &self.in_flight {
            g.dec_by(i64::from(*n));
        }
    }
}

impl Slot {
    /// A slot of an unlimited class.
    pub fn unlimited() -> Slot {
        Slot {
            _permit: None,
            in_flight: None,
        }
    }
}

/// Why admission refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The wait queue was full: answer 429.
    QueueFull {
        /// `Retry-After`, seconds.
        retry_after_s: u64,
    },
    /// The request asks for more sequences than the class's whole limit: answer 400.
    TooWide {
        /// The class's limit.
        limit: usize,
        /// The sequences asked for.
        sequences: u64,
    },
    /// The request waited `queue_timeout` without a slot: answer 503.
    QueueTimeout {
        /// `Retry-After`, seconds.
        retry_after_s: u64,
        /// How long it waited.
        waited: Duration,
    },
}

impl Limiter {
    /// A limiter for `cfg`, reporting into the class's `in_flight` and `queued` gauges.
    pub fn new(cfg: Concurrency, in_flight: Gauge, queued: Gauge) -> Limiter {
        Limiter {
            sem: Arc::new(Semaphore::new(cfg.limit)),
            waiting: AtomicUsize::new(0),
            cfg,
            in_flight,
            queued,
        }
    }

    /// Takes `sequences` slots, waiting in the queue if needed. Returns the slot and the time
    /// queued.
    ///
    /// # Errors
    /// [`Refusal`] when the request is wider than the limit, the queue is full or the wait
    /// timed out.
    pub async fn admit(&self, sequences: u64) -> Result<(Slot, Duration), Refusal> {
        let n = match u32::try_from(sequences) {
            Ok(n) if n as usize <= self.cfg.limit => n.max(1),
            _ => {
                return Err(Refusal::TooWide {
                    limit: self.cfg.limit,
                    sequences,
                });
            }
        };
        let slot = |p| {
            self.in_flight.inc_by(i64::from(n));
            Slot {
                _permit: Some(p),
                in_flight: Some((self.in_flight.clone(), n)),
            }
        };
        if let Ok(p) = self.sem.clone().try_acquire_many_owned(n) {
            return Ok((slot(p), Duration::ZERO));
        }
        let retry_after_s = self.cfg.retry_after_s;
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.cfg.queue {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::QueueFull { retry_after_s });
        }
        self.queued.inc();
        let _leave = Leave(self);
        let t0 = Instant::now();
        match tokio::time::timeout(
            self.cfg.queue_timeout,
            self.sem.clone().acquire_many_owned(n),
        )
        .await
        {
            Ok(Ok(p)) => Ok((slot(p), t0.elapsed())),
            // The semaphore is never closed; treat it like a timeout if it were.
            _ => Err(Refusal::QueueTimeout {
                retry_after_s,
                waited: t0.elapsed(),
            }),
        }
    }
}

/// Leaves the queue on every path, including cancellation of the waiting future.
struct Leave<'a>(&'a Limiter);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
        self.0.queued.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(limit: usize, queue: usize, ms: u64) -> Limiter {
        Limiter::new(
            Concurrency {
                limit,
                queue,
                queue_timeout: Duration::from_millis(ms),
                retry_after_s: 3,
            },
            Gauge::default(),
            Gauge::default(),
        )
    }

    #[tokio::test]
    async fn limit_queue_and_timeout() {
        let l = Arc::new(limiter(2, 1, 100));
        let (a, wa) = l.admit(1).await.unwrap();
        let (_b, _) = l.admit(1).await.unwrap();
        assert_eq!(wa, Duration::ZERO);
        assert_eq!(l.in_flight.get(), 2);
        // Third waits in the queue; fourth finds the queue full.
        let l2 = l.clone();
        let waiter = tokio::spawn(async move { l2.admit(1).await.map(|(_, w)| w) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(l.queued.get(), 1);
        assert_eq!(
            l.admit(1).await.unwrap_err(),
            Refusal::QueueFull { retry_after_s: 3 }
        );
        // Freeing a slot admits the waiter, which waited about 20 ms.
        drop(a);
        let waited = waiter.await.unwrap().unwrap();
        assert!(waited >= Duration::from_millis(15), "{waited:?}");
        assert_eq!(l.queued.get(), 0);
        // With both slots busy again, a queued request times out after 100 ms.
        let (_c, _) = l.admit(1).await.unwrap();
        match l.admit(1).await.unwrap_err() {
            Refusal::QueueTimeout {
                retry_after_s,
                waited,
            } => {
                assert_eq!(retry_after_s, 3);
                assert!(waited >= Duration::from_millis(100), "{waited:?}");
            }
            e => panic!("{e:?}"),
        }
        assert_eq!(l.waiting.load(Ordering::Acquire), 0);
    }

    /// A request takes one slot per sequence; one wider than the limit is refused at once.
    #[tokio::test]
    async fn sequences_take_slots() {
        let l = limiter(4, 0, 100);
        let (a, _) = l.admit(3).await.unwrap();
        assert_eq!(l.in_flight.get(), 3);
        assert_eq!(
            l.admit(2).await.unwrap_err(),
            Refusal::QueueFull { retry_after_s: 3 }
        );
        let (b, _) = l.admit(1).await.unwrap();
        assert_eq!(l.in_flight.get(), 4);
        drop((a, b));
        assert_eq!(l.in_flight.get(), 0);
        for n in [5, u64::from(u32::MAX) + 1] {
            assert_eq!(
                l.admit(n).await.unwrap_err(),
                Refusal::TooWide {
                    limit: 4,
                    sequences: n
                }
            );
        }
        let (_all, _) = l.admit(4).await.unwrap();
        assert_eq!(l.in_flight.get(), 4);
    }

    #[tokio::test]
    async fn cancelled_waiter_leaves_the_queue() {
        let l = Arc::new(limiter(1, 1, 10_000));
        let (_a, _) = l.admit(1).await.unwrap();
        let l2 = l.clone();
        let w = tokio::spawn(async move {
            let _ = l2.admit(1).await;
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(l.queued.get(), 1);
        w.abort();
        let _ = w.await;
        assert_eq!(l.queued.get(), 0);
        assert_eq!(l.waiting.load(Ordering::Acquire), 0);
    }
}
