#!/usr/bin/env bash
# Sets up and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PYTHON="$PWD/target/sdk-venv/bin/python"
cargo test --workspace --all-features "$@"
