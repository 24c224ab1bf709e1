"""Exercise-style layouts through the built server: what a scripted agent
pays to run a test file from a fresh image.

Each exercise of crates/cl-mcp-server/tests/exercises/ (a solved stub, a
FiveAM test file that begins `(load "NAME")` and `(ql:quickload :fiveam)`,
no .asd), solved and with its broken solution, is copied to a fresh project
root; a fresh server (a fresh image, started in an unrelated working
directory) runs it the way an agent would, and the table gives the calls,
the bytes of the answers read, the wall time, and whether the run gave
counts with every failure at a path:line.

    python3 benches/exercises.py [BINARY]

BINARY defaults to target/debug/cl-mcp-server. EXERCISES_BASELINE=PATH
adds rows for another binary (e.g. one built before `file` existed) run
with the workaround agents used there: set *default-pathname-defaults*,
define a QUICKLISP-CLIENT stand-in (two calls: the package must exist
before the function's name is read), compile the test file, run the suite
through asdf-test-system {system: "fiveam", test: SUITE}.
"""

import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcp_stdio import StdioServer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
EXERCISES = os.path.join(HERE, "..", "crates", "cl-mcp-server", "tests", "exercises")
CACHE = os.path.join(HERE, "..", "target", "tmp", "cl-mcp-server-test-cache")

# What the agents of the issue wrote before `file` existed (one call each).
STAND_IN = ["""(defpackage "QUICKLISP-CLIENT" (:use :cl) (:nicknames "QL") (:export "QUICKLOAD"))""",
            """(defun ql:quickload (s &key &allow-other-keys)
  (dolist (x (if (listp s) s (list s)) s) (asdf:load-system x)))"""]


def copy_exercise(name: str, broken: bool, base: str) -> str:
    root = os.path.join(base, "root")
    os.makedirs(os.path.join(root, name))
    for file in (f"{name}.lisp", f"{name}-test.lisp"):
        shutil.copy(os.path.join(EXERCISES, name, file), os.path.join(root, name, file))
    if broken:
        shutil.copy(os.path.join(EXERCISES, name, "broken", f"{name}.lisp"),
                    os.path.join(root, name, f"{name}.lisp"))
    return root


class Agent:
    """A server on ROOT started elsewhere; counts the calls and the bytes."""

    def __init__(self, binary: str, root: str, elsewhere: str):
        cwd = os.getcwd()
        os.chdir(elsewhere)
        os.environ["CL_MCP_CACHE_DIR"] = CACHE
        try:
            self.server = StdioServer(binary, ["--project-root", root], "exercises-bench")
        finally:
            os.chdir(cwd)
        self.calls = 0
        self.bytes = 0

    def call(self, name: str, args: dict) -> dict:
        self.calls += 1
        r = self.server.request("tools/call", {"name": name, "arguments": args})
        self.bytes += len(json.dumps(r))
        return r["result"]


def located(result: dict) -> bool:
    """Counts given, and every failure at a path and line."""
    s = result.get("structuredContent") or {}
    failures = s.get("failures", [])
    return bool(s.get("summary")) and all(f.get("path") and f.get("line") for f in failures)


def run_by_file(agent: Agent, name: str) -> dict:
    return agent.call("asdf-test-system", {"file": f"{name}/{name}-test.lisp"})


def run_by_workaround(agent: Agent, name: str, root: str) -> dict:
    agent.call("evaluate-lisp", {"code": f"(setf *default-pathname-defaults* #P\"{root}/{name}/\")"})
    for code in STAND_IN:
        agent.call("evaluate-lisp", {"code": code})
    agent.call("lisp-compile-file", {"path": f"{name}/{name}-test.lisp"})
    return agent.call("asdf-test-system", {"system": "fiveam", "test": f"{name}-test::{name}-suite"})


def row(binary: str, name: str, broken: bool, how: str) -> list:
    with tempfile.TemporaryDirectory() as base:
        root = copy_exercise(name, broken, base)
        elsewhere = os.path.join(base, "elsewhere")
        os.makedirs(elsewhere)
        started = time.monotonic()
        agent = Agent(binary, root, elsewhere)
        result = run_by_file(agent, name) if how == "file" else run_by_workaround(agent, name, root)
        elapsed = time.monotonic() - started
        agent.server.close()
        s = result.get("structuredContent") or {}
        summary = s.get("summary") or {}
        counts = f"{summary.get('passed', '?')}/{summary.get('failed', '?')}"
        return [f"{name}{' (broken)' if broken else ''}", how, agent.calls, agent.bytes,
                len(result["content"][0]["text"]), counts, "yes" if located(result) else "no",
                f"{elapsed:.1f} s"]


def main() -> None:
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "target", "debug", "cl-mcp-server")
    runs = [(binary, "file")]
    if os.environ.get("EXERCISES_BASELINE"):
        runs.append((os.environ["EXERCISES_BASELINE"], "workaround"))
    # A first start may build the core cache: not part of any row.
    for b, _ in runs:
        with tempfile.TemporaryDirectory() as base:
            Agent(b, base, base).server.close()
    header = ["exercise", "agent", "calls", "bytes read", "last text", "passed/failed", "located", "wall"]
    rows = []
    for name in sorted(os.listdir(EXERCISES)):
        if not os.path.isdir(os.path.join(EXERCISES, name)):
            continue
        for broken in (False, True):
            for b, how in runs:
                rows.append(row(b, name, broken, how))
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


main()
