"""Agents on several cl-mcp-server nodes behind HAProxy, through the
official MCP Python SDK in the stateless era (2026-07-28): the SDK mirrors
each call's `image` handle into `Mcp-Param-Image` (its x-mcp-header), which
the proxy routes by, and validates every result against the tool's
outputSchema.

Each agent starts an image (image-start through the proxy, spread by
leastconn), builds a tiny ASDF system of its own, and defines one function
per step, checking each step that all its functions are still there. Once
every agent is halfway, the node that runs agent 0's image is killed
(SIGKILL). Its agents must be told "image lost" exactly once, start a new
image (on another node), rebuild and redefine, and go on; every other
agent's image must keep all its functions, with no failure at all.

Also: a handle sent straight to the wrong node is refused naming the right
one; a forged key is "lost"; a name is refused in the stateless era; a
header that disagrees with the argument is refused by the transport.

Usage: python3 nodes_agents.py PROXY_URL PROJECT_DIR AGENTS STEPS NODE=URL,PID...
Prints one line per fact checked and, last, a JSON summary line.
"""

import asyncio
import json
import os
import signal
import sys
import time

import urllib.error
import urllib.request

from mcp import Client

MODERN = "2026-07-28"


def text_of(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


class Agent:
    def __init__(self, n: int, proxy: str, project: str):
        self.n = n
        self.proxy = proxy
        self.handle = None
        self.nodes = []  # the node of each image it used
        self.lost = 0
        self.transport_retries = 0
        self.defined = []
        self.step = 0
        self.halfway = False
        self.system = f"agent{n}"
        with open(os.path.join(project, f"{self.system}.asd"), "w") as f:
            f.write(f'(defsystem "{self.system}" :components ((:file "{self.system}")))\n')
        with open(os.path.join(project, f"{self.system}.lisp"), "w") as f:
            f.write(
                f"(defpackage :{self.system} (:use :cl) (:export #:whoami))\n"
                f"(in-package :{self.system})\n"
                f'(defun whoami () "agent {n}")\n'
            )

    async def call(self, client, name, args):
        """A call, retried while the proxy cannot reach the node (a node
        killed under a call in flight answers 502/503 until its health
        check marks it down)."""
        for attempt in range(40):
            try:
                return await client.call_tool(name, args)
            except Exception as e:  # the SDK raises on HTTP errors
                self.transport_retries += 1
                last = e
                print(f"agent {self.n}: {name}: retrying after {str(e)[:120]}")
                await asyncio.sleep(0.25)
        raise RuntimeError(f"agent {self.n}: {name} kept failing: {last!r}")

    async def lisp(self, client, code):
        """Evaluates code in the agent's image; None when the image is lost."""
        r = await self.call(client, "evaluate-lisp", {"code": code, "image": self.handle})
        if r.is_error and f"The image {self.handle} is lost" in text_of(r):
            self.lost += 1
            print(f"agent {self.n}: image lost: {text_of(r)}")
            return None
        assert not r.is_error, f"agent {self.n}: {code}: {text_of(r)}"
        return r.structured_content["values"]

    async def start(self, client):
        """A new image, its system built and every function defined again;
        the handle is kept only once all that is done (a start a dropped
        connection cut short is done again: its image idles out)."""
        r = await self.call(client, "image-start", {"lisp": "sbcl"})
        assert not r.is_error and r.structured_content["ready"], text_of(r)
        handle = r.structured_content["image"]["handle"]
        assert r.structured_content["image"]["name"] in handle, r.structured_content
        r = await self.call(client, "asdf-load-system", {"system": self.system, "image": handle})
        assert not r.is_error, f"agent {self.n}: build: {text_of(r)}"
        self.handle = handle
        for step in self.defined:
            assert await self.lisp(client, self.defun(step)) is not None
        self.nodes.append(handle.split("/")[0])

    def defun(self, step):
        return f"(defun cl-user::a{self.n}-s{step} () (list {self.n} {step}))"

    async def check(self, client):
        calls = " ".join(f"(cl-user::a{self.n}-s{s})" for s in self.defined)
        values = await self.lisp(client, f"(list ({self.system}:whoami) {calls})")
        if values is None:
            return False
        want = f'("agent {self.n}" ' + " ".join(f"({self.n} {s})" for s in self.defined) + ")"
        assert values == [want.replace(" )", ")")], (self.n, values, want)
        return True

    async def run(self, steps, halfway, killed):
        """The agent's work, resumed on a new connection when one drops (a
        call in flight on a node killed under it)."""
        while True:
            try:
                async with Client(self.proxy, mode=MODERN, read_timeout_seconds=300) as client:
                    await client.list_tools()
                    await self.work(client, steps, halfway, killed)
                return
            except Exception as e:
                self.transport_retries += 1
                print(f"agent {self.n}: connection dropped, resuming: {str(e)[:120]}")
                assert self.transport_retries < 40, e
                await asyncio.sleep(0.25)

    async def work(self, client, steps, halfway, killed):
        if self.handle is None:
            await self.start(client)
        while self.step < steps:
            step = self.step
            if step == steps // 2 and not killed.is_set():
                if not self.halfway:
                    self.halfway = True
                    halfway.release()
                await killed.wait()
            if await self.lisp(client, self.defun(step)) is None:
                await self.start(client)
                assert await self.lisp(client, self.defun(step)) is not None
            if step not in self.defined:
                self.defined.append(step)
            if not await self.check(client):
                await self.start(client)
                assert await self.check(client)
            self.step += 1
        # Done: stop the image; its handle is then lost.
        r = await self.call(client, "image-stop", {"name": self.handle})
        assert not r.is_error, text_of(r)
        r = await client.call_tool("evaluate-lisp", {"code": "1", "image": self.handle})
        assert r.is_error and f"The image {self.handle} is lost" in text_of(r), text_of(r)


async def refusals(proxy, nodes, handle):
    """Misroutes and forgeries, sent as raw HTTP past the proxy or through it."""
    node = handle.split("/")[0]
    other = next(url for name, (url, _) in nodes.items() if name != node)

    async def post(url, args, header):
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "evaluate-lisp", "arguments": args,
                           "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                     "io.modelcontextprotocol/clientCapabilities": {}}}}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call",
                   "Mcp-Name": "evaluate-lisp", "Accept": "application/json, text/event-stream"}
        if header is not None:
            headers["Mcp-Param-Image"] = header
        headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)

        def send():
            try:
                with urllib.request.urlopen(request, timeout=60) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        return await asyncio.to_thread(send)

    code = {"code": "(+ 1 2)"}
    status, r = await post(other, {**code, "image": handle}, handle)
    text = r["result"]["content"][0]["text"]
    assert r["result"]["isError"] and f"lives on node {node}" in text, r
    print(f"misrouted handle refused, naming {node}")
    forged = handle.rsplit("~", 1)[0] + "~" + "0" * 24
    status, r = await post(proxy, {**code, "image": forged}, forged)
    assert r["result"]["isError"] and f"The image {forged} is lost" in r["result"]["content"][0]["text"], r
    print("forged key: lost")
    status, r = await post(proxy, {**code, "image": "sbcl-1"}, "sbcl-1")
    assert r["result"]["isError"] and "by its handle" in r["result"]["content"][0]["text"], r
    print("a name refused in the stateless era")
    status, r = await post(proxy, {**code, "image": handle}, forged)
    assert status == 400 and r["error"]["code"] == -32020 and "Mcp-Param-Image" in r["error"]["data"], r
    status, r = await post(proxy, {**code, "image": handle}, None)
    assert status == 400 and r["error"]["code"] == -32020, r
    print("Mcp-Param-Image checked against the argument")


