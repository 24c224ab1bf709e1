#!/usr/bin/env python3
"""How many images one node holds: one server over stdio starts further
SBCL images with `image-start`, one batch after another, up to N, and after
each batch prints what the images cost: the start of each image of the
batch (median), a warm `evaluate-lisp (+ 1 2)` on every image (median,
p95), each image's memory (PSS, which shares the cached core's pages
fairly among the images mapping it, and RSS), the server's RSS, and what
that leaves for the machine's memory (MemAvailable at the start divided by
the PSS per image: the images this node could hold).

    benches/capacity.py [N] [BATCH]

N: images in all (default 40), BATCH: images per row (default 10).
CL_MCP_BIN: the server binary (default target/release/cl-mcp-server; build
it with `cargo build --release -p cl-mcp-server`).
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

from mcp_stdio import StdioServer

repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = os.environ.get("CL_MCP_BIN", os.path.join(repo, "target/release/cl-mcp-server"))
total = int(sys.argv[1]) if len(sys.argv) > 1 else 40
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 10
if not os.access(binary, os.X_OK):
    sys.exit(f"{binary} is missing: cargo build --release -p cl-mcp-server")

root = tempfile.mkdtemp(prefix="cl-mcp-capacity-")
server = StdioServer(binary, ["--project-root", root], "capacity")


def call(name: str, arguments: dict) -> dict:
    m = server.request("tools/call", {"name": name, "arguments": arguments})
    result = m.get("result")
    if result is None or result.get("isError"):
        raise SystemExit(f"{name} {arguments} failed: {m}")
    return result


def kb_field(path: str, field: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise SystemExit(f"no {field} in {path}")


def mb(kb: float) -> str:
    return f"{kb / 1024:.1f}"


def percentile(values: list, p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))]


available_kb = kb_field("/proc/meminfo", "MemAvailable")
call("evaluate-lisp", {"code": "(+ 1 2)"})  # the first image, warm cache

print(f"capacity: {binary}, MemAvailable {mb(available_kb)} MB at the start, "
      f"load average {os.getloadavg()[0]:.1f}")
print("| images | start ms (median of the row) | eval ms median / p95 | PSS per image MB "
      "(median) | RSS per image MB (median) | all images' PSS MB | server RSS MB "
      "| images MemAvailable holds |")
print("|---|---|---|---|---|---|---|---|")
started = 0
while started < total:
    starts = []
    for _ in range(min(batch, total - started)):
        started += 1
        t = time.monotonic()
        r = call("image-start", {"lisp": "sbcl", "name": f"img-{started}"})
        starts.append((time.monotonic() - t) * 1000)
        if not r["structuredContent"].get("ready", True):
            raise SystemExit(f"img-{started} did not start: {r}")
    images = call("image-list", {})["structuredContent"]["images"]
    evals, pss, rss = [], [], []
    for image in images:
        t = time.monotonic()
        call("evaluate-lisp", {"code": "(+ 1 2)", "image": image["name"]})
        evals.append((time.monotonic() - t) * 1000)
        pid = image.get("pid")
        if pid:
            pss.append(kb_field(f"/proc/{pid}/smaps_rollup", "Pss"))
            rss.append(kb_field(f"/proc/{pid}/smaps_rollup", "Rss"))
    per_image = statistics.median(pss)
    print(f"| {len(images)} | {statistics.median(starts):.0f} | "
          f"{statistics.median(evals):.2f} / {percentile(evals, 0.95):.2f} | "
          f"{mb(per_image)} | {mb(statistics.median(rss))} | {mb(sum(pss))} | "
          f"{mb(kb_field(f'/proc/{server.process.pid}/status', 'VmRSS'))} | "
          f"{int(available_kb / per_image)} |", flush=True)

server.close()
shutil.rmtree(root, ignore_errors=True)
