//! The simulation's harness: a sample of seeded schedules, the determinism
//! check, the planted defect, and the seeds that once failed.
//!
//! `SIM_SEEDS=N` runs seeds `0..N` (default a sample of about a minute in
//! a debug build), or `a..b`; `SIM_SEED=n` replays one seed with its full
//! trace (with `RUST_LOG=spark_connect_retry=debug`, the client's and the
//! guard's logs too). `SIM_DEFECT_SEEDS` bounds the planted defect's search.
//! `SIM_FIRST_FAILURE=1` stops the sample at its first failing seed and
//! prints `first failure: seed N (M seeds) [property]`, without shrinking
//! (`scripts/sim-mutants.sh`).

use std::time::Instant;

use spark_connect_sim::client::Defect;
use spark_connect_sim::properties::check;
use spark_connect_sim::schedule::Schedule;
use spark_connect_sim::shrink::shrink;
use spark_connect_sim::violation::Violation;
use spark_connect_sim::world::{Outcome, WorldConfig, run};

const DEFAULT_SEEDS: u64 = 200;

fn replay(seed: u64) -> String {
    format!("SIM_SEED={seed} cargo test -p spark-connect-sim --test sim")
}

fn play(schedule: &Schedule, config: &WorldConfig) -> (Outcome, Vec<Violation>) {
    let outcome = run(schedule, config);
    let violations = check(schedule, &outcome);
    (outcome, violations)
}

/// Whether a candidate still fails the first property `violations` broke.
fn same_failure<'a>(
    violations: &'a [Violation],
    config: &'a WorldConfig,
) -> impl Fn(&Schedule) -> bool + 'a {
    let property = violations[0].property;
    move |s| play(s, config).1.iter().any(|v| v.property == property)
}

/// Runs `seeds`; on a failure prints the schedule, the violations, the
/// shrunk schedule and the replay command. Returns the failing seeds.
fn sample(seeds: impl Iterator<Item = u64>, config: &WorldConfig, verbose: bool) -> Vec<u64> {
    let first_only = std::env::var("SIM_FIRST_FAILURE").is_ok_and(|v| v == "1");
    let mut failed = vec![];
    let started = Instant::now();
    let mut n = 0;
    let mut sim_secs = 0.0;
    for seed in seeds {
        n += 1;
        let schedule = Schedule::from_seed(seed);
        let (outcome, violations) = play(&schedule, config);
        sim_secs += outcome.elapsed.as_secs_f64();
        if verbose {
            println!("{schedule}");
            for line in outcome.trace.lines() {
                println!("{line}");
            }
            println!("trace hash {:016x}", outcome.trace.hash());
        }
        if violations.is_empty() {
            continue;
        }
        failed.push(seed);
        println!("FAILED {schedule}");
        for v in &violations {
            println!("  violation: {v}");
        }
        if first_only {
            println!(
                "first failure: seed {seed} ({n} seeds) [{}]",
                violations[0].property
            );
            println!("  replay: {}", replay(seed));
            break;
        }
        let (small, runs) = shrink(&schedule, same_failure(&violations, config));
        println!("  shrunk in {runs} runs to:\n{small}");
        println!("  replay: {}", replay(seed));
    }
    let wall = started.elapsed();
    println!(
        "{n} schedules in {:.2?} ({:.2} ms each, {:.0} seeds/s, {:.0} simulated s in all), {} failed",
        wall,
        wall.as_secs_f64() * 1000.0 / n.max(1) as f64,
        n as f64 / wall.as_secs_f64().max(1e-9),
        sim_secs,
        failed.len()
    );
    failed
}

fn seeds_from_env() -> Box<dyn Iterator<Item = u64>> {
    match std::env::var("SIM_SEEDS") {
        Ok(spec) => match spec.split_once("..") {
            Some((a, b)) => {
                Box::new(a.parse().expect("SIM_SEEDS a..b")..b.parse().expect("SIM_SEEDS a..b"))
            }
            None => Box::new(0..spec.parse().expect("SIM_SEEDS: a count or a..b")),
        },
        Err(_) => Box::new(0..DEFAULT_SEEDS),
    }
}

