// Connects the official MCP TypeScript SDK (`@modelcontextprotocol/sdk`, its
// Client with StdioClientTransport and StreamableHTTPClientTransport) to
// cl-mcp-server and uses it as an agent would: evaluate-lisp (a value, an
// error, a timeout), one tool of each family, a resource read, a prompt and
// a completion. The SDK's callTool validates structuredContent against the
// tool's outputSchema once listTools has cached it; every call here first
// checks that a validator is cached for that tool and that it rejects a
// wrong result, so validation is known to be on. SDK 1.x speaks the
// initialize-handshake era only (2025-11-25 and older). Exits non-zero on
// any failure.
//
// Usage: node ts_sdk_client.mjs JS_DIR /path/to/cl-mcp-server project-root [http-url]
// JS_DIR is the directory whose node_modules holds the SDK (target/js).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [jsDir, binary, root, url] = process.argv.slice(2);
if (!jsDir || !binary || !root) {
  console.error("usage: ts_sdk_client.mjs JS_DIR BINARY PROJECT_ROOT [HTTP_URL]");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(jsDir), "package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
// The package's exports map hides its own package.json; read it directly.
const sdkVersion = JSON.parse(
  readFileSync(path.join(jsDir, "node_modules/@modelcontextprotocol/sdk/package.json"), "utf8"),
).version;

// Generous: the first evaluation waits for the image to start.
const LONG = { timeout: 180_000 };

/** Records every message the server sends, without changing what the SDK sees. */
function tap(transport) {
  const seen = [];
  let handler;
  Object.defineProperty(transport, "onmessage", {
    configurable: true,
    set(h) {
      handler = h;
    },
    get() {
      return handler && ((message, extra) => {
        seen.push(message);
        handler(message, extra);
      });
    },
  });
  return seen;
}

function textOf(result) {
  const first = result.content?.[0];
  assert.ok(first && first.type === "text" && first.text, JSON.stringify(result));
  return first.text;
}

let checked = 0;

async function call(client, name, args, { error = false, structured = true } = {}) {
  // The SDK validates only tools whose outputSchema it cached from tools/list.
  const validator = client.getToolOutputValidator(name);
  assert.ok(validator, `${name}: the SDK holds no outputSchema validator, so it would not check the result`);
  assert.equal(validator("not an object").valid, false, `${name}: the validator accepts anything`);
  const result = await client.callTool({ name, arguments: args }, undefined, LONG);
  assert.equal(Boolean(result.isError), error, `${name} ${JSON.stringify(args)}: ${JSON.stringify(result)}`);
  if (!structured) {
    // A refusal is a plain text result, which an outputSchema allows for errors.
    assert.equal(result.structuredContent, undefined, JSON.stringify(result));
    textOf(result);
    return result;
  }
  assert.ok(result.structuredContent, `${name}: no structuredContent`);
  // callTool has already thrown if the SDK found a mismatch; check again here.
  const again = validator(result.structuredContent);
  assert.ok(again.valid, `${name}: ${again.errorMessage}`);
  checked += 1;
  return result;
}

async function run(transport, label) {
  const seen = tap(transport);
  const client = new Client({ name: "cl-mcp-server-ts-sdk-test", version: "1" });
  await client.connect(transport, LONG);
  try {
    const init = seen.find((m) => m.result?.protocolVersion);
    assert.ok(init, "no initialize result seen");
    const version = init.result.protocolVersion;
    assert.match(version, /^2025-/);
    assert.equal(client.getServerVersion()?.name, "cl-mcp-server");

    const tools = await client.listTools();
    assert.equal(tools.nextCursor, undefined, "tools/list has more pages; the SDK caches only the last one");
    const names = tools.tools.map((t) => t.name);
    assert.ok(names.includes("evaluate-lisp"), names.join(" "));
    for (const t of tools.tools.filter((t) => !t.name.startsWith("test-"))) {
      // Every real tool (not the test-tools feature's) promises a structured result.
      assert.ok(t.outputSchema, `${t.name} lists no outputSchema`);
    }

    // evaluate-lisp in every outcome.
    let r = await call(client, "evaluate-lisp", { code: "(defun ts-sdk-twice (x) (* 2 x)) (ts-sdk-twice 21)" });
    assert.deepEqual(r.structuredContent.values, ["42"]);
    assert.ok(textOf(r).includes("=> 42"), textOf(r));
    r = await call(client, "evaluate-lisp", { code: "(car 5)" }, { error: true });
    assert.equal(r.structuredContent.error?.type, "TYPE-ERROR", JSON.stringify(r.structuredContent));
    r = await call(client, "evaluate-lisp", { code: "(loop)", timeoutSeconds: 0.5 }, { error: true });
    assert.equal(r.structuredContent.interrupted, true, JSON.stringify(r.structuredContent));
    r = await call(client, "evaluate-lisp", { code: "(ts-sdk-twice 5)" });
    assert.deepEqual(r.structuredContent.values, ["10"], "state lost after a timeout");

    // One tool of each family.
    r = await call(client, "image-info", {});
    assert.ok(textOf(r).includes("SBCL"), textOf(r));
    await call(client, "code-describe", { symbol: "ts-sdk-twice" });
    r = await call(client, "code-macroexpand", { form: "(when a b)" });
    assert.equal(r.structuredContent.expanded, true);
    await call(client, "asdf-list-systems", {});
    await call(client, "lisp-check-parens", { code: "(defun f (x) (+ x 1))" });
    await call(client, "clgrep-signatures", { path: "lisp/eval.lisp" });
    await call(client, "fs-get-project-info", {});
    // A refusal is an isError result the SDK accepts without structuredContent.
    r = await call(client, "fs-read-file", { path: "/etc/passwd" }, { error: true, structured: false });
    assert.match(textOf(r), /outside|root/i, textOf(r));

    // A resource, a prompt, a completion.
    const res = await client.readResource({ uri: "lisp://image/info" });
    assert.ok(res.contents?.[0]?.text?.includes("SBCL"), JSON.stringify(res));
    const prompt = await client.getPrompt({ name: "repl-driven-development", arguments: { task: "add a cache" } });
    assert.ok(prompt.messages.length > 0, JSON.stringify(prompt));
    let done = await client.complete({
      ref: { type: "ref/resource", uri: "lisp://package/{name}" },
      argument: { name: "name", value: "COMMON-LI" },
    });
    assert.ok(done.completion.values.includes("COMMON-LISP"), JSON.stringify(done));
    done = await client.complete({
      ref: { type: "ref/prompt", name: "add-tests" },
      argument: { name: "framework", value: "five" },
    });
    assert.ok(done.completion.values.includes("fiveam"), JSON.stringify(done));
    await client.ping();
    console.log(`${label}: protocol ${version}, ${names.length} tools, evaluate-lisp and every family ok`);
  } finally {
    await client.close();
  }
}

async function main() {
  console.log(`@modelcontextprotocol/sdk ${sdkVersion}`);
  await run(
    new StdioClientTransport({ command: binary, args: ["--project-root", root], stderr: "inherit" }),
    "stdio legacy",
  );
  if (url) {
    await run(new StreamableHTTPClientTransport(new URL(url)), "http legacy");
  }
  console.log(`${checked} tool results validated against their outputSchema by the SDK`);
}

main().catch((e) => {
  console.error(e?.stack ?? e);
  process.exit(1);
});
