//! The harness's command line: cargo test's, whole.
//!
//! `cargo test -- upload artifact` hands every test binary the same
//! arguments, and libtest runs a test whose name contains *any* of the
//! filters. libtest-mimic (0.8) takes one positional filter and rejects a
//! second, so this binary would fail the whole command. Here the positional
//! filters are taken out before libtest-mimic parses the rest (`--list`,
//! `--ignored`, `--include-ignored`, `--skip`, `--test-threads`, …), and the
//! trials are selected as libtest selects them: any filter, by substring or,
//! with `--exact`, by the whole name.

/// libtest's options that take a value as the next argument (`--skip x`);
/// written `--skip=x` they are one argument.
const WITH_VALUE: &[&str] = &[
    "--skip",
    "--test-threads",
    "--logfile",
    "--color",
    "--format",
    "-Z",
];

/// The command line split: the positional filters, and the rest for
/// libtest-mimic (program name first).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct CommandLine {
    pub(crate) filters: Vec<String>,
    pub(crate) rest: Vec<String>,
}

/// Splits `args` (program name first) into filters and options; everything
/// after a `--` is a filter, as for libtest.
pub(crate) fn split(args: impl IntoIterator<Item = String>) -> CommandLine {
    let mut args = args.into_iter();
    let mut rest: Vec<String> = args.next().into_iter().collect();
    let mut filters = Vec::new();
    let mut only_filters = false;
    while let Some(arg) = args.next() {
        if only_filters || !arg.starts_with('-') {
            filters.push(arg);
        } else if arg == "--" {
            only_filters = true;
        } else {
            let takes_value = WITH_VALUE.contains(&arg.as_str());
            rest.push(arg);
            if takes_value && let Some(value) = args.next() {
                rest.push(value);
            }
        }
    }
    CommandLine { filters, rest }
}

/// Whether libtest would run the test `name` under `filters`: no filter,
/// or any filter contained in the name (equal to it with `exact`).
pub(crate) fn selected(name: &str, filters: &[String], exact: bool) -> bool {
    filters.is_empty()
        || filters.iter().any(|f| {
            if exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        })
}

real_test!(command_line_takes_several_filters_and_options, needs = []);
async fn command_line_takes_several_filters_and_options() {
    let line = |s: &str| split(s.split_whitespace().map(str::to_owned));
    let l = line("bin upload artifact --list --skip sail --exact --test-threads=2 -- --odd");
    assert_eq!(l.filters, ["upload", "artifact", "--odd"]);
    assert_eq!(
        l.rest,
        [
            "bin",
            "--list",
            "--skip",
            "sail",
            "--exact",
            "--test-threads=2"
        ]
    );
    assert_eq!(line("bin --ignored").filters, Vec::<String>::new());
    let filters = ["upload".to_owned(), "artifact".to_owned()];
    assert!(selected("spark_upload_x", &filters, false));
    assert!(selected("an_artifact", &filters, false));
    assert!(!selected("spark_sql", &filters, false));
    assert!(!selected("spark_upload_x", &filters, true));
    assert!(selected("upload", &filters, true));
    assert!(selected("anything", &[], true));
}
