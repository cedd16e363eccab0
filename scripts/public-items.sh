#!/usr/bin/env bash
# Counts the public item paths of each workspace crate from rustdoc's output:
# one page per item per path it is reachable by (struct., enum., fn., trait.,
# type., constant., macro., static., union.), so an item re-exported under a
# second public path counts twice; rustdoc's redirect pages (an item's
# location inside a private module) are not counted. Run
# `cargo doc --workspace --all-features --no-deps` first.
# Usage: scripts/public-items.sh [DOC_DIR]   (default target/doc)
set -euo pipefail
DOC="${1:-target/doc}"
# Item pages under $1 that are not redirects.
pages() {
    [ -d "$1" ] || { echo 0; return; }
    find "$1" -name '*.html' | grep -E '/(struct|enum|fn|trait|type|constant|macro|static|union)\.[^/]*\.html$' \
        | { xargs -r grep -L 'http-equiv="refresh"' || true; } | wc -l
}
for crate in spark_connect_retry tonic_retry spark_connect_testkit; do
    [ -d "$DOC/$crate" ] || continue
    all=$(pages "$DOC/$crate")
    proto=$(pages "$DOC/$crate/proto")
    testing=$(pages "$DOC/$crate/testing")
    echo "$crate: $all item pages ($proto in proto, $testing in testing, $((all - proto - testing)) elsewhere)"
done
