#!/bin/sh
# Runs every fuzz target for a bounded time and prints each one's executions.
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, every target)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain, or, without one, the
# stable toolchain with its unstable flags allowed (`RUSTC_BOOTSTRAP=1`: cargo-fuzz passes
# `-Zsanitizer=address`); without cargo-fuzz it says so and exits 0, so CI on stable can call
# it. Seeds come from fuzz/seeds/<target>/ (committed)
# and fuzz/corpus/<target>/ when they exist (fuzz/.gitignore keeps corpora out of the repository); new inputs go to a scratch
# copy, not back into fuzz/corpus. A crash stops the run with libFuzzer's report and a
# non-zero status.
set -eu
cd "$(dirname "$0")"
secs="${1:-60}"
[ $# -gt 0 ] && shift
if rustup run nightly rustc --version >/dev/null 2>&1; then
    fuzz="cargo +nightly fuzz"
else
    echo "fuzz/run.sh: no nightly toolchain: the stable one, with RUSTC_BOOTSTRAP=1"
    fuzz="env RUSTC_BOOTSTRAP=1 cargo fuzz"
fi
if ! $fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: cargo-fuzz is not installed (cargo install cargo-fuzz): skipped"
    exit 0
fi
targets="$*"
[ -n "$targets" ] || targets="$($fuzz list)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
for t in $targets; do
    mkdir -p "$work/$t"
    if [ -d "seeds/$t" ]; then cp -r "seeds/$t/." "$work/$t/"; fi
    if [ -d "corpus/$t" ]; then cp -r "corpus/$t/." "$work/$t/"; fi
    log="$work/$t.log"
    if $fuzz run "$t" "$work/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=1 >"$log" 2>&1; then
        execs="$(grep -o 'Done [0-9]* runs' "$log" | tail -n 1 | tr -dc 0-9)"
        echo "$t: ok, ${execs:-?} executions in ${secs}s"
    else
        echo "$t: FAILED (libFuzzer's report follows)"
        tail -n 40 "$log"
        status=1
    fi
done
exit $status
