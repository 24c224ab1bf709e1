//! The JSON shape of a tool's interface: the input schema of its
//! arguments, the output schema of its results (both trimmed to what a
//! client or a model needs), and the parsing of the arguments a client
//! sends (snake_case spellings accepted, the offending field named).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::ToolError;

/// JSON Schema 2020-12 of a type as tool arguments (what deserialising
/// accepts), inlined (no `$ref`s) so every client reads it.
/// An optional argument is listed with its plain type (a client may still
/// send `null` for it); no `$schema`, since MCP's default dialect is 2020-12
/// and a draft-07 validator reads these keywords the same way.
pub fn schema_of<T: JsonSchema>() -> Value {
    let mut v = generate_schema::<T>(schemars::generate::SchemaSettings::draft2020_12());
    drop_null_from_optional(&mut v);
    // Bounds the types already imply and `additionalProperties: false` cost
    // bytes in every model's context for nothing: arguments are checked
    // when they are parsed (an unknown or negative one is a clear error).
    strip_keys(&mut v, &["minimum", "additionalProperties"]);
    v
}

/// JSON Schema 2020-12 of a type as a result (what serialising produces),
/// as precise as the results: nested objects with their properties, arrays
/// with their items, and `required` for every field the type always
/// serialises (a field with `skip_serializing_if` is optional). Results
/// never carry `null` members (see [`prune_nulls`]), so a nullable field is
/// optional with its plain type. A type used in more than one place is a
/// `$defs` entry (`$ref: "#/$defs/Name"`), one used once is inlined.
/// Descriptions are left out: clients validate with this schema, the model
/// reads the tool's description, its text result and the README.
pub fn output_schema_of<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let mut v = serde_json::to_value(schema).unwrap_or_else(|_| json!({"type": "object"}));
    strip_nonstandard_formats(&mut v);
    fold_string_choices(&mut v);
    unrequire_nullable(&mut v);
    drop_null_from_optional(&mut v);
    strip_keys(&mut v, &["description", "title", "$schema", "default"]);
    inline_single_use_defs(&mut v);
    v
}

/// Replaces each `$ref` to a `$defs` entry referenced only once (and not
/// from inside itself) by the entry, and drops `$defs` when it is empty.
fn inline_single_use_defs(v: &mut Value) {
    const PREFIX: &str = "#/$defs/";
    fn count_refs(v: &Value, counts: &mut BTreeMap<String, usize>) {
        match v {
            Value::Object(m) => {
                if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                    if let Some(name) = r.strip_prefix(PREFIX) {
                        *counts.entry(name.to_string()).or_default() += 1;
                    }
                }
                m.values().for_each(|x| count_refs(x, counts));
            }
            Value::Array(a) => a.iter().for_each(|x| count_refs(x, counts)),
            _ => {}
        }
    }
    fn substitute(v: &mut Value, defs: &Map<String, Value>, single: &[String]) {
        match v {
            Value::Object(m) => {
                let target = m
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix(PREFIX))
                    .filter(|name| single.iter().any(|s| s == name))
                    .map(String::from);
                if let Some(name) = target {
                    m.remove("$ref");
                    if let Some(Value::Object(def)) = defs.get(&name) {
                        for (k, x) in def {
                            m.entry(k.clone()).or_insert_with(|| x.clone());
                        }
                    }
                }
                m.values_mut().for_each(|x| substitute(x, defs, single));
            }
            Value::Array(a) => a.iter_mut().for_each(|x| substitute(x, defs, single)),
            _ => {}
        }
    }
    let Some(Value::Object(defs)) = v.get("$defs").cloned() else {
        return;
    };
    let mut counts = BTreeMap::new();
    count_refs(v, &mut counts);
    // What each entry refers to, directly or through others: an entry that
    // reaches itself stays a `$ref`, or inlining would never end.
    let refs_of = |name: &str| {
        let mut direct = BTreeMap::new();
        count_refs(&defs[name], &mut direct);
        direct.into_keys().collect::<Vec<_>>()
    };
    let reaches_itself = |name: &String| {
        let mut seen: Vec<String> = Vec::new();
        let mut todo = refs_of(name);
        while let Some(n) = todo.pop() {
            if &n == name {
                return true;
            }
            if defs.contains_key(&n) && !seen.contains(&n) {
                todo.extend(refs_of(&n));
                seen.push(n);
            }
        }
        false
    };
    let single: Vec<String> = defs
        .keys()
        .filter(|name| counts.get(*name) == Some(&1) && !reaches_itself(name))
        .cloned()
        .collect();
    substitute(v, &defs, &single);
    if let Some(Value::Object(d)) = v.get_mut("$defs") {
        d.retain(|name, _| !single.contains(name));
        if d.is_empty() {
            v.as_object_mut().unwrap().remove("$defs");
        }
    }
}

