#!/bin/sh
# The coverage report as a person sees it: runs `asdf-test-system
# {coverage: true}` on a small FiveAM project (a function its tests never
# call, a branch never taken), then opens sb-cover's HTML report in
# headless Chromium (Debian's `chromium`) and writes a PNG of the index and
# of the measured file's page. Prints a table: page, PNG, its size, the
# seconds Chromium took.
#
#   benches/coverage-screenshot.sh [OUT_DIR]     (default target/coverage-shots)
#
# CL_MCP_BIN: the server binary (default target/debug/cl-mcp-server, built
# when missing); CHROMIUM: the browser (default chromium).
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/target/coverage-shots}
bin=${CL_MCP_BIN:-$repo/target/debug/cl-mcp-server}
chromium=${CHROMIUM:-chromium}
command -v "$chromium" >/dev/null || {
    echo "no $chromium: apt-get install -y chromium" >&2
    exit 2
}
[ -x "$bin" ] || cargo build -p cl-mcp-server --manifest-path "$repo/Cargo.toml"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
project=$work/calc
mkdir -p "$project/src" "$project/tests"
cat >"$project/calc.asd" <<'EOF'
(defsystem "calc"
  :components ((:module "src" :components ((:file "calc"))))
  :in-order-to ((test-op (test-op "calc/tests"))))

(defsystem "calc/tests"
  :depends-on ("calc" "fiveam")
  :components ((:module "tests" :components ((:file "calc-tests"))))
  :perform (test-op (o c) (uiop:symbol-call :fiveam :run! :calc)))
EOF
cat >"$project/src/calc.lisp" <<'EOF'
(defpackage #:calc (:use #:cl) (:export #:double #:classify #:never-called))
(in-package #:calc)

(defun double (x)
  (* 2 x))

(defun classify (x)
  (if (minusp x)
      (list :negative (- x))
      (list :non-negative x)))

(defun never-called (x)
  (let ((y (+ x 1)))
    (* y y)))
EOF
cat >"$project/tests/calc-tests.lisp" <<'EOF'
(defpackage #:calc-tests (:use #:cl #:fiveam))
(in-package #:calc-tests)

(def-suite :calc)
(in-suite :calc)

(test doubles
  (is (= 4 (calc:double 2))))

(test classifies
  (is (equal '(:non-negative 3) (calc:classify 3))))
EOF

# The answer's structuredContent is the last line `call` writes on stderr.
"$bin" call asdf-test-system --project-root "$project" \
    --json '{"system": "calc", "coverage": true}' 2>"$work/server.log" >"$work/answer" || true
index=$(tail -n 1 "$work/server.log" | python3 -c 'import json,sys; print(json.load(sys.stdin)["coverage"]["reportPath"])')
page=$(python3 - "$index" <<'EOF'
import re, sys
html = open(sys.argv[1]).read()
print(re.search(r"href='([0-9a-f]+\.html)'>calc\.lisp<", html).group(1))
EOF
)

shoot() { # name url width height
    start=$(date +%s%N)
    "$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking \
        --disable-component-update --disable-sync --no-first-run \
        --user-data-dir="$work/profile" --screenshot="$out/$1.png" \
        --window-size="$3,$4" "$2" >"$work/chromium-$1.log" 2>&1
    end=$(date +%s%N)
    printf '| %s | %s | %s bytes | %s ms |\n' "$1" "$out/$1.png" \
        "$(wc -c <"$out/$1.png")" "$(((end - start) / 1000000))"
}

echo "| page | PNG | size | Chromium |"
echo "|---|---|---|---|"
shoot index "file://$index" 900 300
shoot calc-lisp "file://$(dirname "$index")/$page" 900 620
