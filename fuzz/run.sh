#!/usr/bin/env bash
# A short fuzzing run of every target, for CI: FUZZ_SECONDS (default 15) per target, about a
# minute in all plus the build. Longer runs: see fuzz/README.md.
#
# Needs a nightly toolchain and cargo-fuzz (`.ci/run` installs cargo-fuzz). Without nightly it
# says so and skips (exit 0); a crash, a timeout or a broken invariant fails (exit 1) and
# leaves the input in fuzz/artifacts/<target>/.
# `fuzz/run.sh --build-only` builds the targets and stops (CI builds them beside the tests).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: no nightly toolchain in 'rustup toolchain list'; skipping the fuzz run"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz is not installed (cargo install --locked cargo-fuzz)" >&2
  exit 1
fi

seconds="${FUZZ_SECONDS:-15}"
# The fuzzed code is safe Rust: no sanitizer keeps the build and the runs fast. `--dev`: an
# unoptimised build (debug assertions and overflow checks on) takes minutes less to build on
# CI's two cores than the optimised one, which a run of seconds per target cannot win back;
# FUZZ_PROFILE=release for long runs (fuzz/README.md).
profile_flag=--dev
if [[ "${FUZZ_PROFILE:-dev}" == release ]]; then
  profile_flag=--release
fi
build_flags=(--fuzz-dir "$here" -s none --codegen-units 16 "$profile_flag")
cargo +nightly fuzz build "${build_flags[@]}"
if [[ "${1:-}" == --build-only ]]; then
  exit 0
fi

run() {
  local target="$1" dict="$2"
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
  if [[ -n "$dict" ]]; then
    args+=(-dict="$here/dicts/$dict")
  fi
  mkdir -p "$here/corpus/$target"
  echo "--- fuzz $target (${seconds}s)"
  cargo +nightly fuzz run "${build_flags[@]}" "$target" \
    "$here/corpus/$target" "$here/seeds/$target" -- "${args[@]}"
}

run config_load config.dict
run sns_policy sns.dict
run retry_after ""
run ingest_body ingest.dict
