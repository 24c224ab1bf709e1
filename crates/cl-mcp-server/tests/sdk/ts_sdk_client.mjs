// Connects the official MCP TypeScript SDK to cl-mcp-server over stdio
// (StdioClientTransport) and Streamable HTTP (StreamableHTTPClientTransport)
// and uses it as an agent would: evaluate-lisp (a value, an error, a
// timeout), one tool of each family, a resource read, a prompt and
// completions. Two generations of the SDK:
//
// - `@modelcontextprotocol/sdk` 1.x: the initialize-handshake era only.
// - `@modelcontextprotocol/client` 2.x: both eras, the stateless 2026-07-28
//   one (versionNegotiation `auto`, which probes with server/discover) and
//   the handshake (`legacy`).
//
// Each SDK's callTool validates structuredContent against the tool's
// outputSchema from tools/list. The client is given its SDK's own Ajv
// validator wrapped in a counter, so every call checks that the SDK really
// ran the validation; for error results, which 2.x does not validate, the
// same validator is run here. Each compiled validator must reject a wrong
// result, so an empty schema cannot pass for a check. Exits non-zero on any
// failure.
//
// Usage: node ts_sdk_client.mjs JS_DIR /path/to/cl-mcp-server project-root [http-url]
// JS_DIR is the directory whose node_modules holds the SDKs (target/js).

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
// A package's exports map hides its own package.json; read it directly.
const versionOf = (pkg) =>
  JSON.parse(readFileSync(path.join(jsDir, "node_modules", pkg, "package.json"), "utf8")).version;

const SDKS = {
  v1: (() => {
    const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
    const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
    const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
    const { AjvJsonSchemaValidator } = require("@modelcontextprotocol/sdk/validation/ajv");
    return {
      label: `@modelcontextprotocol/sdk ${versionOf("@modelcontextprotocol/sdk")}`,
      Client,
      StdioClientTransport,
      StreamableHTTPClientTransport,
      Ajv: AjvJsonSchemaValidator,
      validatesErrors: true,
      callTool: (client, params, options) => client.callTool(params, undefined, options),
      clientOptions: () => ({}),
      // 1.x keeps the negotiated version to itself: read the initialize result.
      protocolVersion: (_client, seen) => seen.find((m) => m.result?.protocolVersion)?.result.protocolVersion,
    };
  })(),
  v2: (() => {
    const { Client, StreamableHTTPClientTransport } = require("@modelcontextprotocol/client");
    const { StdioClientTransport } = require("@modelcontextprotocol/client/stdio");
    const { AjvJsonSchemaValidator } = require("@modelcontextprotocol/client/validators/ajv");
    return {
      label: `@modelcontextprotocol/client ${versionOf("@modelcontextprotocol/client")}`,
      Client,
      StdioClientTransport,
      StreamableHTTPClientTransport,
      Ajv: AjvJsonSchemaValidator,
      validatesErrors: false,
      callTool: (client, params, options) => client.callTool(params, options),
      clientOptions: (mode) => ({ versionNegotiation: { mode } }),
      protocolVersion: (client) => client.getNegotiatedProtocolVersion(),
    };
  })(),
};

// Generous: the first evaluation waits for the image to start.
const LONG = { timeout: 180_000 };

/** The SDK's own validator provider, counting the validations it runs. */
function counting(provider) {
  const stats = { validated: 0, permissive: [] };
  return {
    stats,
    getValidator(schema) {
      const inner = provider.getValidator(schema);
      if (inner("not an object").valid) stats.permissive.push(schema);
      return (input) => {
        stats.validated += 1;
        return inner(input);
      };
    },
  };
}

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
      return (
        handler &&
        ((message, extra) => {
          seen.push(message);
          handler(message, extra);
        })
      );
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

