#!/usr/bin/env bash
# Installs what cl-mcp-server needs on a Debian machine: SBCL and Swank (the
# Lisp image), the Lisp libraries and SBCL sources the tests read, and the
# official MCP Python SDK used by the client-compatibility test. Idempotent:
# does nothing that is already done. All output goes to stderr.
set -euo pipefail
exec 1>&2
cd "$(dirname "$0")/.."

DEBS=(sbcl cl-swank sbcl-source cl-alexandria cl-ppcre cl-yason cl-usocket
      cl-bordeaux-threads cl-hunchentoot cl-fiveam ecl python3-venv)

missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust (https://rustup.rs) and run this again" >&2
  exit 1
fi

# The MCP Python SDK, in a private venv (never the system Python).
VENV=target/sdk-venv
if [ "${SKIP_PYTHON_SDK:-}" != 1 ] && ! "$VENV/bin/python" -c "import mcp" 2>/dev/null; then
  echo "setup: installing the MCP Python SDK into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install --quiet mcp
fi
