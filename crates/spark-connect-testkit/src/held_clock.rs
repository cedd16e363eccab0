//! A paused clock that moves only when the test moves it: for the tests of
//! stall detection and segment deadlines over real loopback sockets.
//!
//! Why: under `start_paused`, tokio advances a paused clock to the next
//! timer whenever the runtime has nothing to run, and that includes the
//! moments when loopback bytes are still on their way between the embedded
//! server and the client: an idle timeout could then fire in the middle of a
//! healthy stream, more or less often depending on the machine. While a
//! `spawn_blocking` task runs, tokio does not auto-advance (docs of
//! `tokio::time::pause`, "Preventing auto-advance"). A [`HeldClock`] keeps
//! one running, so the clock moves only by `tokio::time::advance`, which
//! [`HeldClock::fire`] calls once the client has read everything that will
//! come before the silence. Every wait the client started before that
//! advance ends at the paused start plus its bound, so it fires; every wait
//! started after it ends later, so it cannot: the test sees exactly one
//! timeout, whatever the machine's speed.
//!
//! Needs the feature `test-util` (which turns on tokio's own `test-util`,
//! for `tokio::time::advance`), and a test on a paused clock:
//! `#[tokio::test(start_paused = true)]`, on the current-thread runtime.
//!
//! `fire` takes its conditions as closures, so they can read whatever the
//! test can see: a stream's stats, a server's counters, a count kept by a
//! wrapper around the client's transport.
//!
//! # Example
//!
//! A "client" that waits for a message with an idle timeout of 300 ms, and
//! a server that never sends it: the timeout fires after exactly one move
//! of the clock.
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering};
//! use std::time::Duration;
//!
//! use spark_connect_testkit::held_clock::HeldClock;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let clock = HeldClock::hold();
//! let idle = Duration::from_millis(300);
//! let (waiting, stalled) = (AtomicBool::new(false), AtomicBool::new(false));
//! let client = async {
//!     waiting.store(true, Ordering::SeqCst);
//!     let next = std::future::pending::<()>();
//!     if tokio::time::timeout(idle, next).await.is_err() {
//!         stalled.store(true, Ordering::SeqCst);
//!     }
//! };
//! let ((), advances) = tokio::join!(
//!     client,
//!     clock.fire(
//!         idle,
//!         || waiting.load(Ordering::SeqCst),
//!         || stalled.load(Ordering::SeqCst),
//!     )
//! );
//! clock.release().await;
//! assert_eq!(advances, 1);
//! # }
//! ```

use std::sync::mpsc;
use std::time::Duration;

use tokio::task::JoinHandle;

/// How long a hold lasts at most, in real time: a hung test then gets its
/// auto-advance back, its own (paused) timeouts fire, and
/// [`HeldClock::release`] reports the hang.
pub(crate) const HOLD_LIMIT: Duration = Duration::from_secs(120);

/// How long, in real time, [`HeldClock::fire`] waits for its conditions
/// before it fails the test (a bound for a hang, not a measure of speed).
/// [`HeldClock::wait_for`] has the same bound.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// Scheduler rounds run before and after each advance: each lets every task
/// that can run do so and polls the IO driver once, so bytes already on the
/// loopback are read and the tasks they wake have run.
const SETTLE_ROUNDS: usize = 32;

/// Advances [`HeldClock::fire`] makes at most before it fails the test.
pub(crate) const MAX_ADVANCES: u32 = 4;

/// Holds off tokio's auto-advance of the paused clock while alive (see the
/// module docs). Create it first thing in a
/// `#[tokio::test(start_paused = true)]` test, and
/// [`release`](Self::release) it once the test's streams are done (dropping
/// it gives auto-advance back too, without the check for a hang).
#[derive(Debug)]
#[must_use = "the clock is held only while the HeldClock lives"]
pub struct HeldClock {
    /// Dropped (by [`release`](Self::release) or with the hold) to end the
    /// blocking task.
    stop: Option<mpsc::Sender<()>>,
    /// The blocking task; `true` if it ran out of [`HOLD_LIMIT`].
    holder: Option<JoinHandle<bool>>,
}

impl HeldClock {
    /// Stops auto-advance from now on. The test must run on a paused clock
    /// (`#[tokio::test(start_paused = true)]`): `fire` moves it with
    /// `tokio::time::advance`, which panics otherwise.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn hold() -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let holder = tokio::task::spawn_blocking(move || {
            matches!(
                stopped.recv_timeout(HOLD_LIMIT),
                Err(mpsc::RecvTimeoutError::Timeout)
            )
        });
        HeldClock {
            stop: Some(stop),
            holder: Some(holder),
        }
    }

    /// Makes the client notice a silence of `bound` (its idle timeout or a
    /// segment deadline), and returns the number of advances it took.
    ///
    /// Once `silent` holds (the client has read what comes before the
    /// silence: say, the responses the server sent before its stall), the
    /// other tasks run until they wait, the clock moves by `bound`, and they
    /// run again. Done when `noticed` holds (the client counted the stall or
    /// the deadline: a count the client's own task sets when its timer
    /// fires, such as its stream stats, not one that needs more IO). If it
    /// does not, bytes were still on their way when the
    /// clock moved, the client read them after, and its new wait ends one
    /// `bound` later: the clock moves again, once the client waits. With a
    /// `silent` that names everything the client reads, one advance is
    /// certain.
    ///
    /// Both conditions are plain closures, so they may read anything the
    /// test can see; `noticed` should not need more IO than the timer's own
    /// task does (a count set where the client's timer fires, or where its
    /// next request is handed to the transport), or a slow loopback costs
    /// an advance.
    ///
    /// # Panics
    ///
    /// After 4 advances without `noticed`, if `silent` does
    /// not hold within 30 s of real time, or if the clock is not paused.
    pub async fn fire(
        &self,
        bound: Duration,
        mut silent: impl FnMut() -> bool,
        mut noticed: impl FnMut() -> bool,
    ) -> u32 {
        for advances in 1..=MAX_ADVANCES {
            until("the client read what came before the silence", &mut silent).await;
            settle().await;
            tokio::time::advance(bound).await;
            settle().await;
            if noticed() {
                return advances;
            }
        }
        panic!("the client did not notice a silence of {bound:?} after {MAX_ADVANCES} advances");
    }

    /// Runs the other tasks (and the IO driver), the clock still, until
    /// `cond` holds; fails the test naming `what` after 30 s of
    /// real time.
    pub async fn wait_for(&self, what: &str, mut cond: impl FnMut() -> bool) {
        until(what, &mut cond).await;
    }

    /// Gives auto-advance back; fails the test if the hold ran out (the
    /// test hung for 120 s).
    ///
    /// # Panics
    ///
    /// If the hold ran out, or its blocking task panicked.
    pub async fn release(mut self) {
        drop(self.stop.take());
        let holder = self.holder.take().expect("released once");
        let ran_out = holder.await.expect("the clock's holder");
        assert!(
            !ran_out,
            "the clock was held for {HOLD_LIMIT:?}: the test hung"
        );
    }
}

/// Runs the other tasks (and the IO driver) until `cond` holds; panics
/// naming `what` after 30 s of real time.
async fn until(what: &str, cond: &mut impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT_LIMIT, "never happened: {what}");
        tokio::task::yield_now().await;
    }
}

/// [`SETTLE_ROUNDS`] scheduler rounds.
async fn settle() {
    for _ in 0..SETTLE_ROUNDS {
        tokio::task::yield_now().await;
    }
}
