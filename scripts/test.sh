#!/usr/bin/env bash
# Sets up and runs the whole test suite, then prints one summary line
# ("tests: N passed, N failed") over every test binary cargo ran.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PYTHON="$PWD/target/sdk-venv/bin/python"
# Build the server once and let `doctor` compile Swank and cache the core,
# so parallel tests never race to compile the same fasls on a new machine.
cargo run --quiet --all-features -p cl-mcp-server -- doctor >&2 \
  || echo "doctor reported a problem (see above); running the tests anyway" >&2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --all-features --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
echo
awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
