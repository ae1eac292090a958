//! Time as a trait, so that expiry can be tested with a clock the test controls.

use bson::DateTime;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of "now".
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> DateTime;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime {
        DateTime::now()
    }
}

/// A clock that only moves when told to.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock standing at `t`.
    pub fn new(t: DateTime) -> ManualClock {
        ManualClock(AtomicI64::new(t.timestamp_millis()))
    }
    /// Moves the clock to `t`.
    pub fn set(&self, t: DateTime) {
        self.0.store(t.timestamp_millis(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime {
        DateTime::from_millis(self.0.load(Ordering::SeqCst))
    }
}
