"""Connects the official MCP Python SDK to cl-mcp-server over stdio (and,
given a URL, over Streamable HTTP), in both protocol eras, and uses it as an
agent would: evaluate-lisp (a value, an error, a timeout), one tool of each
family, a resource read, a prompt and a completion. The SDK validates every
successful tool result against the tool's outputSchema. Exits non-zero on
any failure.

Given a Swank address, it also attaches to that image (the user's) and
takes over an application thread waiting in the debugger. It also runs a
FiveAM project's tests in a project of their own, and measures a project's
coverage (its HTML report read back and parsed).

Usage: python3 python_sdk_client.py /path/to/cl-mcp-server project-root [http-url [swank-address]]
"""

import asyncio
import base64
import os
import sys
import tempfile
from html.parser import HTMLParser

import jsonschema

from mcp import Client, StdioServerParameters
from mcp_types._types import PromptReference, ResourceTemplateReference


def text_of(result) -> str:
    assert result.content and result.content[0].text, result
    return result.content[0].text


async def call(client, name: str, args: dict, *, error: bool = False):
    result = await client.call_tool(name, args)
    assert bool(result.is_error) == error, f"{name} {args}: {result}"
    assert result.structured_content is not None, f"{name}: no structuredContent"
    return result


async def run(target, label: str, mode: str) -> None:
    async with Client(target, mode=mode, read_timeout_seconds=120) as client:
        version = client.protocol_version
        info = client.server_info
        assert info is not None and info.name == "cl-mcp-server", info
        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        assert "evaluate-lisp" in names, names

        # evaluate-lisp in every outcome.
        r = await call(client, "evaluate-lisp", {"code": "(defun sdk-twice (x) (* 2 x)) (sdk-twice 21)"})
        assert r.structured_content["values"] == ["42"], r.structured_content
        assert "=> 42" in text_of(r)
        r = await call(client, "evaluate-lisp", {"code": "(car 5)"}, error=True)
        assert r.structured_content["error"]["type"] == "TYPE-ERROR", r.structured_content
        # Code that does not read: said, with how many forms before it ran.
        r = await call(client, "evaluate-lisp", {"code": "(sdk-twice 1) (+ 1 2))"}, error=True)
        assert "(The 2 forms before it ran.)" in r.structured_content["error"]["message"], r.structured_content
        # A missing closer: an error whose [REPAIR] note shows the change and
        # the code with its closers placed by indentation; none of it ran.
        code = "(defun sdk-thrice (x)\n  (* 3 x)\n(sdk-thrice 2)"
        r = await call(client, "evaluate-lisp", {"code": code}, error=True)
        assert "[REPAIR]" in text_of(r), text_of(r)
        assert 'added ")" at line 2, column 10' in text_of(r), text_of(r)
        assert "(defun sdk-thrice (x)\n  (* 3 x))\n(sdk-thrice 2)" in text_of(r), text_of(r)
        r = await call(client, "evaluate-lisp", {"code": "(fboundp 'sdk-thrice)"})
        assert r.structured_content["values"] == ["NIL"], r.structured_content
        r = await call(client, "evaluate-lisp", {"code": "(loop)", "timeoutSeconds": 0.5}, error=True)
        assert r.structured_content.get("interrupted") is True, r.structured_content
        r = await call(client, "evaluate-lisp", {"code": "(sdk-twice 5)"})
        assert r.structured_content["values"] == ["10"], "state lost after a timeout"

        # The debugger that waits: an error suspended, resolved with use-value.
        code = '(sdk-twice (restart-case (error "no x") (use-value (v) v)))'
        r = await call(client, "evaluate-lisp", {"code": code, "debug": True}, error=True)
        assert text_of(r).startswith("[DEBUGGER level 1]"), text_of(r)
        number = r.structured_content["debugger"]["debugger"]
        r = await call(client, "debugger-backtrace", {"debugger": number})
        assert any(x["name"] == "USE-VALUE" for x in r.structured_content["restarts"]), r.structured_content
        # `start` is a frame number, as listed.
        first = r.structured_content["frames"][0]["index"]
        r = await call(client, "debugger-backtrace", {"debugger": number, "start": first, "count": 1})
        assert [x["index"] for x in r.structured_content["frames"]] == [first], r.structured_content
        # use-value without its value: a plain error, the debugger still waits.
        r = await client.call_tool("debugger-restart", {"debugger": number, "restart": "use-value"})
        assert r.is_error and "Restart USE-VALUE takes 1 value" in text_of(r), r
        r = await call(client, "debugger-restart", {"debugger": number, "restart": "use-value", "values": ["4"]})
        assert r.structured_content["values"] == ["8"], r.structured_content
        # A frame's value inspected while the debugger waits, then stepping.
        r = await call(client, "evaluate-lisp", {"code": '(let ((sdk-local (list 1 2))) (princ "before") (break "look") sdk-local)', "debug": True}, error=True)
        assert r.structured_content["stdout"] == "before", r.structured_content
        number = r.structured_content["debugger"]["debugger"]
        frame = r.structured_content["debugger"]["frames"][0]["index"]
        r = await call(client, "inspect-object", {"debugger": number, "frame": frame, "code": "(list 1 2)"})
        assert r.structured_content["total"] == 2, r.structured_content
        # Code in a frame: its values and its own warnings; a frame that
        # does not exist is a plain error.
        r = await call(client, "debugger-frame", {"debugger": number, "frame": frame, "code": "(let ((z (lambda () (sdk-undefined-fn)))) (list 3 4))"})
        assert r.structured_content["values"] == ["(3 4)"], r.structured_content
        assert any("SDK-UNDEFINED-FN" in w for w in r.structured_content["warnings"]), r.structured_content
        r = await client.call_tool("debugger-frame", {"debugger": number, "frame": 9999})
        assert r.is_error and "There is no frame 9999" in text_of(r), r
        r = await call(client, "debugger-restart", {"debugger": number, "action": "continue"})
        assert r.structured_content["values"] == ["(1 2)"], r.structured_content
        await call(client, "evaluate-lisp", {"code": "(declaim (optimize (debug 3))) (defun sdk-step (x) (let ((y (sdk-twice x))) (+ y (sdk-twice y))))"})
        r = await call(client, "evaluate-lisp", {"code": "(step (sdk-step 2))", "debug": True}, error=True)
        assert "STEP-FORM-CONDITION" in text_of(r), text_of(r)
        r = await call(client, "debugger-restart", {"action": "step"}, error=True)
        assert "(SDK-TWICE X)" in text_of(r), text_of(r)
        r = await call(client, "debugger-restart", {"action": "next"}, error=True)
        assert "(SDK-TWICE Y)" in text_of(r), text_of(r)
        r = await call(client, "debugger-restart", {"action": "out"})
        assert r.structured_content["values"] == ["12"], r.structured_content
        # Errors in frame code nest up to level 8, then a plain refusal.
        r = await call(client, "evaluate-lisp", {"code": '(error "sdk deep")', "debug": True}, error=True)
        deep = r.structured_content["debugger"]["debugger"]
        for level in range(2, 9):
            r = await call(client, "debugger-frame", {"debugger": deep, "code": f'(error "level {level}")'}, error=True)
            assert r.structured_content["nested"]["level"] == level, r.structured_content
        r = await client.call_tool("debugger-frame", {"debugger": deep, "code": "(error \"too deep\")"})
        assert r.is_error and "at level 8, the deepest" in text_of(r), r
        r = await call(client, "debugger-restart", {"debugger": deep, "action": "abort"}, error=True)

        # One tool of each family.
        r = await call(client, "image-info", {})
        assert "SBCL" in text_of(r)
        assert r.structured_content["evaluationChannel"] is True, r.structured_content
        assert r.structured_content["evaluationSocket"] == "unix", r.structured_content
        r = await call(client, "code-describe", {"symbol": "sdk-twice"})
        r = await call(client, "code-macroexpand", {"form": "(when a b)"})
        assert r.structured_content["expanded"] is True
        r = await call(client, "asdf-list-systems", {})
        # A test run read from RT's real summary (tests/frameworks/rt): one
        # failure is outcome "failed"; all passing is the only success.
        r = await call(client, "asdf-test-system", {"system": "demo-rt"}, error=True)
        assert r.structured_content["outcome"] == "failed", r.structured_content
        assert r.structured_content["success"] is False, r.structured_content
        assert r.structured_content["summary"] == {"framework": "rt", "passed": 1, "failed": 1, "skipped": 0}, r.structured_content
        # RT's failure itemised from its output, at its deftest; the failed
        # result (which the SDK does not validate) held to the schema here.
        schema = next(t.output_schema for t in (await client.list_tools()).tools if t.name == "asdf-test-system")
        jsonschema.validate(r.structured_content, schema)
        [rt_failure] = r.structured_content["failures"]
        assert (rt_failure["test"], rt_failure["path"], rt_failure["message"]) == (
            "DEMO-RT::SUBTRACTS", "tests/frameworks/rt/tests.lisp", "expected 5, got 1"), rt_failure
        assert "suiteOutput" in r.structured_content, r.structured_content
        r = await call(client, "asdf-test-system", {"system": "demo-rt/green", "diagnostics": "all"})
        assert r.structured_content["outcome"] == "passed", r.structured_content
        r = await call(client, "lisp-check-parens", {"code": "(defun f (x) (+ x 1))"})
        r = await call(client, "clgrep-signatures", {"path": "lisp/eval.lisp"})
        r = await call(client, "fs-get-project-info", {})

        # The debug tools.
        r = await call(client, "inspect-object", {"code": "(let ((h (make-hash-table))) (setf (gethash :a h) (list 1 2)) h)"})
        assert r.structured_content["kind"] == "hash-table", r.structured_content
        r = await call(client, "inspect-object", {"part": 0})
        assert r.structured_content["kind"] == "list", r.structured_content
        r = await call(client, "trace-functions", {"trace": ["sdk-twice"]})
        await call(client, "evaluate-lisp", {"code": "(sdk-twice 4)"})
        r = await call(client, "trace-functions", {"untraceAll": True})
        assert r.structured_content["records"][-1]["values"] == ["8"], r.structured_content
        # A trace that records fewer calls than the code makes says so; one
        # that would record nothing is refused.
        r = await call(client, "trace-functions", {"trace": ["car"], "untraceAll": True})
        assert "CAR is a standard function" in text_of(r), text_of(r)
        await call(client, "evaluate-lisp", {"code": "(defclass sdk-pt () ((x :initarg :x :accessor sdk-px)))"})
        r = await call(client, "trace-functions", {"trace": ["(method sdk-px (sdk-pt))"], "untraceAll": True}, error=True)
        assert "Trace the generic function SDK-PX" in text_of(r), text_of(r)
        # A hash table's key with parts of its own is a part too.
        r = await call(client, "inspect-object", {"code": "(let ((h (make-hash-table :test 'equal))) (setf (gethash (list 1 2) h) 3) h)"})
        assert [p["label"] for p in r.structured_content["parts"]] == ["key (1 2)", "(1 2)"], r.structured_content
        r = await call(client, "profile-code", {"code": "(loop repeat 1000 sum (sdk-twice 3))", "countCalls": ["sdk-twice"]})
        assert r.structured_content["calls"] == [{"name": "SDK-TWICE", "count": 1000}], r.structured_content
        # The flame graph: a PNG image block and a link to the SVG, both
        # validated by the SDK's content types.
        await call(client, "evaluate-lisp", {"code": "(defun sdk-spin (n) (let ((s 0)) (dotimes (i n s) (setf s (logand (+ s i) 65535)))))"})
        r = await call(client, "profile-code", {"code": "(loop repeat 20 sum (sdk-spin 1000000))"})
        kinds = [type(b).__name__ for b in r.content]
        assert kinds == ["TextContent", "ImageContent", "ResourceLink"], (kinds, text_of(r))
        image, link = r.content[1], r.content[2]
        assert image.mime_type == "image/png" and base64.b64decode(image.data).startswith(b"\x89PNG"), image.mime_type
        assert str(link.uri) == r.structured_content["flameGraph"], (link, r.structured_content)
        svg = await client.read_resource(str(link.uri))
        assert "SDK-SPIN" in svg.contents[0].text, svg.contents[0].text[:300]
        r = await call(client, "list-threads", {})
        assert any(t["current"] for t in r.structured_content["threads"]), r.structured_content

        # A resource, a prompt, a completion.
        res = await client.read_resource("lisp://image/info")
        assert res.contents and "SBCL" in res.contents[0].text, res
        prompt = await client.get_prompt("repl-driven-development", {"task": "add a cache"})
        assert prompt.messages, prompt
        done = await client.complete(
            ResourceTemplateReference(type="ref/resource", uri="lisp://package/{name}"),
            {"name": "name", "value": "COMMON-LI"},
        )
        assert "COMMON-LISP" in done.completion.values, done
        done = await client.complete(
            PromptReference(type="ref/prompt", name="add-tests"), {"name": "framework", "value": "five"}
        )
        assert "fiveam" in done.completion.values, done
        if mode == "legacy":
            await client.send_ping()
        print(f"{label} {mode}: protocol {version}, {len(names)} tools, evaluate-lisp and every family ok")


