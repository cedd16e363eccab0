//! Shrinking: a failing schedule reduced to the fewest faults that still
//! fail, by dropping one fault at a time while the run still fails.

use crate::schedule::Schedule;

/// Drops faults one at a time, keeping each drop after which `fails`
/// still holds, until no single drop does. Returns the smallest schedule
/// found and how many runs it took.
pub fn shrink(schedule: &Schedule, fails: impl Fn(&Schedule) -> bool) -> (Schedule, usize) {
    let mut best = schedule.clone();
    let mut runs = 0;
    'outer: loop {
        for i in 0..best.faults.len() {
            let candidate = best.without(i);
            runs += 1;
            if fails(&candidate) {
                best = candidate;
                continue 'outer;
            }
        }
        return (best, runs);
    }
}
