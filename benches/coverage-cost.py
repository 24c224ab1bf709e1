#!/usr/bin/env python3
"""What coverage costs: in one session over stdio, `asdf-test-system` of a
system plain, with `coverage: true`, and plain again right after (which
compiles the project's files anew, uninstrumented), taking turns, N rounds
(after one plain warm-up run). Prints a table of wall times per kind.

    benches/coverage-cost.py PROJECT_ROOT SYSTEM [ROUNDS]

CL_MCP_BIN: the server binary (default target/debug/cl-mcp-server).
"""

import os
import statistics
import sys
import time

from mcp_stdio import StdioServer

repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = os.environ.get("CL_MCP_BIN", os.path.join(repo, "target/debug/cl-mcp-server"))
root, system = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
server = StdioServer(binary, ["--project-root", root], "coverage-cost")


def test_run(args: dict) -> float:
    start = time.monotonic()
    r = server.request("tools/call", {"name": "asdf-test-system",
                                      "arguments": dict(args, system=system)})
    took = (time.monotonic() - start) * 1000
    assert "result" in r and not r["result"].get("isError"), r
    assert ("coverage" in r["result"]["structuredContent"]) == bool(args), r
    return took


test_run({})
times = {"plain": [], "coverage": [], "plain after coverage": []}
for _ in range(rounds):
    times["coverage"].append(test_run({"coverage": True}))
    times["plain after coverage"].append(test_run({}))
    times["plain"].append(test_run({}))
server.close()
print(f"{system}, {rounds} rounds, load average {os.getloadavg()[0]:.1f}")
print("| run | median ms | min–max ms |")
print("|---|---|---|")
for kind, ms in times.items():
    print(f"| {kind} | {statistics.median(ms):.0f} | {min(ms):.0f}–{max(ms):.0f} |")