async def debugger_limits(binary: str, root: str) -> None:
    """What the debug tools refuse or stop, as a client meets it: code run
    after a stack exhaustion, a restarted frame's call, a print-object that
    never returns, data too deep to print, a cancelled frame evaluation, the
    image's main thread."""
    stdio = StdioServerParameters(command=binary, args=["--project-root", root])
    async with Client(stdio, mode="legacy", read_timeout_seconds=120) as client:
        await call(client, "evaluate-lisp", {"code": "(defvar *sdk-kept* 7) (defun sdk-deep (n) (1+ (sdk-deep (1+ n))))"})
        r = await call(client, "evaluate-lisp", {"code": "(sdk-deep 0)", "debug": True}, error=True)
        assert text_of(r).startswith("[DEBUGGER level 1]"), text_of(r)
        exhausted = r.structured_content["debugger"]["debugger"]
        frame = r.structured_content["debugger"]["frames"][0]["index"]
        r = await client.call_tool("debugger-frame", {"debugger": exhausted, "code": "(sdk-deep 0)"})
        assert r.is_error and "guard page is not re-armed until the debugger returns" in text_of(r), text_of(r)
        r = await client.call_tool("debugger-restart", {"debugger": exhausted, "action": "restart", "frame": frame})
        assert r.is_error and "while the stack is exhausted" in text_of(r), text_of(r)
        await call(client, "debugger-restart", {"debugger": exhausted, "action": "abort"}, error=True)
        r = await call(client, "evaluate-lisp", {"code": "*sdk-kept*"})
        assert r.structured_content["values"] == ["7"], "the image died"

        # A restarted frame gets its call's own arguments (K stays out).
        await call(client, "evaluate-lisp", {"code": "(declaim (optimize (debug 2))) (defvar *sdk-calls* '()) "
                                             "(defun sdk-kf (x &key (k 1 k-p)) (push (list x k k-p) *sdk-calls*) (error \"kf ~a\" x))"})
        r = await call(client, "evaluate-lisp", {"code": "(sdk-kf 0)", "debug": True}, error=True)
        number = r.structured_content["debugger"]["debugger"]
        frame = next(f["index"] for f in r.structured_content["debugger"]["frames"] if "SDK-KF" in f["frame"])
        r = await call(client, "debugger-restart", {"debugger": number, "action": "restart", "frame": frame}, error=True)
        assert text_of(r).startswith("[DEBUGGER level 1]"), text_of(r)
        r = await call(client, "evaluate-lisp", {"code": "(format nil \"~s\" *sdk-calls*)"})
        assert r.structured_content["values"] == ['"((0 1 NIL) (0 1 NIL))"'], r.structured_content

        # Frame code whose call is abandoned (the SDK sends
        # notifications/cancelled) is stopped: the debugger answers again.
        try:
            await asyncio.wait_for(client.call_tool("debugger-frame", {"debugger": number, "code": "(loop)"}), 1.0)
            raise AssertionError("(loop) in a frame answered")
        except asyncio.TimeoutError:
            pass
        # (Were it not stopped, this would wait behind it for its 30 s.)
        started = asyncio.get_running_loop().time()
        r = await call(client, "debugger-frame", {"debugger": number, "frame": frame, "code": "(+ 1 2)"})
        assert r.structured_content["values"] == ["3"], r.structured_content
        assert asyncio.get_running_loop().time() - started < 10, "the cancelled frame code went on"

        # A print-object that never returns: stopped at the timeout, in a
        # frame and outside, with no thread left running.
        await call(client, "evaluate-lisp", {"code": "(defstruct sdk-spin a) (defmethod print-object ((s sdk-spin) out) (loop)) "
                                             "(defvar *sdk-spin* (make-sdk-spin))"})
        r = await client.call_tool("inspect-object", {"debugger": number, "frame": frame, "code": "*sdk-spin*", "timeoutSeconds": 1})
        assert r.is_error and "did not finish within 1 s and was stopped" in text_of(r), text_of(r)
        await call(client, "debugger-restart", {"debugger": number, "action": "abort"}, error=True)
        threads = "(length (sb-thread:list-all-threads))"
        before = (await call(client, "evaluate-lisp", {"code": threads})).structured_content["values"]
        for _ in range(2):
            r = await client.call_tool("inspect-object", {"code": "*sdk-spin*", "timeoutSeconds": 1})
            assert r.is_error and text_of(r).startswith("[TIMEOUT] Showing the inspected object"), text_of(r)
        after = (await call(client, "evaluate-lisp", {"code": threads})).structured_content["values"]
        # No thread left running (one ending meanwhile is fine).
        assert int(after[0]) <= int(before[0]), (before, after)
        r = await call(client, "inspect-object", {"code": "(let ((x nil)) (dotimes (i 100000 x) (setf x (list x))))"})
        assert r.structured_content["object"] == "(((#)))", r.structured_content

        # The image's main thread is not interrupted.
        r = await call(client, "list-threads", {})
        main = next(t["id"] for t in r.structured_content["threads"] if t["name"] == "main thread")
        r = await client.call_tool("list-threads", {"action": "interrupt", "thread": main})
        assert r.is_error and "main thread" in text_of(r), text_of(r)
        r = await call(client, "evaluate-lisp", {"code": "*sdk-kept*"})
        assert r.structured_content["values"] == ["7"], "the image died"
    print("debugger limits: exhausted stack refused, frame restarted as called, "
          "frame code cancelled, print-object stopped, deep data shown, main thread kept")