async function run(sdk, transport, label, mode) {
  const validator = counting(new sdk.Ajv());
  const client = new sdk.Client(
    { name: "cl-mcp-server-ts-sdk-test", version: "1" },
    { jsonSchemaValidator: validator, ...sdk.clientOptions(mode) },
  );
  const seen = tap(transport);
  await client.connect(transport, LONG);
  const schemas = new Map();

  async function call(name, args, { error = false, structured = true } = {}) {
    const before = validator.stats.validated;
    const result = await sdk.callTool(client, { name, arguments: args }, LONG);
    assert.equal(Boolean(result.isError), error, `${name} ${JSON.stringify(args)}: ${JSON.stringify(result)}`);
    if (!structured) {
      // A refusal is a plain text result, which an outputSchema allows for errors.
      assert.equal(result.structuredContent, undefined, JSON.stringify(result));
      textOf(result);
      return result;
    }
    assert.ok(result.structuredContent, `${name}: no structuredContent`);
    if (error && !sdk.validatesErrors) {
      // This SDK leaves error results alone: validate with its validator here.
      assert.equal(validator.stats.validated, before, `${name}: unexpected validation`);
      const verdict = validator.getValidator(schemas.get(name))(result.structuredContent);
      assert.ok(verdict.valid, `${name}: ${verdict.errorMessage}`);
    } else {
      // callTool threw if the result did not match; make sure it checked.
      assert.equal(validator.stats.validated, before + 1, `${name}: the SDK did not validate the result`);
    }
    checked += 1;
    return result;
  }

  try {
    const version = sdk.protocolVersion(client, seen);
    assert.match(String(version), mode === "auto" ? /^2026-07-28$/ : /^2025-/);
    assert.equal(client.getServerVersion()?.name, "cl-mcp-server");

    const tools = await client.listTools();
    assert.equal(tools.nextCursor, undefined, "tools/list has more pages");
    const names = tools.tools.map((t) => t.name);
    assert.ok(names.includes("evaluate-lisp"), names.join(" "));
    // Every real tool promises a structured result (not the test-tools
    // feature's: ours are `test-*`, the conformance suite's fixtures use `_`
    // or, like `greet`, say so in their title).
    const fixture = (t) =>
      t.name.startsWith("test-") || t.name.includes("_") || (t.title ?? "").includes("(conformance fixture)");
    for (const t of tools.tools.filter((t) => !fixture(t))) {
      assert.ok(t.outputSchema, `${t.name} lists no outputSchema`);
      schemas.set(t.name, t.outputSchema);
    }

    // evaluate-lisp in every outcome.
    let r = await call("evaluate-lisp", { code: "(defun ts-sdk-twice (x) (* 2 x)) (ts-sdk-twice 21)" });
    assert.deepEqual(r.structuredContent.values, ["42"]);
    assert.ok(textOf(r).includes("=> 42"), textOf(r));
    r = await call("evaluate-lisp", { code: "(car 5)" }, { error: true });
    assert.equal(r.structuredContent.error?.type, "TYPE-ERROR", JSON.stringify(r.structuredContent));
    r = await call("evaluate-lisp", { code: "(loop)", timeoutSeconds: 0.5 }, { error: true });
    assert.equal(r.structuredContent.interrupted, true, JSON.stringify(r.structuredContent));
    r = await call("evaluate-lisp", { code: "(ts-sdk-twice 5)" });
    assert.deepEqual(r.structuredContent.values, ["10"], "state lost after a timeout");

    // One tool of each family.
    r = await call("image-info", {});
    assert.ok(textOf(r).includes("SBCL"), textOf(r));
    assert.equal(r.structuredContent.evaluationChannel, true, JSON.stringify(r.structuredContent));
    assert.equal(r.structuredContent.evaluationSocket, "unix", JSON.stringify(r.structuredContent));
    await call("code-describe", { symbol: "ts-sdk-twice" });
    r = await call("code-macroexpand", { form: "(when a b)" });
    assert.equal(r.structuredContent.expanded, true);
    await call("asdf-list-systems", {});
    await call("lisp-check-parens", { code: "(defun f (x) (+ x 1))" });
    await call("clgrep-signatures", { path: "lisp/eval.lisp" });
    await call("fs-get-project-info", {});
    // A refusal is an isError result the SDK accepts without structuredContent.
    r = await call("fs-read-file", { path: "/etc/passwd" }, { error: true, structured: false });
    assert.match(textOf(r), /outside|root/i, textOf(r));

    // A resource, a prompt, completions.
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
    if (mode === "legacy") await client.ping();

    assert.deepEqual(validator.stats.permissive, [], "a validator accepts anything");
    console.log(`${sdk.label} ${label} ${mode}: protocol ${version}, ${names.length} tools, evaluate-lisp and every family ok`);
  } finally {
    await client.close();
  }
}

async function main() {
  const stdio = (sdk) =>
    new sdk.StdioClientTransport({ command: binary, args: ["--project-root", root], stderr: "inherit" });
  const http = (sdk) => new sdk.StreamableHTTPClientTransport(new URL(url));
  const runs = [
    [SDKS.v1, "stdio", "legacy", stdio],
    [SDKS.v1, "http", "legacy", http],
    [SDKS.v2, "stdio", "auto", stdio],
    [SDKS.v2, "stdio", "legacy", stdio],
    [SDKS.v2, "http", "auto", http],
    [SDKS.v2, "http", "legacy", http],
  ];
  for (const [sdk, label, mode, transport] of runs) {
    if (label === "http" && !url) continue;
    await run(sdk, transport(sdk), label, mode);
  }
  console.log(`${checked} tool results validated against their outputSchema`);
}

main().catch((e) => {
  console.error(e?.stack ?? e);
  process.exit(1);
});
