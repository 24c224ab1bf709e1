"""A minimal MCP client over stdio for the Python benchmark scripts: starts
the server binary, does the handshake, and sends requests one at a time."""

import json
import subprocess


class StdioServer:
    def __init__(self, binary: str, args: list, client: str):
        self.process = subprocess.Popen([binary, *args], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        text=True)
        self.last_id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": client, "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        """The response to a request (notifications before it are skipped)."""
        self.last_id += 1
        self.send({"jsonrpc": "2.0", "id": self.last_id, "method": method, "params": params})
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise SystemExit(f"the server ended before answering {method}")
            m = json.loads(line)
            if m.get("id") == self.last_id:
                return m

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