/// Removes every `null` member of every object in a result, recursively
/// (array elements stay): an unknown field is left out rather than `null`.
pub fn prune_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(prune_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(prune_nulls),
        _ => {}
    }
}

/// In every object schema, a property whose type admits `null` is taken
/// out of `required` (results drop `null` members).
fn unrequire_nullable(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let nullable: Vec<String> = match m.get("properties") {
                Some(Value::Object(props)) => props
                    .iter()
                    .filter(|(_, p)| admits_null(p))
                    .map(|(k, _)| k.clone())
                    .collect(),
                _ => Vec::new(),
            };
            if let Some(Value::Array(req)) = m.get_mut("required") {
                req.retain(|r| !r.as_str().is_some_and(|r| nullable.iter().any(|n| n == r)));
                if req.is_empty() {
                    m.remove("required");
                }
            }
            m.values_mut().for_each(unrequire_nullable);
        }
        Value::Array(a) => a.iter_mut().for_each(unrequire_nullable),
        _ => {}
    }
}

fn admits_null(p: &Value) -> bool {
    p.get("type") == Some(&json!("null"))
        || p["type"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("null")))
        || p["anyOf"]
            .as_array()
            .is_some_and(|a| a.iter().any(admits_null))
}

/// Removes the given keywords everywhere in a schema, except where they
/// name a property.
fn strip_keys(v: &mut Value, keys: &[&str]) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "properties" {
                    if let Value::Object(props) = x {
                        props.values_mut().for_each(|p| strip_keys(p, keys));
                    }
                } else {
                    strip_keys(x, keys);
                }
            }
            m.retain(|k, _| !keys.contains(&k.as_str()));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| strip_keys(x, keys)),
        _ => {}
    }
}

fn generate_schema<T: JsonSchema>(settings: schemars::generate::SchemaSettings) -> Value {
    let generator = settings
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let schema = generator.into_root_schema_for::<T>();
    let mut v = serde_json::to_value(schema).unwrap_or_else(|_| json!({"type": "object"}));
    strip_nonstandard_formats(&mut v);
    fold_string_choices(&mut v);
    if let Value::Object(m) = &mut v {
        // An argument-less tool still needs an object schema; the Rust type
        // name is no title for a user.
        if m.get("type").is_none() {
            m.insert("type".into(), json!("object"));
        }
        m.remove("title");
        m.remove("$schema");
    }
    v
}

/// In every object schema, a property that is not `required` loses the
/// `null` of its type: such fields are skipped when absent, never `null`.
fn drop_null_from_optional(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let required: Vec<String> = m
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            if let Some(Value::Object(props)) = m.get_mut("properties") {
                for (name, p) in props.iter_mut() {
                    if required.contains(name) {
                        continue;
                    }
                    if let Some(Value::Array(types)) = p.get_mut("type") {
                        types.retain(|t| t != "null");
                        if types.len() == 1 {
                            let only = types[0].clone();
                            p["type"] = only;
                        }
                    }
                    // An optional enum lists `null` among its values too.
                    if let Some(Value::Array(values)) = p.get_mut("enum") {
                        values.retain(|x| !x.is_null());
                    }
                    if let Some(Value::Array(any)) = p.get_mut("anyOf") {
                        any.retain(|alt| alt.get("type") != Some(&json!("null")));
                        if any.len() == 1 {
                            let only = any.remove(0);
                            if let (Value::Object(pm), Value::Object(om)) = (&mut *p, only) {
                                pm.remove("anyOf");
                                pm.extend(om);
                            }
                        }
                    }
                }
            }
            m.values_mut().for_each(drop_null_from_optional);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_null_from_optional),
        _ => {}
    }
}

