#!/bin/sh
# Writes the golden directory of an older commit with that commit's own build (README.md):
# exports the commit's tree to a temporary directory (the repository is not changed), adds
# old_gen.rs and dataset.rs to it as the example `golden_gen`, builds that with the commit's
# Cargo.lock and runs it. The new directory appears under tests/golden/, named by the format
# versions of its files; an existing one is never overwritten.
#
# Usage: tests/golden/make-old.sh <commit> [spares]
#   TSBUCKET_GOLDEN_OUT=<dir> writes under <dir> instead of tests/golden/
#   spares: also declare the cargo feature golden_spares (small log files; needs a build
#           whose DbOptions has wal_file_bytes and wal_spare_files)
set -eu
commit=$1
spares=${2:-}
repo=$(git rev-parse --show-toplevel)
out=${TSBUCKET_GOLDEN_OUT:-$repo/tests/golden}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${TMPDIR:-/tmp}/tsbucket-golden-$commit
rm -rf "$work"
mkdir -p "$work"
git -C "$repo" archive "$commit" | tar -x -C "$work"
mkdir -p "$work/examples/golden_gen"
cp "$repo/tests/golden/old_gen.rs" "$work/examples/golden_gen/main.rs"
cp "$repo/tests/golden/dataset.rs" "$work/examples/golden_gen/dataset.rs"
features=
if [ "$spares" = spares ]; then
    printf '\n[features]\ngolden_spares = []\n' >>"$work/Cargo.toml"
    features="--features golden_spares"
fi
cd "$work"
# One target directory for every commit, so that dependencies are built once. The crate
# itself is always rebuilt: git archive gives files the commit's time, which cargo, comparing
# times, could take for older than the build of another commit.
export CARGO_TARGET_DIR=${GOLDEN_TARGET_DIR:-${TMPDIR:-/tmp}/tsbucket-golden-target}
cargo clean --locked -p tsbucket
# shellcheck disable=SC2086
cargo run --locked --example golden_gen $features -- "$out" "$commit"