async def attached(binary: str, swank: str) -> None:
    """The user's thread that entered the debugger: seen, then taken over."""
    target = StdioServerParameters(command=binary, args=["--swank", swank])
    async with Client(target, mode="legacy", read_timeout_seconds=120) as client:
        await call(client, "evaluate-lisp", {"code": "(setf cl-user::*go* t)"})
        thread = None
        for _ in range(100):
            r = await call(client, "list-threads", {})
            found = [t for t in r.structured_content["threads"] if t["name"] == "sdk-user" and t["inDebugger"]]
            if found:
                thread = found[0]["id"]
                break
            await asyncio.sleep(0.05)
        assert thread is not None, r.structured_content
        r = await call(client, "debugger-backtrace", {"thread": thread})
        assert r.structured_content["debugger"] == 0 and r.structured_content["thread"] == thread, r.structured_content
        assert any(x["name"] == "USE-VALUE" for x in r.structured_content["restarts"]), r.structured_content
        r = await call(client, "debugger-backtrace", {"thread": thread, "takeOver": True})
        assert r.structured_content["thread"] == thread, r.structured_content
        number = r.structured_content["debugger"]
        r = await call(client, "debugger-restart", {"debugger": number, "restart": "use-value", "values": ["5"]})
        assert "[THREAD]" in text_of(r), text_of(r)
        r = await call(client, "evaluate-lisp", {"code": "cl-user::*sdk-served*"})
        assert r.structured_content["values"] == ["5"], r.structured_content
        print("attached: a user's thread taken over and resolved")


