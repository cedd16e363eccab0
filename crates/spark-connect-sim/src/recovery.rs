//! The recovery property: once a fault has healed, each query makes
//! progress again within a bound derived from the client's own settings,
//! and while nothing is wrong it is never silent for longer than that.
//!
//! *Why:* the other properties are kept by a client that recovers
//! *eventually*. One that never notices a dead connection until HTTP/2
//! keepalive closes it (60 s + 20 s), or whose retry budget, never restored
//! by progress, makes it wait a minute after a fault that a correct client
//! answers in 50 ms, still ends exact within the 600 s limit. What the
//! client promises is sooner than that: its stall detection (the idle
//! timeout) gives up on a silent segment, a delivered response restores
//! its retry budget, and its backoff follows the policy. Those settings
//! give a bound, and simulated time can hold the client to it.
//!
//! # The bound
//!
//! Everything in it is read from the options the simulation's clients are
//! built with ([`Bound::of_clients`]):
//!
//! * **detection**: how long a dead connection can keep a query silent.
//!   The reattach layer's idle timeout (`ReattachOptions::default()`, 10 s)
//!   where a stall reattaches over a freshly dialled connection (the
//!   session's own link). Over a plain tonic channel (the stub's link, and
//!   the guard's upstream) a reattach after a stall goes down the same
//!   connection: a connection that a partition left without its lost
//!   segments (turmoil does not retransmit) stays dead until HTTP/2
//!   keepalive closes it, so there it is the keepalive's interval plus its
//!   timeout ([`net::KEEPALIVE_INTERVAL`], [`net::KEEPALIVE_TIMEOUT`]).
//!   The same holds for a query whose stream is not open yet: the
//!   session's `sql()` makes unary calls first (its `Config`), which have
//!   no stall detection, so a partition or a crash that catches one is
//!   noticed by keepalive only.
//! * **the wait in progress**: a client may be sleeping out a backoff when
//!   the fault heals. Failures begin no earlier than the fault, and the
//!   `j`-th retry of a run comes at least the policy's first `j - 1` waits
//!   (no jitter) after the first failure; so at the heal the client sleeps
//!   at most the `J`-th wait, jitter included, for the largest `J` that fits
//!   ([`Bound::wait_at`]). PySpark's policy: 50 ms, 200 ms, 800 ms, 3.2 s,
//!   12.8 s, 51.2 s, then 60 s, each at most 500 ms more with jitter.
//! * **a margin** of 5 s: round trips (up to 300 ms a message after a
//!   latency fault), dialling and the HTTP/2 handshake, the guard's hop.
//!
//! # The property
//!
//! A query's time, from the start of the run to its end (or the end of the
//! run), is cut into *quiet* stretches and *disturbed* ones. A disturbance
//! is a fault from its start to its heal: a hold, partition or crash for
//! its duration; a scripted fault from its firing (as the test kit logs
//! it), to the end of its stall or of the delay its `RetryInfo` asks for.
//! Disturbances that begin before the query made progress after the last
//! one are one run: their budgets were not restored in between.
//!
//! * After a run of disturbances from `S` healed at `E`, the query's next
//!   progress (a response delivered, or its end) comes by `E + detection +
//!   wait_at(S, E) + margin`.
//! * In a quiet stretch, no silence between two progresses (or up to the
//!   next disturbance, or the end of a run that never finished) is longer
//!   than `detection + the first wait + margin`, where detection is the
//!   longest of the disturbances so far: a connection a partition broke may
//!   only be found dead later.
//!
//! Latency changes are not disturbances (they slow messages, the margin
//! covers them); the server's graceful stream ends are not faults.

use std::time::Duration;

use spark_connect_retry::policy::{PySparkPolicy, RetryPolicy};
use spark_connect_retry::reattach::ReattachOptions;

use crate::client::QueryTimes;
use crate::net;
use crate::schedule::{ClientKind, Fault, Link, Schedule};
use crate::violation::Violation;
use crate::world::{Outcome, kit_faults};

