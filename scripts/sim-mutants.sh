#!/usr/bin/env bash
# Plants each defect of crates/spark-connect-sim/mutations/*.patch in a scratch
# git worktree (detached at HEAD, outside the repository), builds the
# simulation there in the `sim` profile (the shared target directory keeps the
# dependencies), plays seeds 0, 1, 2, ... until the first failure (at most
# SIM_MUTANT_SEEDS, default 10000), and prints a table: mutation, seeds to the
# first failure, the failing property. A defect that survives every seed is
# "survived". The scratch worktree is removed at the end. Exits 1 when a
# defect survived or its build failed: CI runs it as the proof that the
# simulation finds every planted defect, and first on
# mutations/check/harmless.patch (a comment), where it must fail.
#
#   scripts/sim-mutants.sh [PATCH...]     # default: every patch
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MAX="${SIM_MUTANT_SEEDS:-10000}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
OUT="$CARGO_TARGET_DIR/sim-mutants"
mkdir -p "$OUT"
if [ "$#" -gt 0 ]; then patches=("$@"); else patches=("$ROOT"/crates/spark-connect-sim/mutations/*.patch); fi

# The crates the patches touch (package names), whose `sim` artifacts the
# mutants leave behind.
patched=()
for patch in "${patches[@]}"; do
    while read -r path; do
        case "$path" in
            crates/*) dir="crates/$(cut -d/ -f2 <<<"$path")" ;;
            *) dir="." ;;
        esac
        patched+=(-p "$(sed -n 's/^name = "\(.*\)"$/\1/p' "$ROOT/$dir/Cargo.toml" | head -n1)")
    done < <(sed -n 's|^+++ b/||p' "$patch")
done

SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/sim-mutant.XXXXXX")"
cleanup() {
    git -C "$ROOT" worktree remove --force "$SCRATCH" >/dev/null 2>&1 || rm -rf "$SCRATCH"
    # The scratch builds share the target directory, and cargo records a
    # crate's sources relative to the crate: after a mutant was built, the
    # repository's own (older) sources of that crate look built, and the
    # next `sim` build here would link the mutant. Drop those artifacts.
    cargo clean --profile sim "${patched[@]}" >/dev/null 2>&1 || true
}
trap cleanup EXIT
git worktree add --detach "$SCRATCH" HEAD >/dev/null

rows=()
failed=()
for patch in "${patches[@]}"; do
    name="$(basename "$patch" .patch)"
    git -C "$SCRATCH" checkout -q -- .
    git -C "$SCRATCH" apply "$patch"
    t0=$SECONDS
    if ! (cd "$SCRATCH" && cargo test --profile sim -p spark-connect-sim --test sim --no-run) >"$OUT/$name.build.log" 2>&1; then
        rows+=("| $name | build failed | see $OUT/$name.build.log |")
        failed+=("$name (build failed)")
        continue
    fi
    bin="$(sed -n 's/.*Executable tests\/sim.rs (\(.*\))$/\1/p' "$OUT/$name.build.log" | tail -n1)"
    built=$((SECONDS - t0))
    t1=$SECONDS
    SIM_FIRST_FAILURE=1 SIM_SEEDS="0..$MAX" "$bin" sample >"$OUT/$name.log" 2>&1 || true
    line="$(grep -m1 '^first failure:' "$OUT/$name.log" || true)"
    if [ -n "$line" ]; then
        # first failure: seed N (M seeds) [property]
        seeds="$(sed -n 's/.*(\([0-9]*\) seeds).*/\1/p' <<<"$line")"
        property="$(sed -n 's/.*\[\(.*\)\]$/\1/p' <<<"$line")"
        seed="$(sed -n 's/^first failure: seed \([0-9]*\).*/\1/p' <<<"$line")"
        detail="$(grep -m1 '  violation:' "$OUT/$name.log" | sed 's/^  violation: //; s/|/\\|/g' | cut -c1-140)"
        rows+=("| $name | $seeds (seed $seed) | $property: $detail |")
    else
        rows+=("| $name | survived $MAX | - |")
        failed+=("$name (survived $MAX seeds)")
    fi
    echo "sim-mutants: $name: built in ${built} s, played in $((SECONDS - t1)) s: ${line:-survived}" >&2
done

echo "| mutation | seeds to first failure | failing property |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    printf 'sim-mutants: not caught: %s\n' "${failed[@]}" >&2
    exit 1
fi
