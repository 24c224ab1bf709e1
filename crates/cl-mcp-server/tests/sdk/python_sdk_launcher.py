"""The official MCP Python SDK against a server whose image an
--image-launcher started: evaluate-lisp, then image-info (the SDK validates
both results against the tools' outputSchemas), which must say the image was
launched and by which launcher. Exits non-zero on any failure.

Usage: python3 python_sdk_launcher.py /path/to/cl-mcp-server launcher cache-dir
"""

import asyncio
import sys

from mcp import Client, StdioServerParameters


async def main() -> None:
    binary, launcher, cache = sys.argv[1:4]
    params = StdioServerParameters(
        command=binary,
        args=["--image-launcher", launcher, "--cache-dir", cache],
    )
    async with Client(params, read_timeout_seconds=300) as client:
        r = await client.call_tool("evaluate-lisp", {"code": "(* 6 7)"})
        assert not r.is_error, r
        assert r.structured_content["values"] == ["42"], r.structured_content
        r = await client.call_tool("image-info", {})
        assert not r.is_error, r
        info = r.structured_content
        assert info["mode"] == "launched", info
        assert info["launcher"].endswith("launchers/local"), info
        assert info["swankAddress"].startswith("127.0.0.1:"), info
        assert "sandbox" not in info, info
        print(f"launched: {info['mode']} by {info['launcher']} at {info['swankAddress']}")


asyncio.run(main())