async def cold_start(binary: str, cache: str, lisp: str) -> None:
    """A first start as the SDK makes one: the SDK's own environment (HOME,
    PATH, SHELL, TERM: no LANG) and an empty cache (--cache-dir). UTF-8 text
    must read, in code and in a file, on a Lisp that would read ASCII only.
    In a project of its own (a fresh directory): parentheses repaired on
    write and edit, or refused."""
    # The project beside the cache, not inside it: a cache inside the
    # project root is refused (the image could write it).
    root = cache + "-project"
    os.makedirs(root)
    target = StdioServerParameters(
        command=binary, args=["--project-root", root, "--cache-dir", cache, "--lisp", lisp]
    )
    async with Client(target, mode="legacy", read_timeout_seconds=300) as client:
        r = await call(client, "evaluate-lisp", {"code": '(length "\u00e9t\u00e9 \u2014 caf\u00e9")'})
        assert r.structured_content["values"] == ["10"], r.structured_content
        r = await call(client, "image-info", {})
        assert lisp.upper() in text_of(r).upper(), text_of(r)
        # A missing closer: repaired by indentation, the change said, the
        # file compiles; an unclosed string: refused, nothing written.
        broken = ';; caf\u00e9\n(defun sdk-greet (name)\n  (format nil "hi ~a" name)\n\n(defun sdk-other () 2)\n'
        r = await call(client, "fs-write-file", {"path": "greet.lisp", "content": broken})
        assert r.structured_content["repairs"], r.structured_content
        r = await call(client, "lisp-compile-file", {"path": "greet.lisp"})
        assert r.structured_content["success"] is True, r.structured_content
        r = await client.call_tool("fs-write-file", {"path": "bad.lisp", "content": '(defun f () "open\n'})
        assert r.is_error and "Not written" in text_of(r), r
        assert not os.path.exists(os.path.join(root, "bad.lisp"))
        r = await call(client, "lisp-edit-form", {
            "path": "greet.lisp", "formType": "defun", "formName": "sdk-other",
            "operation": "replace", "content": "(defun sdk-other ()\n  (list 2 3)\n"})
        assert r.structured_content["repairs"], r.structured_content
        # Builds queue one at a time; the wait counts against the timeout:
        # a compile with a 2 s timeout behind a 6 s one never starts.
        with open(os.path.join(root, "slow.lisp"), "w") as f:
            f.write("(eval-when (:compile-toplevel) (sleep 6))\n(defun sdk-slow () 1)\n")
        slow = asyncio.create_task(client.call_tool("lisp-compile-file", {"path": "slow.lisp", "load": False}))
        await asyncio.sleep(0.5)
        started = asyncio.get_running_loop().time()
        r = await client.call_tool("lisp-compile-file", {"path": "greet.lisp", "timeoutSeconds": 2})
        waited = asyncio.get_running_loop().time() - started
        assert r.is_error and "never started" in text_of(r) and "slow.lisp" in text_of(r), r
        assert waited < 4.5, waited
        r = await slow
        assert not r.is_error, r
        print(f"cold start on {lisp}: SDK environment, empty cache, UTF-8 read, parentheses repaired, "
              f"a queued build timed out in {waited:.1f} s")


