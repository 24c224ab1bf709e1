//! The live image as MCP resources and completion.

mod common;

use common::Server;
use serde_json::{json, Value};

fn read(s: &mut Server, id: i64, uri: &str) -> Value {
    s.request(json!({"jsonrpc":"2.0","id":id,"method":"resources/read","params":{"uri":uri}}))
}

fn text(r: &Value) -> String {
    r["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {r}"))
        .to_string()
}

#[test]
fn image_resources_and_templates() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::initialized(&["--project-root", dir.path().to_str().unwrap()]);
    let r = s.request(json!({"jsonrpc":"2.0","id":1,"method":"resources/list"}));
    assert_eq!(r["result"]["resources"][0]["uri"], "lisp://image/info");
    let r = s.request(json!({"jsonrpc":"2.0","id":2,"method":"resources/templates/list"}));
    let templates: Vec<&str> = r["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        // The conformance fixtures' `test://` template (test-tools only).
        .filter(|t| !t.starts_with("test://"))
        .collect();
    assert_eq!(
        templates,
        [
            "lisp://package/{name}",
            "lisp://symbol/{package}/{name}",
            "lisp://system/{name}",
            "lisp://coverage/{system}/{page}"
        ]
    );

    assert!(text(&read(&mut s, 3, "lisp://image/info")).contains("SBCL"));
    let pkg = text(&read(&mut s, 4, "lisp://package/common-lisp-user"));
    assert!(
        pkg.contains("Package COMMON-LISP-USER") && pkg.contains("Nicknames: CL-USER"),
        "{pkg}"
    );
    let sym = text(&read(&mut s, 5, "lisp://symbol/CL/MAPCAR"));
    assert!(sym.to_lowercase().contains("function"), "{sym}");
    let sys = text(&read(&mut s, 6, "lisp://system/uiop"));
    assert!(sys.contains("uiop"), "{sys}");
    let r = read(&mut s, 7, "lisp://package/NO-SUCH-PACKAGE");
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert_eq!(r["error"]["data"]["uri"], "lisp://package/NO-SUCH-PACKAGE");
    assert!(r["error"]["data"]["detail"]
        .as_str()
        .unwrap()
        .contains("NO-SUCH-PACKAGE"));
    // An unknown kind of lisp:// resource is not found either, and says
    // which ones exist.
    let r = read(&mut s, 8, "lisp://elsewhere");
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(r["error"]["data"]["detail"]
        .as_str()
        .unwrap()
        .contains("lisp://image/info"));
}

#[test]
fn completion_of_template_variables_from_the_image() {
    let mut s = Server::initialized(&[]);
    let complete = |s: &mut Server, id: i64, uri: &str, arg: &str, value: &str, ctx: Value| {
        let r = s.request(json!({"jsonrpc":"2.0","id":id,"method":"completion/complete","params":{
            "ref":{"type":"ref/resource","uri":uri},"argument":{"name":arg,"value":value},"context":ctx}}));
        r["result"]["completion"]["values"].clone()
    };
    assert_eq!(
        complete(
            &mut s,
            1,
            "lisp://package/{name}",
            "name",
            "common-l",
            json!({})
        ),
        json!(["COMMON-LISP", "COMMON-LISP-USER"])
    );
    assert_eq!(
        complete(
            &mut s,
            2,
            "lisp://symbol/{package}/{name}",
            "name",
            "mapc",
            json!({"arguments":{"package":"CL"}})
        ),
        json!(["MAPC", "MAPCAN", "MAPCAR", "MAPCON"])
    );
    let systems = complete(&mut s, 3, "lisp://system/{name}", "name", "uio", json!({}));
    assert!(
        systems.as_array().unwrap().contains(&json!("uiop")),
        "{systems}"
    );
}
