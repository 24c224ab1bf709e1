#!/usr/bin/env bash
# Sets up, builds and runs cl-mcp-server (default: MCP over stdio). Arguments
# are passed to the server, e.g. `scripts/run.sh --project-root ~/src/app`.
# Setup and build output goes to stderr, so this script itself can be the
# command an MCP client starts.
set -euo pipefail
caller_dir=$PWD
cd "$(dirname "$0")/.."
exec 3>&1 1>&2
SKIP_PYTHON_SDK=1 scripts/setup.sh
cargo build --release --quiet -p cl-mcp-server
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -E 's/.*"target_directory":"([^"]*)".*/\1/')
# Back in the caller's directory: it is the default project root.
cd "$caller_dir"
exec "$target_dir/release/cl-mcp-server" "$@" 1>&3 3>&-