/// A `oneOf` of string constants (a unit enum with documented variants)
/// becomes a plain `enum`: the same values in a fraction of the bytes. The
/// field's own description names what the values mean.
fn fold_string_choices(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let consts: Option<Vec<Value>> =
                m.get("oneOf").and_then(Value::as_array).and_then(|alts| {
                    alts.iter()
                        .map(|a| match (a.get("const"), a.get("type")) {
                            (Some(c @ Value::String(_)), Some(t)) if t == "string" => {
                                Some(c.clone())
                            }
                            _ => None,
                        })
                        .collect()
                });
            if let Some(values) = consts {
                m.remove("oneOf");
                m.insert("type".into(), json!("string"));
                m.insert("enum".into(), Value::Array(values));
            }
            m.values_mut().for_each(fold_string_choices);
        }
        Value::Array(a) => a.iter_mut().for_each(fold_string_choices),
        _ => {}
    }
}

/// Removes `format`s that are not JSON Schema's (schemars writes `uint`,
/// `double`, ...); some model front-ends reject unknown formats.
fn strip_nonstandard_formats(v: &mut Value) {
    const STANDARD: &[&str] = &[
        "date-time",
        "date",
        "time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "uuid",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
        "regex",
    ];
    match v {
        Value::Object(m) => {
            if m.get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !STANDARD.contains(&f))
            {
                m.remove("format");
            }
            m.values_mut().for_each(strip_nonstandard_formats);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nonstandard_formats),
        _ => {}
    }
}

/// Deserializes tool arguments, accepting snake_case spellings of camelCase
/// fields, and names the offending field on failure.
pub(super) fn parse_arguments<A: DeserializeOwned>(
    tool: &str,
    args: Value,
) -> Result<A, ToolError> {
    let args = match args {
        Value::Null => Value::Object(Map::new()),
        Value::Object(m) => Value::Object(camel_case_keys(m)),
        other => {
            return Err(ToolError::Argument(format!(
                "Invalid arguments for tool '{tool}': `arguments` must be an object, got {}",
                json_type_name(&other)
            )))
        }
    };
    serde_path_to_error::deserialize::<_, A>(args)
        .map_err(|e| ToolError::Argument(argument_error(tool, e)))
}

/// The words of a value that does not deserialize: the field, and what
/// was wrong with it.
fn argument_error(tool: &str, e: serde_path_to_error::Error<serde_json::Error>) -> String {
    let path = e.path().to_string();
    let inner = e.into_inner().to_string();
    if path == "." || path.is_empty() {
        format!("Invalid arguments for tool '{tool}': {inner}. See the tool's inputSchema.")
    } else {
        format!(
            "Invalid arguments for tool '{tool}': field `{path}`: {inner}. See the tool's inputSchema."
        )
    }
}

/// Renames snake_case keys to camelCase (unless the camelCase key is there).
pub(crate) fn camel_case_keys(m: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::with_capacity(m.len());
    let mut snake = Vec::new();
    for (k, v) in m {
        if k.contains('_') {
            snake.push((k, v));
        } else {
            out.insert(k, v);
        }
    }
    for (k, v) in snake {
        let camel = snake_to_camel(&k);
        if !out.contains_key(&camel) {
            out.insert(camel, v);
        }
    }
    out
}