fn test_sample() -> Result<(), String> {
    let config = WorldConfig::default();
    if let Ok(seed) = std::env::var("SIM_SEED") {
        let seed = seed.parse().map_err(|_| "SIM_SEED: a number")?;
        let failed = sample(std::iter::once(seed), &config, true);
        return if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("seed {seed} failed"))
        };
    }
    let failed = sample(seeds_from_env(), &config, false);
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("failing seeds: {failed:?}"))
    }
}

/// Seeds that once failed, each with what it found; played on every run
/// of this binary, whatever `SIM_SEEDS` says.
const REGRESSIONS: [(u64, &str); 7] = [
    (
        333339,
        "leak: a guard driver whose caller a partition hid re-sent an ExecutePlan its caller had released",
    ),
    (407504, "leak: the same, with other faults"),
    (
        469424,
        "storm: three queries' startup retries counted against one query's allowance",
    ),
    (
        196,
        "unary: a server restart under a call; tonic's Unknown not retried as a service config's UNAVAILABLE",
    ),
    (
        15947,
        "unary: UNAVAILABLE delivered when the next attempt would pass the call's deadline",
    ),
    (
        23607,
        "tokens: the guard's read-ahead used up a refreshed query's token",
    ),
    (
        88321,
        "tokens: a stalled stream the session gave up on used up a refreshed query's token",
    ),
];

/// Every seed of [`REGRESSIONS`] passes.
fn test_regressions() -> Result<(), String> {
    let config = WorldConfig::default();
    let failed = sample(REGRESSIONS.iter().map(|(seed, _)| *seed), &config, false);
    if failed.is_empty() {
        return Ok(());
    }
    let found: Vec<_> = REGRESSIONS
        .iter()
        .filter(|(seed, _)| failed.contains(seed))
        .map(|(seed, what)| format!("seed {seed} ({what})"))
        .collect();
    Err(format!("regressions: {}", found.join("; ")))
}

/// The same seed gives the same trace.
fn test_determinism() -> Result<(), String> {
    let config = WorldConfig::default();
    for seed in 1000..1012 {
        let schedule = Schedule::from_seed(seed);
        let a = run(&schedule, &config).trace;
        let b = run(&schedule, &config).trace;
        if a.hash() != b.hash() {
            let (la, lb) = (a.lines(), b.lines());
            let at = la
                .iter()
                .zip(&lb)
                .position(|(x, y)| x != y)
                .unwrap_or(la.len().min(lb.len()));
            return Err(format!(
                "seed {seed}: two runs differ at line {at}:\n  {:?}\n  {:?}\n{schedule}replay: {}",
                la.get(at),
                lb.get(at),
                replay(seed)
            ));
        }
    }
    Ok(())
}

/// A client that drops `last_response_id` is caught within a bounded
/// number of seeds.
fn test_planted_defect() -> Result<(), String> {
    let bound: u64 = std::env::var("SIM_DEFECT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let config = WorldConfig {
        defect: Defect::DropLastResponseId,
        ..WorldConfig::default()
    };
    for seed in 0..bound {
        let schedule = Schedule::from_seed(seed);
        let (_, violations) = play(&schedule, &config);
        if !violations.is_empty() {
            let (small, runs) = shrink(&schedule, same_failure(&violations, &config));
            println!(
                "planted defect found at seed {seed} ({} runs): {}\n  shrunk in {runs} runs to:\n{small}",
                seed + 1,
                violations[0]
            );
            return Ok(());
        }
    }
    Err(format!("the planted defect survived {bound} seeds"))
}

/// One check of this binary.
type Test = fn() -> Result<(), String>;

fn main() {
    // A replay's full trace can include the client's and the guard's own
    // logs: `SIM_SEED=N RUST_LOG=spark_connect_retry=debug`.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .without_time()
            .init();
    }
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let tests: [(&str, Test); 4] = [
        ("determinism", test_determinism),
        ("planted_defect", test_planted_defect),
        ("regressions", test_regressions),
        ("sample", test_sample),
    ];
    let mut failures = 0;
    for (name, test) in tests {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        if std::env::var("SIM_SEED").is_ok() && name != "sample" {
            continue;
        }
        let started = Instant::now();
        match test() {
            Ok(()) => println!("test {name} ... ok ({:.1?})", started.elapsed()),
            Err(e) => {
                failures += 1;
                println!("test {name} ... FAILED ({:.1?})\n{e}", started.elapsed());
            }
        }
    }
    if failures > 0 {
        std::process::exit(1);
    }
}
