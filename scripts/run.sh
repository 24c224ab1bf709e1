#!/usr/bin/env bash
# Sets up, builds and runs cl-mcp-server (default: MCP over stdio). Arguments
# are passed to the server, e.g. `scripts/run.sh --project-root ~/src/app`.
# Setup and build output goes to stderr, so this script itself can be the
# command an MCP client starts.
set -euo pipefail
cd "$(dirname "$0")/.."
exec 3>&1 1>&2
SKIP_PYTHON_SDK=1 scripts/setup.sh
cargo build --release --quiet -p cl-mcp-server
exec target/release/cl-mcp-server "$@" 1>&3 3>&-
