#!/usr/bin/env bash
# Prints the figures docs/architecture.md quotes, from the checks themselves:
# import circles per crate, items under a second public path, public item
# pages per crate, the generic crate's dependency tree, test binaries and
# tests per crate. Run from the repository root after
# `cargo doc --workspace --all-features --no-deps` (for the doc figures) and
# with the tests built (`cargo test --workspace --all-features --no-run`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

echo "## import circles (scripts/module-cycles.py)"
python3 scripts/module-cycles.py || true
echo
echo "## items under a second public path (scripts/one-path.py)"
python3 scripts/one-path.py target/doc || true
echo
echo "## public item pages (scripts/public-items.sh)"
scripts/public-items.sh target/doc
echo
echo "## tonic-retry's normal dependency tree: Spark, Arrow or a server?"
if cargo tree -p tonic-retry -e normal --all-features | grep -Ei 'arrow|axum|spark'; then
    echo "found (above)"
else
    echo "none"
fi
echo
echo "## test binaries and tests per crate (cargo test -- --list)"
for pkg in tonic-retry spark-connect-retry spark-connect-testkit; do
    list="$(cargo test -q -p "$pkg" --all-features -- --list 2>/dev/null || true)"
    tests=$(grep -c ': test$' <<<"$list" || true)
    manifest="$(cargo metadata --no-deps --format-version 1 \
        | python3 -c 'import json,sys; m=[p for p in json.load(sys.stdin)["packages"] if p["name"]==sys.argv[1]][0]; print(sum(1 for t in m["targets"] if "test" in t["kind"]))' "$pkg")"
    echo "$pkg: $manifest integration test binaries, $tests tests (unit, integration and doc tests)"
done