TEST_FILES = {
    "adder.asd": """(defsystem "adder" :components ((:file "adder"))
  :in-order-to ((test-op (test-op "adder/tests"))))

(defsystem "adder/tests" :depends-on ("adder" "fiveam")
  :components ((:file "tests"))
  :perform (test-op (o c) (uiop:symbol-call :fiveam :run! :adder)))
""",
    "adder.lisp": """(defpackage #:adder (:use #:cl) (:export #:add))
(in-package #:adder)
(defun add (a b) (+ a b))
""",
    "tests.lisp": """(defpackage #:adder-tests (:use #:cl #:fiveam #:adder))
(in-package #:adder-tests)
(def-suite :adder)
(in-suite :adder)

(test adds
  (is (= 4 (add 2 2)))
  (is (= 5 (add 2 2))))

(defmacro def-add-test (name a b sum)
  `(test ,name (is (= ,sum (add ,a ,b)))))

(def-add-test gen-good 1 2 3)
(def-add-test gen-bad 2 2 5)
""",
}


def project_server(binary: str, root: str, files: dict) -> StdioServerParameters:
    """Writes a project's files under `root`; the server to start on it."""
    os.makedirs(root)
    for name, text in files.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    return StdioServerParameters(command=binary, args=["--project-root", root])


async def test_run(binary: str, base: str) -> None:
    """A FiveAM project's tests as an agent runs them: a short answer with
    each failure at its check (a macro-made test at the macro call), the
    nearest names for a misspelt test, a forced rebuild."""
    target = project_server(binary, os.path.join(base, "adder"), TEST_FILES)
    async with Client(target, mode="legacy", read_timeout_seconds=300) as client:
        tools = await client.list_tools()
        schema = next(t.output_schema for t in tools.tools if t.name == "asdf-test-system")
        # The SDK validates successful results; a failed run is validated here.
        r = await call(client, "asdf-test-system", {"system": "adder"}, error=True)
        jsonschema.validate(r.structured_content, schema)
        failures = {f["test"]: f for f in r.structured_content["failures"]}
        adds = failures["ADDER-TESTS::ADDS"]
        assert (adds["path"], adds["line"], adds["column"], adds["at"]) == ("tests.lisp", 8, 3, "check"), adds
        made = failures["ADDER-TESTS::GEN-BAD"]
        assert (made["line"], made["at"]) == (14, "macro-call"), made
        text = text_of(r)
        assert "\ntests.lisp:8:3: FAIL ADDER-TESTS::ADDS" in text, text
        assert "Running test" not in text and len(text) < 600, text
        r = await call(client, "asdf-test-system", {"system": "adder", "test": "gen-bda"}, error=True)
        assert "Did you mean ADDER-TESTS::GEN-BAD?" in text_of(r), text_of(r)
        jsonschema.validate(r.structured_content, schema)
        r = await call(client, "asdf-test-system", {"system": "adder", "test": "gen-good"})
        assert r.structured_content["summary"]["passed"] == 1, r.structured_content
        r = await call(client, "asdf-test-system", {"system": "adder", "force": True}, error=True)
        assert r.structured_content["summary"]["failed"] == 2, r.structured_content
    print(f"test run: {len(text)} bytes, failures at their checks, nearest names, force")


