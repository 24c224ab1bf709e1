// The official MCP Tasks client (`@modelcontextprotocol/ext-tasks`) on top
// of the TypeScript SDK 2.x, against cl-mcp-server over Streamable HTTP in
// the stateless 2026-07-28 era: the tasks extension (SEP-2663) end to end,
// through a client nobody here wrote. A long evaluate-lisp becomes a task
// and settles with its value; a quick one is answered directly; a tool that
// asks the user inside its task gets its answer through tasks/update; a
// tool that gathers input before its task starts; a tool error completes
// its task with isError; cancelling a running task leaves it cancelled.
// Prints one summary line; exits non-zero on any failure.
//
// Usage: node ts_tasks_client.mjs JS_DIR HTTP_URL
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";

const [jsDir, url] = process.argv.slice(2);
if (!jsDir || !url) {
  console.error("usage: ts_tasks_client.mjs JS_DIR HTTP_URL");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(jsDir), "package.json"));
const { Client, StreamableHTTPClientTransport } = require("@modelcontextprotocol/client");
const tasks = await import(
  path.join(path.resolve(jsDir), "node_modules/@modelcontextprotocol/ext-tasks/dist/client/index.js")
);

const EXTENSION = "io.modelcontextprotocol/tasks";
const client = new Client(
  { name: "cl-mcp-server-tasks-test", version: "1" },
  { versionNegotiation: { mode: "auto" }, capabilities: { elicitation: {} } },
);
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
assert.equal(client.getNegotiatedProtocolVersion(), "2026-07-28");
const caps = client.getServerCapabilities();
assert.ok(caps.extensions?.[EXTENSION], JSON.stringify(caps));
assert.equal(caps.tasks, undefined, JSON.stringify(caps));

// The SDK's own codec does not carry task results yet: the Tasks client
// sends its framed requests through this raw POST (with the routing
// headers a 2026-07-28 request needs) and counts the tasks created.
let nextId = 1;
const created = new Map();
async function rawDispatch(request) {
  const body = { jsonrpc: "2.0", id: nextId++, ...request };
  const headers = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": body.method,
  };
  const p = body.params ?? {};
  const name = p.name ?? p.uri ?? p.taskId;
  if (typeof name === "string") headers["mcp-name"] = name;
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  const answer = JSON.parse(await response.text());
  if (body.method === "tools/call" && answer.result?.resultType === "task") {
    created.set(p.name, (created.get(p.name) ?? 0) + 1);
  }
  return answer;
}

const asked = [];
const session = tasks.createTaskSessionFromClient(client, {
  endpointId: "cl-mcp-server-test",
  rawDispatch,
  v2RequestFraming: {
    protocolVersion: "2026-07-28",
    clientInfo: { name: "cl-mcp-server-tasks-test", version: "1" },
    clientCapabilities: { elicitation: {}, extensions: { [EXTENSION]: {} } },
  },
  onInputRequest: tasks.createApplicationInputHandler({
    elicitation: (request) => {
      asked.push(request);
      return { action: "accept", content: { confirm: true, name: "Alice" } };
    },
    sampling: () => {
      throw new Error("this test offers no sampling");
    },
    roots: () => ({ roots: [] }),
  }),
});

async function settle(tool, args) {
  const execution = await session.callTool(tool, args);
  const { outcome } = await execution.settle();
  return outcome;
}
const textOf = (result) => result.content?.[0]?.text ?? "";

try {
  // A long evaluation runs as a task and settles with its value.
  let o = await settle("evaluate-lisp", { code: "(progn (sleep 1.2) (* 6 7))" });
  assert.equal(o.status, "completed", JSON.stringify(o));
  assert.deepEqual(o.result.structuredContent.values, ["42"], JSON.stringify(o.result));
  assert.equal(created.get("evaluate-lisp"), 1, "the long evaluation made no task");
  // A quick one is answered directly.
  o = await settle("evaluate-lisp", { code: "(+ 1 2)" });
  assert.equal(o.status, "completed", JSON.stringify(o));
  assert.deepEqual(o.result.structuredContent.values, ["3"], JSON.stringify(o.result));
  assert.equal(created.get("evaluate-lisp"), 1, "the quick evaluation made a task");
  // Input inside a task (tasks/update), and input gathered before one.
  o = await settle("confirm_delete", { filename: "notes.txt" });
  assert.equal(o.status, "completed", JSON.stringify(o));
  assert.match(textOf(o.result), /notes\.txt confirmed/);
  assert.equal(created.get("confirm_delete"), 1);
  o = await settle("test_tool_with_task", {});
  assert.equal(o.status, "completed", JSON.stringify(o));
  assert.match(textOf(o.result), /Hello, Alice!/);
  assert.equal(created.get("test_tool_with_task"), 1);
  assert.equal(asked.length, 2, "the user was asked twice");
  // A tool error completes the task; a protocol error fails it.
  o = await settle("failing_job", {});
  assert.equal(o.status, "completed", JSON.stringify(o));
  assert.equal(o.result.isError, true, JSON.stringify(o));
  o = await settle("protocol_error_job", {});
  assert.equal(o.status, "failed", JSON.stringify(o));
  // Cancelling a running task.
  const execution = await session.callTool("slow_compute", { seconds: 30, label: "cancel-me" });
  setTimeout(() => execution.cancel().catch(() => {}), 1500);
  const { outcome } = await execution.settle();
  assert.equal(outcome.status, "cancelled", JSON.stringify(outcome));
  console.log(`tasks client ok: ${[...created.values()].reduce((a, b) => a + b, 0)} tasks`);
} finally {
  await session.close();
  await client.close();
}