/// The recovery bound's parts, from the simulated clients' settings (see
/// the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bound {
    /// Stall detection where a stall reattaches over a fresh connection.
    pub(crate) idle: Duration,
    /// Dead-connection detection over a plain channel: keepalive interval
    /// plus timeout.
    pub(crate) keepalive: Duration,
    /// The policy's waits by retry, least (no jitter).
    pub(crate) least: Vec<Duration>,
    /// The policy's waits by retry, most (all the jitter).
    pub(crate) most: Vec<Duration>,
    /// Round trips, dialling, the guard's hop.
    pub(crate) margin: Duration,
}

/// The margin of the bound.
pub(crate) const MARGIN: Duration = Duration::from_secs(5);

impl Bound {
    /// The bound of the clients the world builds: the reattach layer's
    /// default options, PySpark's retry policy, the channels' keepalive.
    pub(crate) fn of_clients() -> Bound {
        let idle = ReattachOptions::default()
            .idle_timeout
            .expect("stall detection is on by default");
        let policy = RetryPolicy::pyspark();
        let waits = |sample: f64| {
            let mut backoff = policy.backoff();
            std::iter::from_fn(move || backoff.next(None, &mut || sample)).collect()
        };
        Bound {
            idle,
            keepalive: net::KEEPALIVE_INTERVAL + net::KEEPALIVE_TIMEOUT,
            least: waits(0.0),
            most: waits(1.0),
            margin: MARGIN,
        }
    }

    /// The longest wait a client may still be sleeping at `healed` when its
    /// failures began no earlier than `start`: the `J`-th wait (jitter
    /// included) for the largest `J` whose first `J - 1` least waits fit
    /// between the two. Past the budget, the last wait (the client gives
    /// up after it).
    pub(crate) fn wait_at(&self, start: Duration, healed: Duration) -> Duration {
        let window = healed.saturating_sub(start);
        let mut before = Duration::ZERO;
        for (j, least) in self.least.iter().enumerate() {
            if before > window {
                return self.most[j.saturating_sub(1)];
            }
            before += *least;
        }
        self.most.last().copied().unwrap_or_default()
    }

    /// The bound on a silence while nothing is wrong, with `detect` for the
    /// dead connections left behind.
    pub(crate) fn quiet(&self, detect: Duration) -> Duration {
        detect + self.most.first().copied().unwrap_or_default() + self.margin
    }
}

/// A fault from its start to its heal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Disturbance {
    /// When it began (simulated time).
    pub(crate) start: Duration,
    /// When it was over.
    pub(crate) healed: Duration,
    /// How long a connection it broke may go unnoticed by a query whose
    /// stream was open when it began.
    pub(crate) detect: Duration,
    /// The same for a query still in its unary calls when it began.
    pub(crate) detect_unary: Duration,
    /// What it was.
    pub(crate) what: String,
}

/// The schedule's disturbances, by start: its timed faults (holds,
/// partitions, crashes) and each firing of its scripted ones.
pub(crate) fn disturbances(
    schedule: &Schedule,
    firings: &[(Duration, String)],
    bound: &Bound,
) -> Vec<Disturbance> {
    let session = matches!(schedule.client, ClientKind::Session { .. });
    let mut out = vec![];
    // How long each scripted fault lasts once fired, by what the test kit
    // says it did (one description, one duration).
    let mut lasts: Vec<(String, Duration)> = vec![];
    for fault in &schedule.faults {
        // A hold loses nothing: it needs no detection.
        let (start, dur, detect, detect_unary) = match *fault {
            Fault::Hold { at, dur, .. } => (at, dur, bound.idle, bound.idle),
            // A stall reattaches over a fresh connection only on the
            // session's own link; elsewhere keepalive finds a dead one.
            Fault::Partition { at, dur, link, .. } => {
                let fresh = session && link == Link::ClientSide;
                let detect = if fresh { bound.idle } else { bound.keepalive };
                (at, dur, detect, bound.keepalive)
            }
            // A stall on a stream sends a reattach, which the restarted
            // host answers with a reset; a unary call waits for keepalive.
            Fault::Crash { at, down } => (at, down, bound.idle, bound.keepalive),
            Fault::Stall { ms, .. } | Fault::RetryInfo { ms, .. } => {
                for kit in kit_faults(fault) {
                    lasts.push((kit.to_string(), Duration::from_millis(ms)));
                }
                continue;
            }
            _ => continue,
        };
        out.push(Disturbance {
            start,
            healed: start + dur,
            detect,
            detect_unary,
            what: fault.to_string(),
        });
    }
    for (at, what) in firings {
        let last = lasts
            .iter()
            .find(|(w, _)| w == what)
            .map_or(Duration::ZERO, |(_, d)| *d);
        out.push(Disturbance {
            start: *at,
            healed: *at + last,
            detect: bound.idle,
            detect_unary: bound.idle,
            what: format!("{what} (fired)"),
        });
    }
    out.sort_by_key(|d| d.start);
    out
}

