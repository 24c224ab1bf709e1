"""Connects the official MCP Python SDK to cl-mcp-server over stdio (and,
given a URL, over Streamable HTTP), in both protocol eras, lists tools and
calls one. Exits non-zero on any failure.

Usage: python3 python_sdk_client.py /path/to/cl-mcp-server [project-root [http-url]]
"""

import asyncio
import sys

from mcp import Client, StdioServerParameters


async def run(target, label: str, mode: str) -> None:
    async with Client(target, mode=mode, read_timeout_seconds=60) as client:
        version = client.protocol_version
        info = client.server_info
        assert info is not None and info.name == "cl-mcp-server", info
        tools = await client.list_tools()
        names = [t.name for t in tools.tools]
        assert names, "no tools listed"
        # The SDK validates every tool's schemas on listing; call a tool that
        # needs no Lisp image and has structured output if one exists.
        target = next((n for n in ("lisp-check-parens", "test-sleep") if n in names), None)
        assert target is not None, f"no known tool to call in {names}"
        if target == "lisp-check-parens":
            result = await client.call_tool(target, {"code": "(defun f (x) (+ x 1))"})
        else:
            result = await client.call_tool(target, {"seconds": 0})
        assert not result.is_error, result
        text = result.content[0].text
        assert text, result
        if mode == "legacy":
            await client.send_ping()
        print(f"{label} {mode}: protocol {version}, {len(names)} tools, {target} -> {text[:60]!r}")


async def main() -> None:
    binary = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 else "."
    stdio = StdioServerParameters(command=binary, args=["--project-root", root])
    await run(stdio, "stdio", "auto")  # probes server/discover: the stateless era
    await run(stdio, "stdio", "legacy")  # the initialize handshake
    if len(sys.argv) > 3:
        await run(sys.argv[3], "http", "auto")
        await run(sys.argv[3], "http", "legacy")


asyncio.run(main())