async def loose_file(binary: str, base: str, exercises: str) -> None:
    """An exercise-style folder (a stub, a test file beginning `(load
    "yacht")`, no .asd) run by `file`, with a wrong solution: each failure
    at its check, the result valid against the output schema."""
    root = os.path.join(base, "exercise")
    os.makedirs(os.path.join(root, "yacht"))
    for name, source in (("yacht-test.lisp", "yacht-test.lisp"), ("yacht.lisp", "broken/yacht.lisp")):
        with open(os.path.join(exercises, "yacht", source)) as f, \
                open(os.path.join(root, "yacht", name), "w") as out:
            out.write(f.read())
    target = StdioServerParameters(command=binary, args=["--project-root", root], cwd=base)
    async with Client(target, mode="legacy", read_timeout_seconds=300) as client:
        tools = await client.list_tools()
        schema = next(t.output_schema for t in tools.tools if t.name == "asdf-test-system")
        r = await call(client, "asdf-test-system", {"file": "yacht/yacht-test.lisp"}, error=True)
        jsonschema.validate(r.structured_content, schema)
        failures = r.structured_content["failures"]
        assert [(f["path"], f["at"]) for f in failures] == [("yacht/yacht-test.lisp", "check")] * 2, failures
        # `test` alone: the suite the file defined, still located.
        r = await call(client, "asdf-test-system", {"test": "yacht-test::yacht-suite"}, error=True)
        jsonschema.validate(r.structured_content, schema)
        assert r.structured_content["failures"][0]["line"] == 15, r.structured_content
        r = await call(client, "asdf-test-system", {"file": "yacht/yacht-test.lisp", "test": "choice"})
        assert r.structured_content["summary"]["passed"] == 1, r.structured_content
    print(f"loose file: {len(failures)} failures at their checks, by file and by suite")


COVERAGE_FILES = {
    "calc.asd": """(defsystem "calc"
  :components ((:file "calc"))
  :in-order-to ((test-op (test-op "calc/tests"))))
(defsystem "calc/tests"
  :depends-on ("calc" "fiveam")
  :components ((:file "calc-tests"))
  :perform (test-op (o c) (symbol-call :fiveam :run! :calc)))
""",
    "calc.lisp": """(defpackage :calc (:use :cl) (:export #:half #:unused))
(in-package :calc)
(defun half (x)
  (/ x 2))
(defun unused (x)
  (list x x))
""",
    "calc-tests.lisp": """(defpackage :calc-tests (:use :cl :fiveam))
(in-package :calc-tests)
(def-suite :calc)
(in-suite :calc)
(test halves (is (= 2 (calc:half 4))))
""",
}