async def legacy_session(proxy):
    """A legacy session through the proxy: every request must reach the
    node that answered its initialize (the stick table on Mcp-Session-Id),
    or that node's session would be unknown elsewhere. Its images take
    names as before, and handles."""
    async with Client(proxy, mode="legacy", read_timeout_seconds=300) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["evaluate-lisp"].input_schema["properties"]["image"]["x-mcp-header"] == "Image"
        r = await client.call_tool("evaluate-lisp", {"code": "(defvar *pinned* 41)"})
        assert not r.is_error, text_of(r)
        for _ in range(6):
            r = await client.call_tool("evaluate-lisp", {"code": "(incf *pinned*)"})
            assert not r.is_error, text_of(r)
        assert r.structured_content["values"] == ["47"], r.structured_content
        r = await client.call_tool("image-start", {"lisp": "sbcl", "name": "second"})
        assert not r.is_error, text_of(r)
        handle = r.structured_content["image"]["handle"]
        assert handle.split("/")[1].startswith("second~"), handle
        for image in ["second", handle]:
            r = await client.call_tool("evaluate-lisp", {"code": "(boundp '*pinned*)", "image": image})
            assert r.structured_content["values"] == ["NIL"], r
        r = await client.call_tool("image-list", {})
        assert [i["name"] for i in r.structured_content["images"]] == ["sbcl", "second"], r.structured_content
        r = await client.call_tool("image-stop", {"name": handle})
        assert not r.is_error, text_of(r)
    print("legacy session pinned to its node; names and handles both address its images")


async def main():
    proxy, project, agents, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    nodes = {}
    for spec in sys.argv[5:]:
        name, rest = spec.split("=", 1)
        url, pid = rest.rsplit(",", 1)
        nodes[name] = (url, int(pid))
    crew = [Agent(n, proxy, project) for n in range(agents)]
    halfway = asyncio.Semaphore(0)
    killed = asyncio.Event()
    t0 = time.monotonic()
    runs = [asyncio.create_task(a.run(steps, halfway, killed)) for a in crew]
    for _ in crew:
        await halfway.acquire()
    first_nodes = {a.n: a.nodes[0] for a in crew}
    await refusals(proxy, nodes, crew[0].handle)
    await legacy_session(proxy)
    victim = first_nodes[0]
    os.kill(nodes[victim][1], signal.SIGKILL)
    print(f"killed {victim} with {sum(1 for v in first_nodes.values() if v == victim)} agents' images")
    killed.set()
    await asyncio.gather(*runs)
    elapsed = time.monotonic() - t0
    for a in crew:
        hit = first_nodes[a.n] == victim
        assert a.lost == (1 if hit else 0), (a.n, a.lost, a.nodes)
        if hit:
            assert len(a.nodes) == 2 and a.nodes[1] != victim, a.nodes
        else:
            assert a.transport_retries == 0 and len(a.nodes) == 1, (a.n, a.transport_retries, a.nodes)
    per_node = {}
    for v in first_nodes.values():
        per_node[v] = per_node.get(v, 0) + 1
    print(json.dumps({
        "victim": victim,
        "images_per_node_before": per_node,
        "lost": sum(a.lost for a in crew),
        "transport_retries": sum(a.transport_retries for a in crew),
        "seconds": round(elapsed, 2),
    }))


asyncio.run(main())
