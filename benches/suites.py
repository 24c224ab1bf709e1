#!/usr/bin/env python3
"""Real libraries' own test suites through `asdf-test-system` of the built
server: each library Debian ships with a suite is copied under a fresh
project root, run clean, then run again with a planted one-token bug in
its source. Prints one row per run: whether the copy tested was the
checkout (`asdf-system-info`'s source file under the root), the outcome,
whether the failing test is named and located (`path:line`), and the
answer's text bytes against the budget (2 KB, plus 500 B per failure
shown, at most 10).

    benches/suites.py [LIB...]

SUITES_LAYOUT=root (default): the project root IS the library's folder;
SUITES_LAYOUT=nested: the checkout lies at <root>/<lib>/ (what nested
`.asd` discovery serves). SUITES_BIN: the server binary (default
target/debug/cl-mcp-server). SUITES_SHOW=1 prints each answer's text.
"""

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcp_stdio import StdioServer  # noqa: E402

SOURCE = "/usr/share/common-lisp/source"

# (name, Debian folder, system to test, file, text, replacement): the
# planted bug is one token changed, in the library's source, not its tests.
LIBRARIES = [
    ("alexandria", "alexandria", "alexandria", "alexandria-1/lists.lisp",
     "(traverse (car subtree))", "(traverse (cdr subtree))"),
    ("cl-base64", "cl-base64", "cl-base64", "encode.lisp",
     "(if (zerop remainder)", "(if (plusp remainder)"),
    ("split-sequence", "cl-split-sequence", "split-sequence", "api.lisp",
     "(remove-empty-subseqs nil)\n                                            (test #'eql",
     "(remove-empty-subseqs t)\n                                            (test #'eql"),
    ("cl-ppcre", "cl-ppcre", "cl-ppcre", "api.lisp",
     "                 :start start :end end)\n      (incf count))",
     "                 :start start :end end)\n      (decf count))"),
    ("flexi-streams", "cl-flexi-streams", "flexi-streams", "encode.lisp",
     "(cond ((< char-code #x80)", "(cond ((< char-code #x40)"),
    ("fiveam", "fiveam", "fiveam", "src/random.lisp",
     "(+ min (random (1+ (- max min))))", "(/ min (random (1+ (- max min))))"),
]


def budget(failures_shown: int) -> int:
    return 2048 + 500 * min(10, failures_shown)


def call(server: StdioServer, tool: str, args: dict):
    r = server.request("tools/call", {"name": tool, "arguments": args})
    result = r.get("result") or {}
    text = "".join(c.get("text", "") for c in result.get("content", []))
    return text, result.get("structuredContent") or {}, bool(result.get("isError"))


def run_library(binary, layout, lib, show):
    name, folder, system, path, old, new = lib
    tmp = tempfile.mkdtemp(prefix=f"suites-{name}-")
    root = os.path.join(tmp, "root")
    checkout = root if layout == "root" else os.path.join(root, name)
    shutil.copytree(os.path.join(SOURCE, folder), checkout, symlinks=False)
    rows = []
    server = StdioServer(binary, ["--project-root", root], "suites-bench")
    try:
        _, info, _ = call(server, "asdf-system-info", {"system": system})
        source = info.get("sourceFile") or ""
        copy_ok = os.path.realpath(source).startswith(os.path.realpath(root) + os.sep)
        for kind in ("clean", "planted"):
            if kind == "planted":
                file = os.path.join(checkout, path)
                text = open(file, encoding="utf-8", errors="surrogateescape").read()
                if text.count(old) != 1:
                    raise SystemExit(f"{name}: the planted text is not once in {path}")
                if old == new:
                    rows.append((name, kind, copy_ok, "(no plant)", "", "", 0, 0, 0.0))
                    continue
                # An edit comes seconds after a build, never within the
                # second its fasl was written (ASDF compares file dates).
                time.sleep(1.1)
                with open(file, "w", encoding="utf-8", errors="surrogateescape") as f:
                    f.write(text.replace(old, new))
            started = time.monotonic()
            text, st, is_error = call(server, "asdf-test-system",
                                      {"system": system, "timeoutSeconds": 900})
            seconds = time.monotonic() - started
            failures = st.get("failures") or []
            named = all(f.get("test") for f in failures) and bool(failures)
            located = sum(1 for f in failures if f.get("path") and f.get("line"))
            outcome = st.get("outcome", "?") + (" (isError)" if is_error else "")
            rows.append((name, kind, copy_ok, outcome,
                         f"{len(failures)}" + (" named" if named else ""),
                         f"{located}/{len(failures)}" if failures else "",
                         len(text.encode()), budget(min(10, len(failures))), seconds))
            if show:
                print(f"----- {name} {kind}\n{text}\n", flush=True)
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    binary = os.environ.get("SUITES_BIN",
                            os.path.join(here, "..", "target", "debug", "cl-mcp-server"))
    layout = os.environ.get("SUITES_LAYOUT", "root")
    show = os.environ.get("SUITES_SHOW") == "1"
    wanted = sys.argv[1:]
    libs = [lib for lib in LIBRARIES if not wanted or lib[0] in wanted]
    print(f"layout: {layout}; binary: {binary}")
    print("| library | run | checkout tested | outcome | failures | located | text bytes | budget | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for lib in libs:
        for r in run_library(binary, layout, lib, show):
            name, kind, copy_ok, outcome, failures, located, size, limit, seconds = r
            over = "" if size <= limit else " **over**"
            print(f"| {name} | {kind} | {'yes' if copy_ok else 'NO'} | {outcome} | {failures} "
                  f"| {located} | {size}{over} | {limit} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