fn snake_to_camel(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut upper = false;
    for (i, c) in s.chars().enumerate() {
        if c == '_' && i > 0 {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{ToolGroup, ToolRegistry};

    #[test]
    fn snake_keys_become_camel() {
        assert_eq!(snake_to_camel("timeout_seconds"), "timeoutSeconds");
        assert_eq!(snake_to_camel("max_output_length"), "maxOutputLength");
        assert_eq!(snake_to_camel("_meta"), "_meta");
        let m = camel_case_keys(
            json!({"print_level": 1, "printLevel": 2, "code": "x"})
                .as_object()
                .unwrap()
                .clone(),
        );
        assert_eq!(m["printLevel"], 2, "the camelCase spelling wins");
    }

    #[derive(serde::Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Args {
        code: String,
        timeout_seconds: Option<u32>,
    }

    #[test]
    fn bad_value_names_the_field() {
        let e = parse_arguments::<Args>("t", json!({"code": "x", "timeout_seconds": "soon"}))
            .err()
            .unwrap();
        assert!(e.to_string().contains("timeoutSeconds"), "{e}");
        let e = parse_arguments::<Args>("t", json!({})).err().unwrap();
        assert!(e.to_string().contains("missing field `code`"), "{e}");
        let ok = parse_arguments::<Args>("t", json!({"code": "x", "timeout_seconds": 3})).unwrap();
        assert_eq!((ok.code.as_str(), ok.timeout_seconds), ("x", Some(3)));
    }

    #[derive(serde::Serialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct Out {
        always: String,
        maybe_null: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        when_known: Option<i64>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        frames: Vec<String>,
    }

    #[derive(serde::Serialize, JsonSchema)]
    struct Point {
        x: i64,
    }

    #[derive(serde::Serialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct Nested {
        start: Point,
        end: Point,
        #[serde(skip_serializing_if = "Option::is_none")]
        out: Option<Out>,
    }

    #[test]
    fn output_schema_requires_what_every_result_has() {
        let s = output_schema_of::<Out>();
        assert_eq!(s["type"], "object");
        // Skipped when empty or absent, or `null` (results drop nulls):
        // not required, and never of type `null`.
        assert_eq!(s["required"], json!(["always"]), "{s}");
        assert_eq!(s["properties"]["always"], json!({"type": "string"}));
        assert_eq!(s["properties"]["maybeNull"], json!({"type": "string"}));
        assert_eq!(s["properties"]["whenKnown"]["type"], "integer");
        assert_eq!(s["properties"]["interrupted"], json!({"type": "boolean"}));
        assert_eq!(
            s["properties"]["frames"],
            json!({"type": "array", "items": {"type": "string"}})
        );
    }

    #[test]
    fn output_schema_shares_types_used_twice_and_inlines_the_rest() {
        let s = output_schema_of::<Nested>();
        assert_eq!(s["properties"]["start"], json!({"$ref": "#/$defs/Point"}));
        assert_eq!(s["$defs"]["Point"]["required"], json!(["x"]), "{s}");
        assert_eq!(s["properties"]["out"]["required"], json!(["always"]), "{s}");
        assert!(s["$defs"].get("Out").is_none(), "used once: inlined: {s}");
        let v = jsonschema::draft202012::new(&s).unwrap();
        assert!(v.is_valid(&json!({"start": {"x": 1}, "end": {"x": 2}})));
        assert!(!v.is_valid(&json!({"start": {"x": 1}, "end": {}})));
        assert!(!v.is_valid(&json!({})));
    }

    /// Each place in `schema` where a value is described, with its path.
    fn subschemas<'a>(path: String, schema: &'a Value, out: &mut Vec<(String, &'a Value)>) {
        out.push((path.clone(), schema));
        if *schema == json!({"not": {}}) {
            return;
        }
        let Value::Object(m) = schema else { return };
        for (k, x) in m {
            match (k.as_str(), x) {
                ("properties" | "$defs" | "patternProperties", Value::Object(named)) => {
                    for (n, sub) in named {
                        subschemas(format!("{path}/{k}/{n}"), sub, out);
                    }
                }
                ("anyOf" | "oneOf" | "allOf" | "prefixItems", Value::Array(alts)) => {
                    for (i, sub) in alts.iter().enumerate() {
                        subschemas(format!("{path}/{k}/{i}"), sub, out);
                    }
                }
                ("items" | "additionalProperties" | "not" | "if" | "then" | "else", sub) => {
                    subschemas(format!("{path}/{k}"), sub, out)
                }
                _ => {}
            }
        }
    }

    #[test]
    fn every_output_schema_gives_each_object_and_array_its_shape() {
        // Over the real registry: every object lists its properties (or the
        // schema of its values), every array its items, and nothing is left
        // as "anything" (`true` or `{}`), so no wrong shape validates.
        for t in ToolRegistry::standard(&ToolGroup::ALL).list() {
            let Some(o) = &t.output_schema else { continue };
            assert_eq!(o["type"], "object", "{}", t.name);
            jsonschema::draft202012::new(o)
                .unwrap_or_else(|e| panic!("{}: not a valid schema: {e}", t.name));
            let mut all = Vec::new();
            subschemas(String::new(), o, &mut all);
            for (path, s) in all {
                let at = format!("{} at `{path}`: {s}", t.name);
                // The field is absent (in an outcome's variant).
                if *s == json!({"not": {}}) {
                    continue;
                }
                let m = s.as_object().unwrap_or_else(|| {
                    panic!("a bare boolean schema (the Inspector refuses it): {at}")
                });
                assert!(!m.is_empty(), "says nothing: {at}");
                // An outcome's variant narrows the object around it.
                if path.starts_with("/oneOf/") && path.matches('/').count() == 2 {
                    let fields = m
                        .get("required")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten();
                    let absent = m
                        .get("properties")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flat_map(|p| p.keys());
                    for f in fields
                        .filter_map(Value::as_str)
                        .chain(absent.map(String::as_str))
                    {
                        assert!(o["properties"].get(f).is_some(), "no field `{f}`: {at}");
                    }
                    continue;
                }
                let types: Vec<&str> = match &m.get("type") {
                    Some(Value::String(t)) => vec![t.as_str()],
                    Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                };
                assert!(
                    !types.is_empty()
                        || ["$ref", "anyOf", "oneOf", "allOf", "enum", "const"]
                            .iter()
                            .any(|k| m.contains_key(*k)),
                    "no type: {at}"
                );
                if types.contains(&"object") {
                    assert!(
                        m.contains_key("properties")
                            || m.get("additionalProperties").is_some_and(Value::is_object),
                        "object without properties: {at}"
                    );
                }
                if types.contains(&"array") {
                    assert!(
                        m.contains_key("items") || m.contains_key("prefixItems"),
                        "array without items: {at}"
                    );
                }
            }
            let required = o["required"].as_array().map_or(0, Vec::len);
            assert!(
                required > 0 || o.get("oneOf").is_some() || o.get("anyOf").is_some(),
                "{}: `{{}}` would be a valid result: {o}",
                t.name
            );
        }
    }

    #[test]
    fn what_a_model_reads_of_every_tool_fits_the_budget() {
        // A model reads each tool's name, title, description and input
        // schema before its first call: with every group, at most 17.35 KB
        // (it was 15 KB before every Lisp tool took `image`, 27 bytes each,
        // and image-start/-list/-stop came; 16.5 KB before `image` carried
        // `"x-mcp-header":"Image"`, 23 bytes each, which a proxy routes
        // by; 17.1 KB before `asdf-test-system` took `file` and
        // `asdf-load-system` and `asdf-test-system` took `diagnostics`, 66
        // bytes each). (Output schemas are for clients to validate and are
        // not counted.)
        let tools: Vec<Value> = ToolRegistry::standard(&ToolGroup::ALL)
            .list()
            .filter(|t| t.group != ToolGroup::Testing)
            .map(|t| {
                json!({
                    "name": t.name,
                    "title": t.title,
                    "description": t.description,
                    "inputSchema": t.input_schema,
                })
            })
            .collect();
        let bytes = json!({ "tools": tools }).to_string().len();
        assert!(
            bytes <= 17_350,
            "name, title, description and inputSchema: {bytes} bytes"
        );
    }

    #[test]
    fn no_schema_lists_null_among_its_values() {
        for t in ToolRegistry::standard(&ToolGroup::ALL).list() {
            for s in std::iter::once(&t.input_schema).chain(t.output_schema.iter()) {
                let text = s.to_string();
                assert!(
                    !text.contains(",null]") && !text.contains("[null"),
                    "{}: {text}",
                    t.name
                );
            }
        }
    }

    #[test]
    fn schema_is_2020_12_object() {
        let s = schema_of::<Args>();
        assert_eq!(s["type"], "object");
        assert!(s.get("$schema").is_none(), "MCP's default dialect: {s}");
        assert!(s["properties"]["timeoutSeconds"].is_object());
    }
}
