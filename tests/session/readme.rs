#![cfg(feature = "arrow")]
//! The README's quick start says what it prints, in comments. Those comments
//! are checked here: the quick start's code is `examples/quickstart.rs`,
//! line for line, and running that example (against the embedded test
//! server) prints exactly the commented lines. The README's Rust blocks are
//! also compiled as doctests (`src/lib.rs`, `mod readme`).

use std::process::Command;

const README: &str = include_str!("../../README.md");
const EXAMPLE: &str = include_str!("../../examples/quickstart.rs");

/// The lines of the README's quick start block.
fn readme_block() -> Vec<&'static str> {
    let start = README
        .find("## Quick start")
        .expect("a quick start section");
    let open = start + README[start..].find("```rust").expect("a rust block");
    let body = open + README[open..].find('\n').unwrap() + 1;
    let close = body + README[body..].find("\n```").expect("the block ends");
    README[body..close].lines().collect()
}

/// The lines of the example between its README markers.
fn example_region() -> Vec<&'static str> {
    let begin = "// README quick start: begin\n";
    let start = EXAMPLE.find(begin).expect("the begin marker") + begin.len();
    let end = EXAMPLE
        .find("// README quick start: end")
        .expect("the end marker");
    EXAMPLE[start..end].lines().collect()
}

/// What a `println!` line's comment says it prints.
fn expected_output(block: &[&str]) -> Vec<String> {
    block
        .iter()
        .filter(|l| l.trim_start().starts_with("println!"))
        .map(|l| {
            let (_, comment) = l.rsplit_once("; // ").expect("a println! with its output");
            comment.to_owned()
        })
        .collect()
}

#[test]
fn the_quick_start_is_the_example_line_for_line() {
    let block = readme_block();
    let region = example_region();
    assert!(
        block.len() > region.len() && block[..region.len()] == region[..],
        "README quick start and examples/quickstart.rs differ:\nREADME:\n{}\nexample:\n{}",
        block.join("\n"),
        region.join("\n")
    );
    assert_eq!(expected_output(&block).len(), 5, "{block:#?}");
}

/// Runs the example (built with this test's features) and compares what it
/// printed with the README's comments.
#[test]
fn the_quick_start_prints_what_its_comments_say() {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["run", "--quiet", "--example", "quickstart"]);
    cargo.current_dir(env!("CARGO_MANIFEST_DIR"));
    // The features this test was built with, so nothing is rebuilt.
    let features: Vec<&str> = [
        (cfg!(feature = "arrow"), "arrow"),
        (cfg!(feature = "tls"), "tls"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    cargo.args(["--no-default-features", "--features", &features.join(",")]);
    let out = cargo.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "the example failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(printed, expected_output(&readme_block()));
}