/// Checks the recovery property of every query.
pub(crate) fn check(schedule: &Schedule, outcome: &Outcome, bound: &Bound) -> Vec<Violation> {
    let disturbances = disturbances(schedule, &outcome.firings, bound);
    let mut v = vec![];
    for (k, times) in outcome.timelines.iter().enumerate() {
        if let Some(detail) = check_query(times, outcome.elapsed, &disturbances, bound) {
            v.push(Violation {
                property: "recovery",
                detail: format!("query {k}: {detail}"),
            });
        }
    }
    v
}

/// The first breach of the property by one query, if any.
fn check_query(
    times: &QueryTimes,
    elapsed: Duration,
    disturbances: &[Disturbance],
    bound: &Bound,
) -> Option<String> {
    // Progress: each response delivered, and the end.
    let mut events = times.responses.clone();
    events.extend(times.ended);
    events.sort();
    let horizon = times.ended.unwrap_or(elapsed);
    // Whether the query was still in its unary calls when `d` began.
    let detect_of = |d: &Disturbance| {
        if times.opened.is_none_or(|o| o > d.start) {
            d.detect_unary
        } else {
            d.detect
        }
    };
    let mut last = Duration::ZERO;
    let mut detect = bound.idle;
    let mut next = 0;
    loop {
        // A quiet stretch, up to the next disturbance (or the horizon).
        let until = disturbances
            .get(next)
            .map_or(horizon, |d| d.start)
            .min(horizon);
        let quiet = bound.quiet(detect);
        let from = last;
        for &e in events.iter().filter(|e| **e > from && **e <= until) {
            if e - last > quiet {
                return Some(format!(
                    "silent from {last:?} to {e:?} with no fault active (bound {quiet:?})"
                ));
            }
            last = e;
        }
        let ran_on = until < horizon || times.ended.is_none();
        if ran_on && until.saturating_sub(last) > quiet {
            return Some(format!(
                "silent from {last:?} to {until:?} with no fault active (bound {quiet:?})"
            ));
        }
        if next >= disturbances.len() || until >= horizon {
            return None;
        }
        // A run of disturbances: those that begin before progress resumes.
        let first = &disturbances[next];
        let (start, mut healed, mut run_detect) = (first.start, first.healed, detect_of(first));
        let mut whats = vec![first.what.clone()];
        next += 1;
        let (progress, deadline) = loop {
            let deadline = healed + run_detect + bound.wait_at(start, healed) + bound.margin;
            let progress = events.iter().copied().find(|e| *e >= healed);
            let limit = progress.unwrap_or(horizon).min(deadline);
            match disturbances.get(next) {
                Some(d) if d.start <= limit => {
                    healed = healed.max(d.healed);
                    run_detect = run_detect.max(detect_of(d));
                    whats.push(d.what.clone());
                    next += 1;
                }
                _ => break (progress, deadline),
            }
        };
        detect = detect.max(run_detect);
        match progress {
            Some(p) if p <= deadline => last = p,
            // The query ended (or the run did) before the deadline.
            None if horizon <= deadline => return None,
            _ => {
                let seen = progress.map_or_else(
                    || format!("none by {horizon:?}"),
                    |p| format!("the next at {p:?}"),
                );
                return Some(format!(
                    "no progress within {:?} after [{}] from {start:?} healed at {healed:?} ({seen}; bound: detection {run_detect:?} + wait {:?} + margin {:?})",
                    deadline - healed,
                    whats.join(", "),
                    bound.wait_at(start, healed),
                    bound.margin,
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_bound_is_pysparks_policy_and_the_default_idle_timeout() {
        let b = Bound::of_clients();
        assert_eq!(b.idle, Duration::from_secs(10));
        assert_eq!(b.keepalive, Duration::from_secs(80));
        assert_eq!(
            &b.least[..6],
            &[ms(50), ms(200), ms(800), ms(3200), ms(12_800), ms(51_200)]
        );
        assert_eq!(b.most[3], ms(3700), "jitter at and above 2 s");
        assert_eq!(b.least.len(), 15);
    }

    #[test]
    fn the_wait_in_progress_grows_with_the_outage() {
        let b = Bound::of_clients();
        let at = |s: u64| b.wait_at(Duration::ZERO, ms(s));
        assert_eq!(at(0), ms(50), "one failure: the first wait");
        assert_eq!(at(49), ms(50));
        assert_eq!(at(50), ms(200));
        assert_eq!(at(1049), ms(800));
        assert_eq!(at(1050), ms(3700));
        assert_eq!(at(17_050), ms(51_700));
        assert_eq!(at(3_600_000), ms(60_500), "past the budget");
    }

    fn one(start: u64, healed: u64, detect: Duration) -> Vec<Disturbance> {
        vec![Disturbance {
            start: ms(start),
            healed: ms(healed),
            detect,
            detect_unary: Duration::from_secs(80),
            what: "x".into(),
        }]
    }

    /// A query whose stream opened at 100 ms.
    fn times(responses: &[u64], ended: Option<u64>) -> QueryTimes {
        QueryTimes {
            opened: Some(ms(100)),
            responses: responses.iter().copied().map(ms).collect(),
            ended: ended.map(ms),
        }
    }

    #[test]
    fn progress_soon_after_the_heal_passes_and_late_progress_fails() {
        let b = Bound::of_clients();
        let d = one(1000, 6000, b.idle);
        // 5 s outage: up to the 12.8 s wait (13.3 s with jitter).
        let ok = times(&[500, 6000 + 28_000], Some(35_000));
        assert_eq!(check_query(&ok, ms(40_000), &d, &b), None);
        let late = times(&[500, 6000 + 29_000], Some(40_000));
        let e = check_query(&late, ms(40_000), &d, &b).unwrap();
        assert!(e.contains("no progress within"), "{e}");
    }

    #[test]
    fn a_long_silence_with_no_fault_fails() {
        let b = Bound::of_clients();
        let t = times(&[100, 200, 16_000], Some(16_100));
        let e = check_query(&t, ms(20_000), &[], &b).unwrap();
        assert!(e.contains("silent from 200ms to 16s"), "{e}");
        // A run that never ended is silent up to its end.
        let hung = times(&[100], None);
        assert!(check_query(&hung, ms(600_000), &[], &b).is_some());
    }

    #[test]
    fn a_disturbance_before_progress_extends_the_run() {
        let b = Bound::of_clients();
        let mut d = one(1000, 2000, b.idle);
        d.extend(one(15_000, 21_000, b.idle));
        // The second begins before the first's deadline (17.8 s) with no
        // progress between: one run from 1 s to 21 s, whose wait may be
        // 51.7 s.
        let t = times(&[500, 21_000 + 60_000], Some(90_000));
        assert_eq!(check_query(&t, ms(100_000), &d, &b), None);
    }

    #[test]
    fn a_query_still_in_its_unary_calls_waits_for_keepalive() {
        let b = Bound::of_clients();
        let d = one(50, 4000, b.idle);
        let mut t = times(&[80_000], Some(80_100));
        t.opened = Some(ms(10));
        assert!(check_query(&t, ms(90_000), &d, &b).is_some());
        t.opened = Some(ms(79_000));
        assert_eq!(check_query(&t, ms(90_000), &d, &b), None);
    }

    #[test]
    fn keepalive_detection_carries_over_to_quiet_stretches() {
        let b = Bound::of_clients();
        let d = one(1000, 2000, b.keepalive);
        let t = times(&[500, 3000, 3000 + 70_000], Some(80_000));
        assert_eq!(check_query(&t, ms(90_000), &d, &b), None);
        let idle = one(1000, 2000, b.idle);
        assert!(check_query(&t, ms(90_000), &idle, &b).is_some());
    }
}
