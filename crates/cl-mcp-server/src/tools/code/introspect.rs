//! Introspection of the live image on fresh Swank threads: `code-find`,
//! `code-describe`, `code-find-references`, `code-apropos`,
//! `code-macroexpand`. The Lisp half is `lisp/introspect.lisp`.

use super::location::{inside_root, Location};
use crate::tools::lisp_call::{
    self, helper_form, plist_bool, plist_i64, plist_items, plist_list, plist_str, plist_strings,
};
use crate::tools::output::DEFAULT_MAX_OUTPUT;
use crate::tools::{ToolContext, ToolOutput};
use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------
// code-find

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct FindArgs {
    /// `pkg::name` or a bare name.
    symbol: String,
    /// For a bare name.
    package: Option<String>,
    /// Default false.
    project_only: Option<bool>,
    /// Default 50.
    limit: Option<u32>,
}

#[derive(Serialize, JsonSchema)]
struct Definition {
    /// What kind of definition: function, macro, generic-function, method,
    /// variable, class, ...
    kind: String,
    /// The definition spec, e.g. `(DEFMETHOD AREA (CIRCLE))`.
    dspec: String,
    #[serde(flatten)]
    location: Location,
    /// Why the location is unknown, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize, JsonSchema)]
pub(super) struct FindOutput {
    /// The resolved symbol, `PKG:NAME`.
    symbol: String,
    /// The project's definitions first.
    definitions: Vec<Definition>,
    /// Definitions found (before `projectOnly` and `limit`).
    count: usize,
    /// Left out by `projectOnly` (outside the project root).
    outside: usize,
    truncated: bool,
}

pub(super) async fn code_find(a: FindArgs, ctx: ToolContext) -> ToolOutput {
    if let Err(e) = lisp_call::check_read_depth(&a.symbol, "`symbol`") {
        return ToolOutput::error(e);
    }
    let form = helper_form(
        "find-definitions",
        vec![Value::string(a.symbol.clone())],
        package_key(&a.package, &ctx),
    );
    let v = match lisp_call::call_lookup(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    // The files found may be read next: make their systems' directories readable.
    lisp_call::refresh_read_roots(&ctx).await;
    let root = ctx.session.project_root();
    let symbol = plist_str(&v, "symbol").unwrap_or_default();
    let project_only = a.project_only.unwrap_or(false);
    let limit = a.limit.unwrap_or(50).max(1) as usize;
    let raw = plist_list(&v, "definitions").unwrap_or(&[]);
    let count = raw.len();
    // The project's definitions first (stable: the image's order within each).
    let (mut inside, outside): (Vec<&Value>, Vec<&Value>) =
        raw.iter().partition(|d| inside_root(d, &root));
    let outside_count = if project_only { outside.len() } else { 0 };
    if !project_only {
        inside.extend(outside);
    }
    let truncated = inside.len() > limit;
    let defs: Vec<Definition> = inside
        .into_iter()
        .take(limit)
        .map(|d| Definition {
            kind: plist_str(d, "kind").unwrap_or_default(),
            dspec: plist_str(d, "dspec").unwrap_or_default(),
            location: Location::from_plist(d, &root),
            error: plist_str(d, "error"),
        })
        .collect();
    let mut text = if count == 0 {
        format!("No source definitions recorded for {symbol} (defined at the REPL, built in, or not defined).")
    } else if defs.is_empty() {
        format!("No definitions of {symbol} under the project root.")
    } else {
        format!(
            "{} definition{} of {symbol}:",
            defs.len(),
            if defs.len() == 1 { "" } else { "s" }
        )
    };
    if truncated {
        text.push_str(&format!(
            " (the first {limit} of {}; raise `limit` to see more)",
            count - outside_count
        ));
    }
    if outside_count > 0 {
        text.push_str(&format!(
            " ({outside_count} more outside the project root; `projectOnly` left them out)"
        ));
    }
    if defs.iter().any(|d| d.error.is_some()) {
        text.push_str(
            "\n(Definitions made with evaluate-lisp have no source file; compile files with \
             lisp-compile-file or load them through ASDF to get locations.)",
        );
    }
    for d in &defs {
        match &d.error {
            Some(e) => text.push_str(&format!(
                "\n{} ({}): location unknown: {e}",
                d.dspec, d.kind
            )),
            None => text.push_str(&format!(
                "\n{}: {} {}",
                d.location.prefix(),
                d.kind,
                d.dspec
            )),
        }
    }
    let out = FindOutput {
        symbol,
        definitions: defs,
        count,
        outside: outside_count,
        truncated,
    };
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default())
}

/// `:package` when given, and always `:session`, so a bare name resolves in
/// the package the session's evaluations left `*package*` in.
fn package_key(package: &Option<String>, ctx: &ToolContext) -> Vec<(&'static str, Value)> {
    let mut keys: Vec<(&'static str, Value)> = package
        .iter()
        .map(|p| ("package", Value::string(p.clone())))
        .collect();
    keys.push(("session", Value::string(lisp_call::session_key(ctx))));
    keys
}

// ---------------------------------------------------------------------------
// code-describe

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct DescribeArgs {
    /// `pkg::name` or a bare name.
    symbol: String,
    /// For a bare name.
    package: Option<String>,
}

#[derive(Serialize, JsonSchema)]
struct Documentation {
    kind: String,
    text: String,
}

#[derive(Serialize, JsonSchema)]
pub(super) struct DescribeOutput {
    symbol: String,
    /// function, macro, generic-function, special-operator, variable,
    /// constant, class, structure, condition, type, package, ...
    kinds: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    arglist: Option<String>,
    documentation: Vec<Documentation>,
    /// The printed value of a bound variable.
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    /// `describe`'s text.
    description: String,
}

pub(super) async fn code_describe(a: DescribeArgs, ctx: ToolContext) -> ToolOutput {
    if let Err(e) = lisp_call::check_read_depth(&a.symbol, "`symbol`") {
        return ToolOutput::error(e);
    }
    let mut keys = package_key(&a.package, &ctx);
    keys.push(("max-output", Value::Integer(DEFAULT_MAX_OUTPUT as i64)));
    let form = helper_form(
        "describe-symbol",
        vec![Value::string(a.symbol.clone())],
        keys,
    );
    let v = match lisp_call::call_lookup(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let out = DescribeOutput {
        symbol: plist_str(&v, "symbol").unwrap_or_default(),
        kinds: plist_strings(&v, "kinds"),
        arglist: plist_str(&v, "arglist"),
        documentation: plist_items(&v, "documentation", |d| Documentation {
            kind: plist_str(d, "kind").unwrap_or_default(),
            text: plist_str(d, "text").unwrap_or_default(),
        }),
        value: plist_str(&v, "value"),
        description: plist_str(&v, "describe").unwrap_or_default(),
    };
    let kinds = if out.kinds.is_empty() {
        "no definitions (an interned symbol only)".to_string()
    } else {
        out.kinds.join(", ")
    };
    let mut text = format!("{}: {kinds}", out.symbol);
    if let Some(a) = &out.arglist {
        text.push_str(&format!("\nArglist: {a}"));
    }
    if let Some(val) = &out.value {
        text.push_str(&format!("\nValue: {val}"));
    }
    for d in &out.documentation {
        text.push_str(&format!("\nDocumentation ({}): {}", d.kind, d.text));
    }
    if !out.description.trim().is_empty() {
        text.push_str(&format!("\n\n{}", out.description.trim_end()));
    }
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default())
}

// ---------------------------------------------------------------------------
// code-find-references

#[derive(Deserialize, JsonSchema, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
enum XrefKind {
    #[default]
    Calls,
    References,
    Binds,
    Sets,
    Macroexpands,
    Specializes,
}

impl XrefKind {
    fn name(self) -> &'static str {
        match self {
            XrefKind::Calls => "calls",
            XrefKind::References => "references",
            XrefKind::Binds => "binds",
            XrefKind::Sets => "sets",
            XrefKind::Macroexpands => "macroexpands",
            XrefKind::Specializes => "specializes",
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RefsArgs {
    /// `pkg::name` or a bare name.
    symbol: String,
    /// For a bare name.
    package: Option<String>,
    /// Default `calls`.
    kind: Option<XrefKind>,
    project_only: Option<bool>,
    /// Default 200.
    limit: Option<u32>,
}

#[derive(Serialize, JsonSchema)]
struct Reference {
    /// Relative to the project root when inside it.
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<i64>,
    /// The referring definition, e.g. `MCPDEMO::TWICE`.
    name: String,
    /// The source line of the reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct RefsOutput {
    symbol: String,
    kind: String,
    refs: Vec<Reference>,
    /// How many references there are (more than listed when `truncated`).
    count: usize,
    /// True when `limit` cut the list.
    truncated: bool,
    /// False when this Lisp keeps no cross-reference data of this kind.
    implemented: bool,
    /// References left out by `projectOnly`.
    outside_project: usize,
}

pub(super) async fn code_find_references(a: RefsArgs, ctx: ToolContext) -> ToolOutput {
    if let Err(e) = lisp_call::check_read_depth(&a.symbol, "`symbol`") {
        return ToolOutput::error(e);
    }
    let kind = a.kind.unwrap_or_default();
    let root = ctx.session.project_root();
    let project_only = a.project_only.unwrap_or(true);
    let limit = a.limit.unwrap_or(200);
    let mut keys = package_key(&a.package, &ctx);
    keys.push(("limit", Value::Integer(limit.into())));
    if project_only {
        // Filtered in the image, before the limit applies.
        keys.push(("under", Value::string(root.to_string_lossy().into_owned())));
    }
    let form = helper_form(
        "xref",
        vec![Value::keyword(kind.name()), Value::string(a.symbol.clone())],
        keys,
    );
    let v = match lisp_call::call_lookup(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let symbol = plist_str(&v, "symbol").unwrap_or_default();
    let implemented = plist_bool(&v, "implemented");
    let all = plist_list(&v, "refs").unwrap_or(&[]);
    let refs: Vec<Reference> = all
        .iter()
        .filter(|r| !project_only || inside_root(r, &root))
        .map(|r| {
            let loc = Location::from_plist(r, &root);
            Reference {
                path: loc.path,
                line: loc.line,
                name: plist_str(r, "name").unwrap_or_default(),
                context: plist_str(r, "context").map(|c| c.trim().to_string()),
            }
        })
        .collect();
    let outside = plist_i64(&v, "outside").unwrap_or(0).max(0) as usize + (all.len() - refs.len());
    let count = plist_i64(&v, "count")
        .map(|c| c.max(0) as usize)
        .unwrap_or(refs.len())
        .saturating_sub(all.len() - refs.len())
        .max(refs.len());
    let truncated = count > refs.len();
    let mut text = if !implemented {
        format!(
            "This Lisp keeps no cross-reference data for \"{}\"; no references can be listed.",
            kind.name()
        )
    } else if truncated {
        format!(
            "{count} reference(s) ({}) to {symbol}; the first {} are listed (raise limit to see more)",
            kind.name(),
            refs.len()
        )
    } else {
        format!("{} reference(s) ({}) to {symbol}", refs.len(), kind.name())
    };
    if outside > 0 {
        text.push_str(&format!(
            " ({outside} more outside the project root; pass projectOnly=false to see them)"
        ));
    }
    if implemented && refs.is_empty() && outside == 0 {
        text.push_str(
            " (code compiled without cross-reference data, e.g. typed at the REPL, is not seen)",
        );
    }
    for r in &refs {
        let at = match (&r.path, r.line) {
            (Some(p), Some(l)) => format!("{p}:{l}"),
            (Some(p), None) => p.clone(),
            _ => "<no file>".to_string(),
        };
        text.push_str(&format!("\n{at}: {}", r.name));
        if let Some(c) = &r.context {
            text.push_str(&format!("  |  {c}"));
        }
    }
    let out = RefsOutput {
        symbol,
        kind: kind.name().to_string(),
        count,
        truncated,
        refs,
        implemented,
        outside_project: outside,
    };
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default())
}

// ---------------------------------------------------------------------------
// code-apropos

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct AproposArgs {
    query: String,
    /// Only this package's.
    package: Option<String>,
    external_only: Option<bool>,
    /// Default 200.
    limit: Option<u32>,
}

#[derive(Serialize, JsonSchema)]
struct AproposSymbol {
    symbol: String,
    kinds: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
pub(super) struct AproposOutput {
    /// How many symbols matched (may exceed the number listed).
    count: i64,
    symbols: Vec<AproposSymbol>,
}

pub(super) async fn code_apropos(a: AproposArgs, ctx: ToolContext) -> ToolOutput {
    if a.query.is_empty() {
        return ToolOutput::error("query must not be empty.");
    }
    let mut keys: Vec<(&'static str, Value)> = a
        .package
        .iter()
        .map(|p| ("package", Value::string(p.clone())))
        .collect();
    if a.external_only == Some(true) {
        keys.push(("external-only", Value::t()));
    }
    keys.push(("limit", Value::Integer(a.limit.unwrap_or(200).into())));
    let form = helper_form(
        "apropos-symbols",
        vec![Value::string(a.query.clone())],
        keys,
    );
    let v = match lisp_call::call_lookup(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let out = AproposOutput {
        count: plist_i64(&v, "count").unwrap_or(0),
        symbols: plist_items(&v, "symbols", |s| AproposSymbol {
            symbol: plist_str(s, "symbol").unwrap_or_default(),
            kinds: plist_strings(s, "kinds"),
        }),
    };
    let mut text = format!("{} symbol(s) match {:?}", out.count, a.query);
    if (out.symbols.len() as i64) < out.count {
        text.push_str(&format!(" (first {} shown)", out.symbols.len()));
    }
    for s in &out.symbols {
        if s.kinds.is_empty() {
            text.push_str(&format!("\n{}", s.symbol));
        } else {
            text.push_str(&format!("\n{} ({})", s.symbol, s.kinds.join(", ")));
        }
    }
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default())
}

// ---------------------------------------------------------------------------
// code-macroexpand

#[derive(Deserialize, JsonSchema, Clone, Copy)]
enum ExpandMode {
    #[serde(rename = "1")]
    One,
    #[serde(rename = "all")]
    All,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct MacroexpandArgs {
    form: String,
    package: Option<String>,
    mode: Option<ExpandMode>,
}

/// `structuredContent` of `code-macroexpand`.
#[derive(Serialize, JsonSchema)]
pub(super) struct MacroexpandOutput {
    /// The expansion, printed.
    expansion: String,
    /// False when the form was not a macro form (returned as it was).
    expanded: bool,
}

pub(super) async fn code_macroexpand(a: MacroexpandArgs, ctx: ToolContext) -> ToolOutput {
    if let Err(e) = lisp_call::check_read_depth(&a.form, "`form`") {
        return ToolOutput::error(e);
    }
    let mut keys = package_key(&a.package, &ctx);
    let mode = match a.mode.unwrap_or(ExpandMode::All) {
        ExpandMode::One => "one",
        ExpandMode::All => "all",
    };
    keys.push(("mode", Value::keyword(mode)));
    let form = helper_form(
        "macroexpand-form",
        vec![Value::string(a.form.clone())],
        keys,
    );
    let v = match lisp_call::call_lookup(&ctx, &form).await {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let expansion = plist_str(&v, "expansion").unwrap_or_default();
    let expanded = plist_bool(&v, "expanded");
    let text = if expanded {
        expansion.clone()
    } else {
        format!("{expansion}\n; (not a macro form: nothing was expanded)")
    };
    let out = MacroexpandOutput {
        expansion,
        expanded,
    };
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default())
}
