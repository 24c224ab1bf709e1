//! The `debug` tools that look into a live image, through the built binary
//! against a real SBCL: `inspect-object` (a CLOS instance and a hash table,
//! drilled into and back out of), `trace-functions` (a recursive function,
//! a method and a setf function), `profile-code` (a slow function whose hot
//! spot the profile names; a flame graph, SVG and PNG, with the hot
//! function widest) and `list-threads` (list, backtrace, kill).
//! The harness validates every `structuredContent` against its schema.

mod common;
mod eval_support;

use eval_support::{call, eval, lisp_server, UserLisp};
use serde_json::{json, Value};

fn labels(parts: &Value) -> Vec<String> {
    parts
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["label"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn inspector_drills_into_an_instance_and_a_hash_table_and_back() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(defclass point () ((x :initarg :x) (y :initarg :y) \
           (tags :initform (make-hash-table :test 'equal))))
         (defvar *pt* (make-instance 'point :x 3 :y 4))
         (setf (gethash \"a\" (slot-value *pt* 'tags)) 1
               (gethash \"b\" (slot-value *pt* 'tags)) (list 10 20 30)
               (gethash (list 1 2) (slot-value *pt* 'tags)) :listed)
         (defun inspected-fn (alpha &optional beta) (list alpha beta))",
    );
    assert!(!r.is_error, "{}", r.text);

    let r = call(&mut s, 2, "inspect-object", json!({"code": "*pt*"}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["kind"], "instance");
    assert_eq!(r.structured["type"], "POINT");
    assert_eq!(labels(&r.structured["parts"]), ["X", "Y", "TAGS"]);
    assert_eq!(r.structured["parts"][0]["value"], "3");
    assert_eq!(r.structured["parts"][0]["drillable"], false);
    assert_eq!(r.structured["parts"][2]["drillable"], true);
    assert!(r.text.contains("[1] Y = 4"), "{}", r.text);

    // Into the hash table held by a slot.
    let r = call(&mut s, 3, "inspect-object", json!({"part": 2}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["kind"], "hash-table");
    // A key with parts of its own is a part too, before its entry.
    assert_eq!(r.structured["total"], 4);
    assert_eq!(
        labels(&r.structured["parts"]),
        ["\"a\"", "\"b\"", "key (1 2)", "(1 2)"]
    );
    assert_eq!(r.structured["parts"][2]["drillable"], true);
    assert_eq!(r.structured["parts"][3]["value"], ":LISTED");
    assert_eq!(r.structured["parts"][1]["value"], "(10 20 30)");
    assert_eq!(r.structured["path"], json!(["*pt*", "TAGS"]));

    // Into a value of the table, paged.
    let r = call(
        &mut s,
        4,
        "inspect-object",
        json!({"part": 1, "start": 1, "count": 1}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["kind"], "list");
    assert_eq!(r.structured["total"], 3);
    assert_eq!(r.structured["parts"].as_array().unwrap().len(), 1);
    assert_eq!(r.structured["parts"][0]["index"], 1);
    assert_eq!(r.structured["parts"][0]["value"], "20");

    // A part that does not exist is an error naming the range.
    let r = call(&mut s, 5, "inspect-object", json!({"part": 7}));
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("0 to 2"), "{}", r.text);

    // Back out, twice, to the instance; then nothing further back.
    let r = call(&mut s, 6, "inspect-object", json!({"back": true}));
    assert_eq!(r.structured["kind"], "hash-table", "{}", r.text);
    let r = call(&mut s, 7, "inspect-object", json!({"back": true}));
    assert_eq!(r.structured["kind"], "instance", "{}", r.text);
    let r = call(&mut s, 8, "inspect-object", json!({"back": true}));
    assert!(r.is_error, "{}", r.text);

    // A function: its name and lambda list.
    let r = call(
        &mut s,
        9,
        "inspect-object",
        json!({"code": "#'inspected-fn"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["kind"], "function");
    let attrs = r.structured["attributes"].to_string();
    assert!(attrs.contains("INSPECTED-FN"), "{attrs}");
    assert!(attrs.contains("(ALPHA &OPTIONAL BETA)"), "{attrs}");

    // A closure's closed-over values; an unbound slot says so.
    let r = call(
        &mut s,
        10,
        "inspect-object",
        json!({"code": "(let ((hidden (list :secret 42))) (lambda () hidden))"}),
    );
    assert!(
        r.structured["parts"].to_string().contains("(:SECRET 42)"),
        "{}",
        r.text
    );
    let r = call(
        &mut s,
        11,
        "inspect-object",
        json!({"code": "(make-instance 'point :x 1)"}),
    );
    assert_eq!(
        r.structured["parts"][1]["value"], "#<unbound>",
        "{}",
        r.text
    );
    assert_eq!(r.structured["parts"][1]["drillable"], false);

    // An error in the code is the code's error, with its type.
    let r = call(&mut s, 12, "inspect-object", json!({"code": "(car 5)"}));
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("[ERROR] TYPE-ERROR"), "{}", r.text);
}

#[test]
fn trace_records_a_recursive_function_with_its_nesting() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(defun tr-fact (n) (if (< n 2) 1 (* n (tr-fact (1- n)))))
         (defgeneric tr-area (shape))
         (defmethod tr-area ((s integer)) (* s s))
         (defmethod tr-area ((s string)) (length s))
         (defun (setf tr-thing) (new x) (list new x))",
    );
    assert!(!r.is_error, "{}", r.text);

    let r = call(
        &mut s,
        2,
        "trace-functions",
        json!({"trace": ["tr-fact", "(method tr-area (integer))", "(setf tr-thing)"]}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["traced"].as_array().unwrap().len(), 3);

    let r = eval(
        &mut s,
        3,
        "(list (tr-fact 4) (tr-area 5) (tr-area \"abc\") (funcall #'(setf tr-thing) 1 2))",
    );
    assert!(!r.is_error, "{}", r.text);
    // Nothing of the trace reaches the evaluation's output.
    assert!(
        r.structured["stdout"].as_str().unwrap().is_empty(),
        "{}",
        r.text
    );

    // `limit` 0 shows no call and says so, without taking any.
    let r = call(&mut s, 40, "trace-functions", json!({"limit": 0}));
    assert!(
        r.text.contains("No calls shown (`limit` 0).")
            && !r.text.contains("No calls recorded")
            && r.text.contains("more records, the oldest first"),
        "{}",
        r.text
    );

    let r = call(&mut s, 4, "trace-functions", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let recs = r.structured["records"].as_array().unwrap();
    let fact: Vec<&Value> = recs.iter().filter(|x| x["function"] == "TR-FACT").collect();
    assert_eq!(fact.len(), 4, "{}", r.text);
    for (i, rec) in fact.iter().enumerate() {
        assert_eq!(rec["depth"], i as i64, "{}", r.text);
        assert_eq!(rec["arguments"], json!([(4 - i).to_string()]));
        assert_eq!(rec["outcome"], "returned");
    }
    assert_eq!(fact[0]["values"], json!(["24"]));
    assert_eq!(fact[3]["values"], json!(["1"]));
    // Only the traced method: the string method's call is not recorded.
    let area: Vec<&Value> = recs
        .iter()
        .filter(|x| x["function"].as_str().unwrap().contains("TR-AREA"))
        .collect();
    assert_eq!(area.len(), 1, "{}", r.text);
    assert_eq!(area[0]["values"], json!(["25"]));
    assert!(recs.iter().any(|x| x["function"] == "(SETF TR-THING)"));
    // The text is a call tree, each call with its time; an outer call
    // lasts at least as long as the one inside it.
    let outer = r.text.find("\n  0: (TR-FACT 4) => 24  (").expect(&r.text);
    let inner = r.text[outer..]
        .find(")\n    1: (TR-FACT 3) => 6  (")
        .expect(&r.text);
    assert!(
        !r.text[outer + 1..outer + inner].contains('\n'),
        "{}",
        r.text
    );
    let us = |x: &Value| x["elapsedUs"].as_i64().expect("elapsedUs");
    assert!(us(fact[0]) >= us(fact[1]) && us(fact[1]) >= 0, "{}", r.text);

    // Records once returned are gone; untracing stops recording.
    let r = call(
        &mut s,
        5,
        "trace-functions",
        json!({"untrace": ["tr-fact"]}),
    );
    assert!(r.structured["records"].as_array().unwrap().is_empty());
    eval(&mut s, 6, "(tr-fact 3)");
    let r = call(&mut s, 7, "trace-functions", json!({}));
    assert!(
        r.structured["records"].as_array().unwrap().is_empty(),
        "{}",
        r.text
    );
    assert_eq!(r.structured["traced"].as_array().unwrap().len(), 2);

    // Unknown names are errors that say so.
    let r = call(
        &mut s,
        8,
        "trace-functions",
        json!({"trace": ["no-such-fn-xyz"], "untraceAll": true}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("names no function"), "{}", r.text);
    assert!(r.structured["traced"].as_array().unwrap().is_empty());
    // A name that does not read says why, without the reader's stream.
    let r = call(
        &mut s,
        9,
        "trace-functions",
        json!({"trace": ["cl-user::x y", "sb-impl:no-such-external-xyz"]}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text
            .contains("Cannot read \"sb-impl:no-such-external-xyz\" as a function name: ")
            && !r.text.contains("Stream:")
            && !r.text.contains("STRING-INPUT-STREAM"),
        "{}",
        r.text
    );
}

#[test]
fn a_slot_accessor_method_is_refused_and_its_generic_function_traced() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(defclass tr-pt () ((x :initarg :x :accessor tr-px)))",
    );
    assert!(!r.is_error, "{}", r.text);
    // SBCL reads the slot without calling the accessor's method: tracing it
    // recorded nothing, silently.
    let r = call(
        &mut s,
        2,
        "trace-functions",
        json!({"trace": ["(method tr-px (tr-pt))"]}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text.contains("slot accessor method")
            && r.text.contains("Trace the generic function TR-PX"),
        "{}",
        r.text
    );
    assert!(r.structured["traced"].as_array().unwrap().is_empty());
    // Tracing what compiled callers never call is said, not silent.
    let r = call(
        &mut s,
        21,
        "trace-functions",
        json!({"trace": ["car"], "untraceAll": true}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("CAR is a standard function"), "{}", r.text);
    call(&mut s, 22, "trace-functions", json!({"untraceAll": true}));
    // What it suggests records the call.
    let r = call(&mut s, 3, "trace-functions", json!({"trace": ["tr-px"]}));
    assert!(!r.is_error, "{}", r.text);
    let r = eval(&mut s, 4, "(tr-px (make-instance 'tr-pt :x 7))");
    assert_eq!(r.structured["values"], json!(["7"]), "{}", r.text);
    let r = call(&mut s, 5, "trace-functions", json!({}));
    let recs = r.structured["records"].as_array().unwrap();
    assert!(
        recs.iter()
            .any(|x| x["function"] == "TR-PX" && x["values"] == json!(["7"])),
        "{}",
        r.text
    );
}

#[test]
fn profile_names_the_hot_spot_and_counts_calls() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(defun prof-hot (n)
           (declare (optimize speed) (type fixnum n))
           (let ((s 0))
             (declare (type fixnum s))
             (dotimes (i n s) (setf s (logand (+ s (* i 7) (ash s -3)) #xffffff)))))
         (defun prof-cold () (loop repeat 10 collect 1))
         (defun prof-outer (reps) (prof-cold) (loop repeat reps sum (prof-hot 3000000)))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        2,
        "profile-code",
        json!({"code": "(prof-outer 150)", "countCalls": ["prof-hot", "prof-cold"], "top": 10}),
    );
    assert!(!r.is_error, "{}", r.text);
    let st = &r.structured;
    assert!(st["samples"].as_i64().unwrap() > 10, "{}", r.text);
    assert_eq!(st["functions"][0]["name"], "PROF-HOT", "{}", r.text);
    assert!(
        st["functions"][0]["selfPercent"].as_f64().unwrap() > 50.0,
        "{}",
        r.text
    );
    let outer = st["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "PROF-OUTER")
        .unwrap_or_else(|| panic!("{}", r.text));
    assert!(
        outer["cumulativePercent"].as_f64().unwrap() > 80.0,
        "{}",
        r.text
    );
    // The server's own frames are not in the profile.
    let all = st["functions"].to_string();
    assert!(!all.contains("CL-MCP"), "{all}");
    assert!(!all.contains("SWANK"), "{all}");
    assert_eq!(
        st["calls"],
        json!([{"name": "PROF-HOT", "count": 150}, {"name": "PROF-COLD", "count": 1}])
    );
    // Counting is undone afterwards: the functions run as before.
    let r = eval(&mut s, 3, "(prof-outer 1)");
    assert!(!r.is_error, "{}", r.text);

    // Allocation mode names the allocating function.
    let r = eval(
        &mut s,
        4,
        "(defun prof-alloc () (let (l) (dotimes (i 300000 l) (push (make-list 4) l))))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        5,
        "profile-code",
        json!({"code": "(length (prof-alloc))", "mode": "alloc"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["mode"], "alloc");
    let names = r.structured["functions"].to_string();
    assert!(names.contains("PROF-ALLOC"), "{}", r.text);
    assert_eq!(r.structured["values"], json!(["300000"]));

    // An error in the code is reported as such.
    let r = call(&mut s, 6, "profile-code", json!({"code": "(car 5)"}));
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("TYPE-ERROR"), "{}", r.text);

    // A recursive function is counted once per sample: its cumulative
    // samples are at most all of them, as wide as in the flame graph. No
    // frame of the profiler's stopping (a thread waiting on a semaphore)
    // is in the tables, and the sample it took is in neither count.
    let r = eval(
        &mut s,
        7,
        "(defun prof-fib (n) (if (< n 2) n (+ (prof-fib (- n 1)) (prof-fib (- n 2)))))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        8,
        "profile-code",
        json!({"code": "(loop repeat 3000 do (prof-fib 15))", "top": 50}),
    );
    assert!(!r.is_error, "{}", r.text);
    let samples = r.structured["samples"].as_i64().unwrap();
    let fib = profiled(&r.structured, "PROF-FIB").unwrap_or_else(|| panic!("{}", r.text));
    assert!(fib["cumulative"].as_i64().unwrap() <= samples, "{}", r.text);
    assert!(
        fib["cumulative"].as_i64().unwrap() * 10 >= samples * 9,
        "{}",
        r.text
    );
    let all = r.structured["functions"].to_string();
    for noise in ["SB-THREAD", "SEMAPHORE", "FUTEX", "syscall", "SB-SPROF"] {
        assert!(!all.contains(noise), "{noise} in {}", r.text);
    }
    let graph = read_svg(&mut s, 9, r.structured["flameGraph"].as_str().unwrap());
    let frames = flame_frames(&graph);
    assert_eq!(width_of(&frames, "all"), samples as u64, "{frames:?}");

    // Counted functions: the counting wrapper's frames are not in the
    // profile, the text says where its cost went.
    let r = call(
        &mut s,
        10,
        "profile-code",
        json!({"code": "(loop repeat 1000 do (prof-fib 15))", "countCalls": ["prof-fib"],
               "top": 50}),
    );
    assert!(!r.is_error, "{}", r.text);
    let fib = profiled(&r.structured, "PROF-FIB").unwrap_or_else(|| panic!("{}", r.text));
    assert!(fib["selfPercent"].as_f64().unwrap() > 80.0, "{}", r.text);
    // (A sample may still lose the frames that tell the wrapper's LIST
    // from the user's, as sb-sprof loses callers in assembly routines: a
    // stray one is tolerated, a wrapper's share is not.)
    let wrapper_share: f64 = r.structured["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            let name = f["name"].as_str().unwrap_or_default();
            ["LIST", "TAIL-CALL", "listify", "ENCAPSULATION", "WRAP"]
                .iter()
                .any(|w| name.contains(w))
        })
        .map(|f| f["selfPercent"].as_f64().unwrap_or(0.0))
        .sum();
    assert!(
        wrapper_share < 5.0,
        "{wrapper_share}% wrapper in {}",
        r.text
    );
    assert!(r.text.contains("counting wrapper"), "{}", r.text);

    // Time in the code's own forms is said to be unattributed, not shown
    // as a table of the machinery around them.
    let r = call(
        &mut s,
        11,
        "profile-code",
        json!({"code": "(dotimes (i 200000000) (setq i i))"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.structured["unattributed"].as_i64().unwrap() > 0,
        "{}",
        r.text
    );
    assert!(r.text.contains("code's own forms"), "{}", r.text);
    assert!(
        r.text.contains("wrap that work in a function"),
        "{}",
        r.text
    );
    assert_eq!(r.structured["functions"], json!([]), "{}", r.text);
}

/// The entry of `functions` named `name` in a profile's result.
fn profiled<'a>(st: &'a Value, name: &str) -> Option<&'a Value> {
    st["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
}

/// The text of the SVG resource `uri`.
fn read_svg(s: &mut common::Server, id: u64, uri: &str) -> String {
    let r = s.request(json!({"jsonrpc":"2.0","id":id,"method":"resources/read",
        "params":{"uri": uri}}));
    r["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string()
}

/// The samples of all frames named `name`.
fn width_of(frames: &[(String, u64)], name: &str) -> u64 {
    frames
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, w)| *w)
        .sum()
}

/// The frames of a flame graph's SVG: (name, samples) from each frame's
/// `<title>` ("NAME (N samples, P%)") and its `fg:w`.
fn flame_frames(svg: &str) -> Vec<(String, u64)> {
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(svg, options)
        .unwrap_or_else(|e| panic!("not XML: {e}"));
    doc.descendants()
        .filter(|n| n.has_tag_name("g"))
        .filter_map(|g| {
            let title = g.children().find(|c| c.has_tag_name("title"))?.text()?;
            let rect = g.children().find(|c| c.has_tag_name("rect"))?;
            let width = rect
                .attributes()
                .find(|a| a.name() == "w")?
                .value()
                .parse()
                .ok()?;
            Some((title.split(" (").next()?.to_string(), width))
        })
        .collect()
}

#[test]
fn profile_draws_a_flame_graph_with_the_hot_function_widest() {
    let mut s = lisp_server(&[]);
    // FLAME-HOT does nine tenths of FLAME-WORK's work, FLAME-COLD one tenth.
    let r = eval(
        &mut s,
        1,
        "(defun flame-hot (n)
           (declare (optimize speed) (type fixnum n))
           (let ((s 0)) (declare (type fixnum s))
             (dotimes (i n s) (setf s (logand (+ s (* i 7) (ash s -3)) #xffffff)))))
         (defun flame-cold (n)
           (declare (optimize speed) (type fixnum n))
           (let ((s 0)) (declare (type fixnum s))
             (dotimes (i n s) (setf s (logand (+ s (* i 3) (ash s -3)) #xffffff)))))
         (defun flame-work (reps) (loop repeat reps sum (+ (flame-hot 900000) (flame-cold 100000))))",
    );
    assert!(!r.is_error, "{}", r.text);
    let resp = s.request(json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
        "params":{"name":"profile-code","arguments":{"code":"(flame-work 600)"}}}));
    let result = &resp["result"];
    let text = result["content"][0]["text"].as_str().unwrap();
    assert_eq!(result["isError"], false, "{resp}");
    let st = &result["structuredContent"];
    // Sampled every millisecond of the evaluation's thread: a run of about
    // a second has hundreds of samples (sb-sprof's process-wide CPU timer
    // gave a few dozen on a loaded machine).
    let samples = st["samples"].as_i64().unwrap();
    let elapsed = st["elapsedMs"].as_i64().unwrap().max(1);
    assert!(samples * 1000 / elapsed >= 300, "{text}");

    // The content: the table, the PNG, the link to the SVG.
    let blocks = result["content"].as_array().unwrap();
    let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image", "resource_link"], "{resp}");
    assert_eq!(blocks[1]["mimeType"], "image/png");
    let svg_uri = st["flameGraph"].as_str().unwrap();
    // The id is random (96 bits in hex), not a count another client of
    // the session could guess.
    let id = svg_uri
        .strip_prefix("lisp://profile/")
        .and_then(|rest| rest.strip_suffix("/flamegraph.svg"))
        .unwrap_or_else(|| panic!("{svg_uri}"));
    assert!(
        id.len() == 24 && id.chars().all(|c| c.is_ascii_hexdigit()),
        "{svg_uri}"
    );
    assert_eq!(blocks[2]["uri"], svg_uri);
    assert_eq!(blocks[2]["mimeType"], "image/svg+xml");

    // The PNG decodes to the size the text states.
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(blocks[1]["data"].as_str().unwrap())
        .unwrap();
    let info = png::Decoder::new(std::io::Cursor::new(&png))
        .read_info()
        .unwrap()
        .info()
        .clone();
    assert_eq!(info.width, 800);
    let stated = format!("a {}x{} PNG follows", info.width, info.height);
    assert!(text.contains(&stated), "{stated} not in {text}");

    // The SVG resource parses and names both functions, the hot one the
    // widest frame below the one that calls both.
    let r = s.request(json!({"jsonrpc":"2.0","id":3,"method":"resources/read",
        "params":{"uri": svg_uri}}));
    let content = &r["result"]["contents"][0];
    assert_eq!(content["mimeType"], "image/svg+xml", "{r}");
    let frames = flame_frames(content["text"].as_str().unwrap());
    let width_of = |name: &str| {
        frames
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, w)| *w)
            .sum::<u64>()
    };
    let (hot, cold) = (width_of("FLAME-HOT"), width_of("FLAME-COLD"));
    assert!(cold > 0, "{frames:?}");
    let widest_callee = frames
        .iter()
        .filter(|(n, _)| n != "all" && n != "FLAME-WORK")
        .max_by_key(|(_, w)| *w)
        .unwrap();
    assert_eq!(widest_callee.0, "FLAME-HOT", "{frames:?}");
    assert!(hot > 5 * cold, "hot {hot}, cold {cold}: {frames:?}");
    assert!(
        !frames
            .iter()
            .any(|(n, _)| n.contains("CL-MCP") || n.contains("SWANK")),
        "{frames:?}"
    );

    // The PNG is a resource too; an unknown id says what the session keeps.
    let png_uri = st["flameGraphPng"].as_str().unwrap();
    let r = s.request(json!({"jsonrpc":"2.0","id":4,"method":"resources/read",
        "params":{"uri": png_uri}}));
    assert_eq!(r["result"]["contents"][0]["blob"], blocks[1]["data"], "{r}");
    let r = s.request(json!({"jsonrpc":"2.0","id":5,"method":"resources/read",
        "params":{"uri": "lisp://profile/999999/flamegraph.svg"}}));
    assert!(
        r["error"]["data"].to_string().contains("last 8 profiles"),
        "{r}"
    );

    // flameGraph: false: the table alone.
    let r = s.request(json!({"jsonrpc":"2.0","id":6,"method":"tools/call",
        "params":{"name":"profile-code","arguments":{"code":"(flame-work 20)","flameGraph":false}}}));
    assert_eq!(r["result"]["content"].as_array().unwrap().len(), 1, "{r}");
    assert!(
        r["result"]["structuredContent"].get("flameGraph").is_none(),
        "{r}"
    );
}

#[test]
fn threads_are_listed_with_a_backtrace_and_can_be_killed() {
    // The debug group on its own: inspect-object runs the code.
    let mut s = lisp_server(&["--tools", "debug"]);
    let r = call(
        &mut s,
        1,
        "inspect-object",
        json!({"code": "(defun thr-wait () (loop (sleep 0.05)) (values))
                        (prog1 (sb-thread:make-thread (lambda () (thr-wait) nil) :name \"test-waiter\")
                          (sleep 0.1))"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["type"], "SB-THREAD:THREAD", "{}", r.text);
    let r = call(&mut s, 2, "list-threads", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let threads = r.structured["threads"].as_array().unwrap().clone();
    let waiter = threads
        .iter()
        .find(|t| t["name"] == "test-waiter")
        .unwrap_or_else(|| panic!("{}", r.text));
    assert_eq!(waiter["inDebugger"], false);
    assert_eq!(threads.iter().filter(|t| t["current"] == true).count(), 1);
    let id = waiter["id"].as_i64().unwrap();

    let r = call(
        &mut s,
        3,
        "list-threads",
        json!({"action": "backtrace", "thread": id}),
    );
    assert!(!r.is_error, "{}", r.text);
    let frames = r.structured["frames"].to_string();
    assert!(frames.contains("THR-WAIT"), "{}", r.text);
    assert!(!frames.contains("CL-MCP"), "{}", r.text);

    let r = call(
        &mut s,
        4,
        "list-threads",
        json!({"action": "kill", "thread": id}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(
        !r.structured["threads"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == id && t["status"] != "dead"),
        "{}",
        r.text
    );
    let r = call(
        &mut s,
        5,
        "list-threads",
        json!({"action": "backtrace", "thread": id}),
    );
    assert!(r.is_error, "{}", r.text);
    let r = call(&mut s, 6, "list-threads", json!({"action": "kill"}));
    assert!(r.is_error, "{}", r.text);

    // The image's main thread is neither killed nor interrupted: either
    // would end the image and its state.
    let r = call(
        &mut s,
        60,
        "inspect-object",
        json!({"code": "(defparameter *before-main* (list :kept))"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(&mut s, 62, "list-threads", json!({}));
    let main = r.structured["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "main thread")
        .unwrap_or_else(|| panic!("no main thread listed: {}", r.text))["id"]
        .as_i64()
        .unwrap();
    for (id, action) in [(63, "interrupt"), (64, "kill")] {
        let r = call(
            &mut s,
            id,
            "list-threads",
            json!({"action": action, "thread": main}),
        );
        assert!(r.is_error, "{action}: {}", r.text);
        assert!(r.text.contains("main thread"), "{action}: {}", r.text);
    }
    let r = call(
        &mut s,
        65,
        "inspect-object",
        json!({"code": "(car *before-main*)"}),
    );
    assert!(!r.is_error, "the image lived on: {}", r.text);
    assert!(r.text.contains(":KEPT"), "the image lived on: {}", r.text);

    // interrupt: the answer says what became of the thread, and the list
    // agrees with it.
    let r = call(
        &mut s,
        7,
        "inspect-object",
        json!({"code": "(prog1 (sb-thread:make-thread (lambda () (thr-wait)) :name \"test-spinner\") (sleep 0.1))"}),
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(&mut s, 8, "list-threads", json!({}));
    let id = r.structured["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "test-spinner")
        .unwrap_or_else(|| panic!("{}", r.text))["id"]
        .as_i64()
        .unwrap();
    let r = call(
        &mut s,
        9,
        "list-threads",
        json!({"action": "interrupt", "thread": id}),
    );
    assert!(!r.is_error, "{}", r.text);
    let message = r.structured["message"].as_str().unwrap().to_string();
    let r = call(&mut s, 10, "list-threads", json!({}));
    let now = r.structured["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .cloned();
    if message.contains("ended the thread") {
        assert!(
            now.is_none_or(|t| t["status"] == "dead"),
            "{message}\n{}",
            r.text
        );
    } else if message.contains("sits in the debugger") {
        assert_eq!(now.unwrap()["inDebugger"], true, "{message}\n{}", r.text);
    } else {
        assert_eq!(now.unwrap()["inDebugger"], false, "{message}\n{}", r.text);
    }
}

#[test]
fn attached_image_shows_the_users_threads_and_traces_their_calls() {
    // The user's image runs an application thread calling APP-STEP.
    let user = UserLisp::start_with(&[
        "(defun cl-user::app-step (n) (* n 2))",
        "(defun cl-user::app-loop () (loop for i from 0 do (cl-user::app-step i) (sleep 0.02)))",
        "(sb-thread:make-thread #'cl-user::app-loop :name \"user-app\")",
    ]);
    let addr = format!("127.0.0.1:{}", user.port);
    let mut s = lisp_server(&["--swank", &addr]);

    let r = call(&mut s, 1, "list-threads", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let app = r.structured["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "user-app")
        .unwrap_or_else(|| panic!("{}", r.text))
        .clone();
    let r = call(
        &mut s,
        2,
        "list-threads",
        json!({"action": "backtrace", "thread": app["id"]}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert!(
        r.structured["frames"].to_string().contains("APP-LOOP"),
        "{}",
        r.text
    );

    // Calls made by the user's thread are recorded, with that thread's name.
    let r = call(
        &mut s,
        3,
        "trace-functions",
        json!({"trace": ["cl-user::app-step"]}),
    );
    assert!(!r.is_error, "{}", r.text);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let r = call(&mut s, 4, "trace-functions", json!({"untraceAll": true}));
    let recs = r.structured["records"].as_array().unwrap();
    assert!(recs.len() >= 3, "{}", r.text);
    assert!(recs.iter().all(|x| x["thread"] == "user-app"), "{}", r.text);
    let n: i64 = recs[0]["arguments"][0].as_str().unwrap().parse().unwrap();
    assert_eq!(
        recs[0]["values"],
        json!([(2 * n).to_string()]),
        "{}",
        r.text
    );
    // The application thread runs on, untouched.
    let r = call(&mut s, 5, "list-threads", json!({}));
    assert!(r.text.contains("\"user-app\" alive"), "{}", r.text);
}

/// Traces belong to the session that asked for them: another session
/// attached to the same image neither lists them nor gets their records,
/// and a session's end (stdin closed) untraces what only it traced.
#[test]
fn traces_are_per_session_and_removed_when_the_session_ends() {
    let user = UserLisp::start_with(&[
        "(defun cl-user::app-step (n) (* n 2))",
        "(defun cl-user::app-loop () (loop for i from 0 do (cl-user::app-step i) (sleep 0.02)))",
        "(sb-thread:make-thread #'cl-user::app-loop :name \"user-app\")",
    ]);
    let addr = format!("127.0.0.1:{}", user.port);
    let mut a = lisp_server(&["--swank", &addr]);
    let mut b = lisp_server(&["--swank", &addr]);
    let traced = |r: &eval_support::Reply| r.structured["traced"].clone();

    let r = call(
        &mut a,
        1,
        "trace-functions",
        json!({"trace": ["cl-user::app-step"]}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(traced(&r), json!(["APP-STEP"]), "{}", r.text);
    std::thread::sleep(std::time::Duration::from_millis(200));
    // B did not trace it: B lists nothing and records nothing.
    let r = call(&mut b, 1, "trace-functions", json!({}));
    assert_eq!(traced(&r), json!([]), "{}", r.text);
    assert_eq!(r.structured["records"], json!([]), "{}", r.text);
    let r = call(
        &mut b,
        2,
        "trace-functions",
        json!({"untrace": ["cl-user::app-step"]}),
    );
    assert!(r.is_error, "B cannot untrace A's trace: {}", r.text);
    // A lists it and has its records.
    let r = call(&mut a, 2, "trace-functions", json!({}));
    assert_eq!(traced(&r), json!(["APP-STEP"]), "{}", r.text);
    assert!(
        !r.structured["records"].as_array().unwrap().is_empty(),
        "{}",
        r.text
    );

    // Both trace it; A's end leaves B's trace in place.
    let r = call(
        &mut b,
        3,
        "trace-functions",
        json!({"trace": ["cl-user::app-step"]}),
    );
    assert!(!r.is_error, "{}", r.text);
    let (status, _) = a.close();
    assert!(status.success());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let r = call(&mut b, 4, "trace-functions", json!({}));
    assert_eq!(traced(&r), json!(["APP-STEP"]), "{}", r.text);
    assert!(
        !r.structured["records"].as_array().unwrap().is_empty(),
        "{}",
        r.text
    );
    let r = eval(&mut b, 5, "(mapcar #'string (trace))");
    assert!(r.text.ends_with("=> (\"APP-STEP\")"), "{}", r.text);

    // B's end untraces it in the user's image, which runs on.
    let (status, _) = b.close();
    assert!(status.success());
    let mut c = lisp_server(&["--swank", &addr]);
    let r = eval(&mut c, 1, "(trace)");
    assert!(r.text.ends_with("=> NIL"), "{}", r.text);
    let r = call(&mut c, 3, "list-threads", json!({}));
    assert!(r.text.contains("\"user-app\" alive"), "{}", r.text);
}

#[test]
fn trace_prints_arguments_and_values_in_the_sessions_package() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(defpackage :tr-shapes (:use :cl)) (in-package :tr-shapes)
         (defclass circle () ((r :initarg :r :reader radius)))
         (defgeneric grow (c))
         (defmethod grow ((c circle)) (make-instance 'circle :r (* 2 (radius c))))",
    );
    assert!(!r.is_error, "{}", r.text);
    let r = call(&mut s, 2, "trace-functions", json!({"trace": ["grow"]}));
    assert!(!r.is_error, "{}", r.text);
    eval(&mut s, 3, "(grow (make-instance 'circle :r 1))");
    let r = call(&mut s, 4, "trace-functions", json!({}));
    let rec = &r.structured["records"][0];
    // SBCL's tracer binds another package around a call's entry: the
    // argument printed as #<TR-SHAPES::CIRCLE ...>, the value as #<CIRCLE ...>.
    for printed in [&rec["arguments"][0], &rec["values"][0]] {
        assert!(
            printed.as_str().unwrap().starts_with("#<CIRCLE "),
            "{}",
            r.text
        );
    }
}

/// CPU time (user + system, in clock ticks) the process `pid` used so far.
fn cpu_ticks(pid: u64) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the line.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// An object whose print-object never returns: each timed-out
/// `inspect-object` was "left running" on a thread of its own, and after
/// three calls the image spun at ~200 % CPU with three more threads. Every
/// call is now interrupted wherever it is, showing the object included; no
/// thread is left, the image idles. And data nested 10^5 deep is shown
/// truncated (it was "a problem in the server's Lisp helpers").
#[test]
fn inspecting_an_unprintable_object_leaves_nothing_running() {
    let mut s = lisp_server(&[]);
    let r = eval(
        &mut s,
        1,
        "(defstruct spinner a) (defmethod print-object ((s spinner) stream) (loop)) \
         (defvar *spinner* (make-spinner :a 1)) (defvar *in-list* (list 1 *spinner*)) \
         (sb-unix:unix-getpid)",
    );
    let pid: u64 = r.text.trim_start_matches("=> ").parse().expect(&r.text);
    let threads = "(length (sb-thread:list-all-threads))";
    let before = eval(&mut s, 2, threads).text;
    for (i, code) in ["*spinner*", "*in-list*", "*spinner*"].iter().enumerate() {
        let started = std::time::Instant::now();
        let r = call(
            &mut s,
            10 + i as i64,
            "inspect-object",
            json!({"code": code, "timeoutSeconds": 1}),
        );
        assert!(r.is_error, "{}", r.text);
        assert!(
            r.text.starts_with("[TIMEOUT] Showing the inspected object")
                && r.text.contains("PRINT-OBJECT (SPINNER")
                && r.text.contains("state is intact"),
            "{}",
            r.text
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
    assert_eq!(eval(&mut s, 20, threads).text, before, "threads left");
    let used = cpu_ticks(pid);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let spun = cpu_ticks(pid) - used;
    // Clock ticks are 1/100 s: under a third of one core over 2 s.
    assert!(spun < 66, "the image used {spun} ticks in 2 s idle");
    // The session's next calls run.
    let r = call(&mut s, 21, "inspect-object", json!({"code": "(list 1 2)"}));
    assert!(!r.is_error, "{}", r.text);
    // In a debugger's frame too: stopped, the debugger stays and answers.
    let r = eval(&mut s, 22, "(defun stops (x) (error \"stop ~a\" x))");
    assert!(!r.is_error, "{}", r.text);
    let r = call(
        &mut s,
        23,
        "evaluate-lisp",
        json!({"code": "(stops 1)", "debug": true}),
    );
    assert!(r.text.starts_with("[DEBUGGER level 1]"), "{}", r.text);
    let r = call(
        &mut s,
        24,
        "inspect-object",
        json!({"frame": 0, "code": "*spinner*", "timeoutSeconds": 1}),
    );
    assert!(r.is_error, "{}", r.text);
    assert!(
        r.text
            .contains("did not finish within 1 s and was stopped; the debugger stays at level 1"),
        "{}",
        r.text
    );
    let r = call(
        &mut s,
        25,
        "debugger-frame",
        json!({"frame": 0, "code": "(+ 1 2)"}),
    );
    assert_eq!(r.structured["values"], json!(["3"]), "{}", r.text);
    call(&mut s, 26, "debugger-restart", json!({"action": "abort"}));

    let r = eval(
        &mut s,
        30,
        "(defvar *deep* (let ((x nil)) (dotimes (i 100000 x) (setf x (list x))))) \
         (defvar *deep-vector* (let ((x nil)) (dotimes (i 100000 x) (setf x (vector x))))) t",
    );
    assert!(!r.is_error, "{}", r.text);
    for (id, code) in [(31, "*deep*"), (32, "*deep-vector*")] {
        let r = call(&mut s, id, "inspect-object", json!({"code": code}));
        assert!(!r.is_error, "{}", r.text);
        assert!(
            r.structured["object"].as_str().unwrap().contains('#'),
            "{}",
            r.text
        );
    }
    let r = call(&mut s, 33, "inspect-object", json!({"part": 0}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(
        r.structured["path"],
        json!(["*deep-vector*", "0"]),
        "{}",
        r.text
    );
    // evaluate-lisp prints the whole value unless told: it says why not.
    let r = eval(&mut s, 34, "*deep*");
    assert!(r.text.contains("too deep to print"), "{}", r.text);
    let r = call(
        &mut s,
        35,
        "evaluate-lisp",
        json!({"code": "*deep*", "printLevel": 3}),
    );
    assert_eq!(r.text, "=> (((#)))");
}

/// A tool call answered within `secs`, else the test fails (never hangs).
fn call_within(s: &mut common::Server, id: i64, tool: &str, args: Value, secs: u64) -> Value {
    s.send(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":tool,"arguments":args}}));
    let msgs = s.collect_until(std::time::Duration::from_secs(secs), |m| {
        m.get("id") == Some(&json!(id)) && (m.get("result").is_some() || m.get("error").is_some())
    });
    msgs.last().unwrap().clone()
}

/// Swank's control and reader threads and the server's evaluation channel
/// are refused for `interrupt` as for `kill` (an interrupt there has no
/// debugger taker: the control thread's ended the image, the reader's
/// left every later call unanswered), and the image answers on after.
#[test]
fn swank_machinery_threads_are_neither_interrupted_nor_killed() {
    if !common::on_sbcl() {
        common::skip_known_gap(
            "swank_machinery_threads_are_neither_interrupted_nor_killed",
            "the thread names checked are those of Swank's :spawn style on SBCL",
        );
        return;
    }
    let mut s = lisp_server(&[]);
    let r = call_within(
        &mut s,
        1,
        "evaluate-lisp",
        json!({"code": "(defvar *kept* :kept)"}),
        120,
    );
    assert!(!common::tool_is_error(&r), "{r}");
    let r = call_within(&mut s, 2, "list-threads", json!({}), 30);
    let threads = r["result"]["structuredContent"]["threads"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .clone();
    let id_of = |name: &str| {
        threads
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {threads:?}"))["id"]
            .as_i64()
            .unwrap()
    };
    let mut n = 10;
    for (name, what) in [
        ("reader-thread", "Swank's reader thread"),
        ("control-thread", "Swank's control thread"),
        ("cl-mcp-eval", "evaluation channel"),
    ] {
        let id = id_of(name);
        for action in ["interrupt", "kill"] {
            n += 1;
            let r = call_within(
                &mut s,
                n,
                "list-threads",
                json!({"action": action, "thread": id}),
                30,
            );
            let text = common::tool_text(&r);
            assert!(common::tool_is_error(&r), "{action} {name}: {text}");
            assert!(text.contains(what), "{action} {name}: {text}");
        }
        let r = call_within(&mut s, 100 + n, "image-info", json!({}), 30);
        assert!(!common::tool_is_error(&r), "after {name}: {r}");
        let r = call_within(
            &mut s,
            200 + n,
            "code-describe",
            json!({"symbol": "car"}),
            30,
        );
        assert!(!common::tool_is_error(&r), "after {name}: {r}");
        let r = call_within(
            &mut s,
            300 + n,
            "evaluate-lisp",
            json!({"code": "*kept*"}),
            30,
        );
        assert!(common::tool_text(&r).contains(":KEPT"), "after {name}: {r}");
    }
}
