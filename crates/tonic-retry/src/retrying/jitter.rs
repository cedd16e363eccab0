//! The random numbers that spread the waits.
//!
//! Why a type: clients that fail together must not retry together, so
//! every wait is jittered; and a test, or a driver that shares one source
//! between loops, needs the sequence to be seedable. `Jitter` is one
//! shared, seedable generator.

use std::fmt;
use std::sync::{Arc, Mutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A shared, seedable source of jitter.
#[derive(Clone)]
pub(crate) struct Jitter {
    rng: Arc<Mutex<StdRng>>,
}

impl fmt::Debug for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Jitter")
    }
}

impl Jitter {
    /// Seeded from the OS.
    pub(super) fn from_entropy() -> Self {
        Jitter {
            rng: Arc::new(Mutex::new(StdRng::from_os_rng())),
        }
    }
    /// Deterministic.
    pub(super) fn seeded(seed: u64) -> Self {
        Jitter {
            rng: Arc::new(Mutex::new(StdRng::seed_from_u64(seed))),
        }
    }
    /// A uniform sample in `[0, 1)`.
    pub(super) fn sample(&self) -> f64 {
        self.rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .random::<f64>()
    }
}
