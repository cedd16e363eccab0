#!/usr/bin/env bash
# Counts the public item paths of each workspace crate from rustdoc's output:
# one page per item per path it is reachable by (struct., enum., fn., trait.,
# type., constant., macro., static., union.), so an item re-exported under a
# second path counts twice. Run `cargo doc --workspace --all-features --no-deps` first.
# Usage: scripts/public-items.sh [DOC_DIR]   (default target/doc)
set -euo pipefail
DOC="${1:-target/doc}"
for crate in spark_connect_retry tonic_retry spark_connect_testkit; do
    [ -d "$DOC/$crate" ] || continue
    all=$(find "$DOC/$crate" -name '*.html' | grep -cE '/(struct|enum|fn|trait|type|constant|macro|static|union)\.[^/]*\.html$' || true)
    proto=$(find "$DOC/$crate/proto" -name '*.html' 2>/dev/null | grep -cE '/(struct|enum|fn|trait|type|constant|macro|static|union)\.[^/]*\.html$' || true)
    testing=$(find "$DOC/$crate/testing" -name '*.html' 2>/dev/null | grep -cE '/(struct|enum|fn|trait|type|constant|macro|static|union)\.[^/]*\.html$' || true)
    echo "$crate: $all item pages ($proto in proto, $testing in testing, $((all - proto - testing)) elsewhere)"
done