class CoverageHtml(HTMLParser):
    """What a coverage page shows: its tables' classes, its heading, and
    each link's text with its target."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list = []
        self.rows = 0
        self.links: dict = {}
        self.heading = ""
        self._href = None
        self._in_h3 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append(a.get("class"))
        elif tag == "tr" and a.get("class") in ("odd", "even"):
            self.rows += 1
        elif tag == "a":
            self._href = a.get("href")
        elif tag == "h3":
            self._in_h3 = True

    def handle_endtag(self, tag):
        if tag == "a":
            self._href = None
        elif tag == "h3":
            self._in_h3 = False

    def handle_data(self, data):
        if self._href:
            self.links[data.strip()] = self._href
        if self._in_h3:
            self.heading += data


def parsed(html: str) -> CoverageHtml:
    page = CoverageHtml()
    page.feed(html)
    return page


async def coverage(binary: str, base: str) -> None:
    """A project's coverage as an agent asks for it: the lines never run
    (the SDK validates the result), the HTML report read as resources and
    parsed: the index's table names the file and links to its page."""
    root = os.path.join(base, "calc")
    target = project_server(binary, root, COVERAGE_FILES)
    async with Client(target, mode="legacy", read_timeout_seconds=300) as client:
        r = await call(client, "asdf-test-system", {"system": "calc", "coverage": True})
        c = r.structured_content["coverage"]
        src = next(f for f in c["files"] if f["path"] == "calc.lisp")
        assert src["uncovered"] == [{"line": 6, "endLine": 6, "kind": "not-executed"}], src
        assert "calc.lisp:6: not executed" in text_of(r), text_of(r)
        res = await client.read_resource(c["reportUri"])
        index = res.contents[0]
        assert index.mime_type == "text/html", index
        page = parsed(index.text)
        assert "summary" in page.tables and page.rows == 2, (page.tables, page.rows)
        link = page.links["calc.lisp"]
        res = await client.read_resource(f"lisp://coverage/calc/{link}")
        file_page = parsed(res.contents[0].text)
        assert os.path.join(root, "calc.lisp") in file_page.heading, file_page.heading
        assert "summary" in file_page.tables, file_page.tables
        listed = await client.list_resources()
        assert any(str(x.uri) == c["reportUri"] for x in listed.resources), listed
    print(f"coverage: calc.lisp:6 not executed; report {len(index.text)} bytes parsed, file page linked")


PORTAB_FILES = {
    "portab.asd": """(defsystem "portab"
  :components ((:file "portab"))
  :in-order-to ((test-op (test-op "portab/tests"))))
(defsystem "portab/tests"
  :depends-on ("portab" "fiveam")
  :components ((:file "tests"))
  :perform (test-op (o c) (symbol-call :fiveam :run! :portab)))
""",
    "portab.lisp": """(defpackage :portab (:use :cl) (:export #:fixnum-bits))
(in-package :portab)
(defun fixnum-bits () (integer-length most-positive-fixnum))
""",
    "tests.lisp": """(defpackage :portab-tests (:use :cl :fiveam :portab))
(in-package :portab-tests)
(def-suite :portab)
(in-suite :portab)
(test fixnums-are-62-bits (is (= 62 (fixnum-bits))))
(test sums (is (= 4 (+ 2 2))))
""",
}


async def several_images(binary: str, base: str) -> None:
    """Several images in one session: a matrix test run over SBCL, ECL and
    CLISP in one call (a test that passes on SBCL only), then the images
    it left, addressed by name, started, listed and stopped."""
    target = project_server(binary, os.path.join(base, "portab"), PORTAB_FILES)
    async with Client(target, mode="legacy", read_timeout_seconds=600) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "image" in tools["evaluate-lisp"].input_schema["properties"], tools["evaluate-lisp"]
        assert "image" not in tools["image-start"].input_schema["properties"]
        lisps = ["sbcl", "ecl", "clisp"]
        r = await call(client, "asdf-test-system", {"system": "portab", "lisps": lisps}, error=True)
        jsonschema.validate(r.structured_content, tools["asdf-test-system"].output_schema)
        rows = {row["lisp"]: row for row in r.structured_content["matrix"]["rows"]}
        assert list(rows) == lisps, rows
        assert (rows["sbcl"]["passed"], rows["sbcl"]["failed"], rows["sbcl"]["outcome"]) == (2, 0, "passed"), rows
        for lisp in ["ecl", "clisp"]:
            assert (rows[lisp]["passed"], rows[lisp]["failed"], rows[lisp]["built"]) == (1, 1, True), rows
        [differing] = r.structured_content["matrix"]["differing"]
        assert differing["test"] == "PORTAB-TESTS::FIXNUMS-ARE-62-BITS", differing
        outcomes = {o["lisp"]: o for o in differing["outcomes"]}
        assert outcomes["sbcl"]["outcome"] == "passed", outcomes
        assert "evaluated to 48" in outcomes["clisp"]["message"], outcomes
        text = text_of(r)
        assert "| ecl   | ecl   | yes   | 1      | 1      | failed  | " in text, text
        # The loads, in the same images: all built, validated by the SDK.
        r = await call(client, "asdf-load-system", {"system": "portab", "lisps": lisps})
        assert [row["outcome"] for row in r.structured_content["matrix"]["rows"]] == ["loaded"] * 3
        # The images stay, each with its own state.
        r = await call(client, "image-list", {})
        assert [i["name"] for i in r.structured_content["images"]] == lisps, r.structured_content
        await call(client, "evaluate-lisp", {"code": "(defvar *where* :ecl)", "image": "ecl"})
        r = await call(client, "evaluate-lisp", {"code": "(list (lisp-implementation-type) (boundp '*where*))", "image": "ecl"})
        assert r.structured_content["values"] == ['("ECL" T)'], r.structured_content
        r = await call(client, "evaluate-lisp", {"code": "(boundp '*where*)"})
        assert r.structured_content["values"] == ["NIL"], r.structured_content
        r = await call(client, "image-start", {"lisp": "clisp", "name": "clisp-2"})
        assert r.structured_content["ready"] and r.structured_content["image"]["implementation"] == "clisp", r
        # A debugger in a further image: the debugger tools find its image
        # from the debugger, whatever their own `image` says.
        r = await call(client, "evaluate-lisp", {"code": "(car 5)", "image": "clisp-2", "debug": True}, error=True)
        debugger = r.structured_content["debugger"]["debugger"]
        r = await call(client, "debugger-backtrace", {"debugger": debugger})
        assert "TYPE-ERROR" in text_of(r), text_of(r)
        r = await call(client, "debugger-frame", {"debugger": debugger, "frame": r.structured_content["frames"][0]["index"], "code": "(lisp-implementation-type)"})
        assert r.structured_content["values"] == ['"CLISP"'], r.structured_content
        r = await call(client, "debugger-restart", {"debugger": debugger, "action": "abort"}, error=True)
        r = await call(client, "image-info", {"image": "clisp-2"})
        assert r.structured_content["implementation"] == "CLISP", r.structured_content
        assert len(r.structured_content["images"]) == 4, r.structured_content
        for args, says in [
            ({"lisp": "clisp"}, "has an image named \"clisp\" already"),
            ({"lisp": "no-such-lisp"}, "No Lisp \"no-such-lisp\" here"),
            ({"lisp": "ecl", "name": "a b"}, "An image name is"),
        ]:
            bad = await client.call_tool("image-start", args)
            assert bad.is_error and says in text_of(bad), (args, bad)
        # Past its wait, a start goes on: `ready` false, said, and it can be stopped.
        r = await call(client, "image-start", {"lisp": "clisp", "name": "clisp-3", "timeoutSeconds": 0.001})
        assert not r.structured_content["ready"], r.structured_content
        assert "is still starting" in text_of(r), text_of(r)
        await call(client, "image-stop", {"name": "clisp-3"})
        await call(client, "image-stop", {"name": "ecl"})
        gone = await client.call_tool("evaluate-lisp", {"code": "1", "image": "ecl"})
        assert gone.is_error and "no image named \"ecl\"" in text_of(gone), gone
        first = await client.call_tool("image-stop", {"name": "sbcl"})
        assert first.is_error and "is the default image" in text_of(first), first
        wrong = await client.call_tool("evaluate-lisp", {"code": "1", "image": 7})
        assert wrong.is_error and "field `image`" in text_of(wrong), wrong
    print("several images: matrix of sbcl, ecl, clisp with the differing test; images addressed, started, stopped")


async def main() -> None:
    binary = sys.argv[1]
    root = sys.argv[2]
    cold = os.environ.get("CL_MCP_COLD_CACHE")
    if cold:
        await cold_start(binary, os.path.join(cold, "clisp"), "clisp")
        await cold_start(binary, os.path.join(cold, "sbcl"), "sbcl")
    with tempfile.TemporaryDirectory() as base:
        await test_run(binary, base)
        await loose_file(binary, base, os.path.join(root, "tests", "exercises"))
        await coverage(binary, base)
        await several_images(binary, base)
    stdio = StdioServerParameters(command=binary, args=["--project-root", root])
    await run(stdio, "stdio", "auto")  # probes server/discover: the stateless era
    await run(stdio, "stdio", "legacy")  # the initialize handshake
    await debugger_limits(binary, root)
    if len(sys.argv) > 3:
        await run(sys.argv[3], "http", "auto")
        await run(sys.argv[3], "http", "legacy")
    if len(sys.argv) > 4:
        await attached(binary, sys.argv[4])


asyncio.run(main())
