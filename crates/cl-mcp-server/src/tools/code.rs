//! The `code` tools: introspection of the live image through Swank
//! (`code-find`, `code-describe`, `code-find-references`, `code-apropos`,
//! `code-macroexpand`) and `lisp-compile-file`. The Lisp halves are in
//! `lisp/introspect.lisp`, `lisp/build.lisp` and `lisp/systems.lisp`; the image computes lines and
//! columns (1-based, characters), this side makes paths relative to the
//! project root and renders text and `structuredContent`.

use std::path::Path;

use lisp_syntax::data::Value;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fs_paths::{self, Access};
use super::lisp_call::{
    self, helper_form, plist_bool, plist_i64, plist_items, plist_list, plist_str, plist_strings,
};
use super::output::DEFAULT_MAX_OUTPUT;
use super::{tool, Annotations, ToolContext, ToolDef, ToolGroup, ToolOutput};

/// A source location as the tools show it.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct Location {
    /// Relative to the project root when inside it, else absolute; absent
    /// when the image does not know the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<i64>,
}

impl Location {
    pub fn from_plist(v: &Value, root: &Path) -> Location {
        Location {
            path: plist_str(v, "path").map(|p| fs_paths::display_path(root, Path::new(&p))),
            line: plist_i64(v, "line"),
            column: plist_i64(v, "column"),
        }
    }

    /// `path:line:column` (as much as is known).
    pub fn prefix(&self) -> String {
        match (&self.path, self.line, self.column) {
            (Some(p), Some(l), Some(c)) => format!("{p}:{l}:{c}"),
            (Some(p), Some(l), None) => format!("{p}:{l}"),
            (Some(p), None, _) => p.clone(),
            (None, _, _) => "<no file>".to_string(),
        }
    }
}

fn inside_root(v: &Value, root: &Path) -> bool {
    plist_str(v, "path").is_some_and(|p| Path::new(&p).starts_with(root))
}

// ---------------------------------------------------------------------------
// Diagnostics (shared with the asdf tools).

/// One compiler diagnostic.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct Diagnostic {
    /// `error`, `warning`, `style-warning` or `note`.
    pub severity: String,
    pub message: String,
    #[serde(flatten)]
    pub location: Location,
}

/// Reads the `:diagnostics` of a build helper's result.
pub fn diagnostics_from(v: &Value, root: &Path) -> Vec<Diagnostic> {
    let mut diagnostics = compiler_diagnostics(v, root);
    // A reader error some Lisps (CLISP) signal out of the build instead of
    // reporting it as the compiler's: a diagnostic of the failed file, so
    // it too names the form that does not close.
    if !diagnostics.iter().any(|d| d.severity == "error") {
        let failed = v.plist_get("failed").filter(|f| !f.is_nil());
        if let Some((file, reason)) =
            failed.and_then(|f| Some((plist_str(f, "path")?, plist_str(f, "reason")?)))
        {
            let mut diagnostic = Diagnostic {
                severity: "error".into(),
                message: reason,
                location: Location {
                    path: Some(fs_paths::display_path(root, Path::new(&file))),
                    line: None,
                    column: None,
                },
            };
            name_the_broken_form(&mut diagnostic, Path::new(&file));
            if diagnostic.location.line.is_some() {
                diagnostics.insert(0, diagnostic);
            }
        }
    }
    diagnostics
}

fn compiler_diagnostics(v: &Value, root: &Path) -> Vec<Diagnostic> {
    plist_items(v, "diagnostics", |d| {
        let mut diagnostic = Diagnostic {
            severity: plist_str(d, "severity").unwrap_or_else(|| "note".into()),
            message: plist_str(d, "message").unwrap_or_default(),
            location: Location::from_plist(d, root),
        };
        if let Some(file) = plist_str(d, "path") {
            name_the_broken_form(&mut diagnostic, Path::new(&file));
        }
        diagnostic
    })
}

/// A reader error is placed by the compiler where it stopped reading: for a
/// missing `)`, the end of the file, which says nothing about which form is
/// broken. When the file's parentheses do not balance, the diagnostic moves
/// to the form that does not close (or the `)` too many), and says which
/// form it is and where its indentation puts the closers, as
/// `lisp-check-parens` does.
fn name_the_broken_form(d: &mut Diagnostic, file: &Path) {
    const READ_ERRORS: [&str; 6] = [
        "read error",
        "reader-error",
        "end of file",
        "end-of-file",
        "unmatched close parenthesis",
        "ends within an object",
    ];
    let message = d.message.to_lowercase();
    if d.severity != "error" || !READ_ERRORS.iter().any(|e| message.contains(e)) {
        return;
    }
    let small = std::fs::metadata(file).is_ok_and(|m| m.len() <= 8 << 20);
    let Some(text) = small.then(|| std::fs::read_to_string(file).ok()).flatten() else {
        return;
    };
    let (out, said) = super::source::check::check_text(&text, 0, 0);
    if let (false, Some(at)) = (out.ok, out.position) {
        d.location.line = Some(at.line as i64);
        d.location.column = Some(at.column as i64);
        d.message = format!("{}\n{said}", d.message.trim_end());
    }
}

/// `path:line:column: severity: message`, one per line (message lines after
/// the first indented).
pub fn render_diagnostics(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| {
            let msg = d.message.trim_end().replace('\n', "\n    ");
            format!("{}: {}: {}", d.location.prefix(), d.severity, msg)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The Lisp condition a build ended with (`:error` plist), as text.
pub fn render_build_error(v: &Value) -> Option<String> {
    let e = v.plist_get("error").filter(|e| !e.is_nil())?;
    let mut text = format!(
        "[ERROR] {}\n{}",
        plist_str(e, "type").unwrap_or_default(),
        plist_str(e, "message").unwrap_or_default()
    );
    let frames = plist_list(e, "backtrace").unwrap_or(&[]);
    if !frames.is_empty() {
        text.push_str("\n\n[Backtrace]");
        for f in frames {
            if let Some([i, s]) = f.as_list() {
                text.push_str(&format!(
                    "\n{}: {}",
                    i.as_i64().unwrap_or(0),
                    s.as_str().unwrap_or("")
                ));
            }
        }
    }
    Some(text)
}

/// Default `timeoutSeconds` of the build tools (compile, load, test).
pub const BUILD_TIMEOUT_SECONDS: f64 = 600.0;

/// The validated timeout of a build tool call.
pub fn build_timeout(seconds: Option<f64>) -> Result<std::time::Duration, String> {
    lisp_call::timeout_arg(seconds, BUILD_TIMEOUT_SECONDS)
}

/// The `[TIMEOUT]`/`[INTERRUPTED]` line of a build that was stopped, if it was.
pub fn render_interruption(v: &Value, what: &str, timeout: std::time::Duration) -> Option<String> {
    if !plist_bool(v, "interrupted") {
        return None;
    }
    let mut text = if plist_bool(v, "timed-out") {
        format!(
            "[TIMEOUT] {what} did not finish within {} (timeoutSeconds) and was interrupted.",
            super::eval::seconds_text(timeout.as_secs_f64())
        )
    } else {
        format!("[INTERRUPTED] {what} was interrupted.")
    };
    let frames = plist_strings(v, "where");
    if !frames.is_empty() {
        text.push_str("\nIt was in:");
        for f in frames {
            text.push_str(&format!("\n  {f}"));
        }
    }
    text.push_str("\nThe image is still running; its state is intact.");
    Some(text)
}

/// `[stdout]`/`[stderr]` sections of a build's captured output, if any.
pub fn render_build_output(v: &Value) -> String {
    let mut text = String::new();
    for (key, label) in [("stdout", "[stdout]"), ("stderr", "[stderr]")] {
        if let Some(s) = plist_str(v, key).filter(|s| !s.trim().is_empty()) {
            text.push_str(&format!("\n\n{label}\n{}", s.trim_end()));
        }
    }
    text
}

// ---------------------------------------------------------------------------
// code-find

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FindArgs {
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
struct FindOutput {
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

async fn code_find(a: FindArgs, ctx: ToolContext) -> ToolOutput {
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
struct DescribeArgs {
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
struct DescribeOutput {
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

async fn code_describe(a: DescribeArgs, ctx: ToolContext) -> ToolOutput {
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
struct RefsArgs {
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
struct RefsOutput {
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

async fn code_find_references(a: RefsArgs, ctx: ToolContext) -> ToolOutput {
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
struct AproposArgs {
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
struct AproposOutput {
    /// How many symbols matched (may exceed the number listed).
    count: i64,
    symbols: Vec<AproposSymbol>,
}

async fn code_apropos(a: AproposArgs, ctx: ToolContext) -> ToolOutput {
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
struct MacroexpandArgs {
    form: String,
    package: Option<String>,
    mode: Option<ExpandMode>,
}

/// `structuredContent` of `code-macroexpand`.
#[derive(Serialize, JsonSchema)]
struct MacroexpandOutput {
    /// The expansion, printed.
    expansion: String,
    /// False when the form was not a macro form (returned as it was).
    expanded: bool,
}

async fn code_macroexpand(a: MacroexpandArgs, ctx: ToolContext) -> ToolOutput {
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

// ---------------------------------------------------------------------------
// lisp-compile-file

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CompileArgs {
    path: String,
    load: Option<bool>,
    /// Default 600.
    timeout_seconds: Option<f64>,
}

/// Which part of a build failed and why.
#[derive(Serialize, JsonSchema, Debug, Clone, PartialEq)]
pub struct FailedAction {
    /// The ASDF operation (`compile-op`, `load-op`, ...), when an ASDF
    /// action failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// The component as `system/file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// The component's file (relative to the project root when inside it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Why, in one line.
    pub reason: String,
}

impl FailedAction {
    fn from_plist(v: &Value, root: &Path) -> Option<FailedAction> {
        let f = v.plist_get("failed").filter(|f| !f.is_nil())?;
        Some(FailedAction {
            operation: plist_str(f, "operation"),
            component: plist_str(f, "component"),
            path: plist_str(f, "path").map(|p| fs_paths::display_path(root, Path::new(&p))),
            reason: plist_str(f, "reason").unwrap_or_default(),
        })
    }

    /// `compiling bad/b (src/b.lisp): reason`.
    pub fn line(&self) -> String {
        let what = match self.operation.as_deref() {
            Some("compile-op") => "compiling",
            Some("load-op") => "loading",
            Some("test-op") => "testing",
            Some(op) => op,
            None => "",
        };
        let mut text = String::new();
        if let Some(c) = &self.component {
            text.push_str(format!("{what} {c}").trim());
            if let Some(p) = &self.path {
                text.push_str(&format!(" ({p})"));
            }
            text.push_str(": ");
        }
        text.push_str(&self.reason);
        text
    }
}

/// `structuredContent` of `lisp-compile-file` and `asdf-load-system`.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildOutput {
    /// No error, and `failureP` false: a full WARNING fails the build, as
    /// ASDF treats it; style-warnings and notes do not.
    pub success: bool,
    /// `compile-file`'s warnings-p: some warning (style-warnings included)
    /// or error was reported. For a system, over all its files.
    pub warnings_p: bool,
    /// `compile-file`'s failure-p: an error or a full WARNING was reported
    /// (or the build ended with an error). For a system, over all its files.
    pub failure_p: bool,
    /// Every compiler diagnostic, whether the build succeeded or not.
    pub diagnostics: Vec<Diagnostic>,
    pub elapsed_ms: i64,
    /// The error the build ended with, if any (`TYPE: message`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When an ASDF build failed: which component, and why in one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<FailedAction>,
    /// For an `.asd` file: the systems it defines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub systems: Option<Vec<String>>,
}

impl BuildOutput {
    /// Reads a build helper's plist.
    pub fn from_plist(v: &Value, root: &Path) -> BuildOutput {
        BuildOutput {
            success: plist_bool(v, "success"),
            warnings_p: plist_bool(v, "warnings-p"),
            failure_p: plist_bool(v, "failure-p"),
            diagnostics: diagnostics_from(v, root),
            elapsed_ms: plist_i64(v, "elapsed-ms").unwrap_or(0),
            error: v.plist_get("error").filter(|e| !e.is_nil()).map(|e| {
                format!(
                    "{}: {}",
                    plist_str(e, "type").unwrap_or_default(),
                    plist_str(e, "message").unwrap_or_default()
                )
            }),
            failed: FailedAction::from_plist(v, root),
            systems: None,
        }
    }

    /// Counts per severity, e.g. `1 error, 2 warnings`.
    pub fn summary(&self) -> String {
        let count = |s: &str| self.diagnostics.iter().filter(|d| d.severity == s).count();
        let parts: Vec<String> = [
            ("error", count("error")),
            ("warning", count("warning")),
            ("style-warning", count("style-warning")),
            ("note", count("note")),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| format!("{n} {s}{}", if *n == 1 { "" } else { "s" }))
        .collect();
        if parts.is_empty() {
            "no diagnostics".to_string()
        } else {
            parts.join(", ")
        }
    }
}

async fn lisp_compile_file(a: CompileArgs, ctx: ToolContext) -> ToolOutput {
    let root = ctx.session.project_root();
    let extra = fs_paths::asdf_source_roots(&ctx.session);
    let resolved = match fs_paths::resolve(&root, &a.path, Access::Read, &extra) {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(e.to_string()),
    };
    if !resolved.exists {
        return ToolOutput::error(format!("No such file: {}", resolved.display));
    }
    if resolved.path.is_dir() {
        return ToolOutput::error(format!(
            "{} is a directory: lisp-compile-file compiles one file (to build a system, use \
             asdf-load-system).",
            resolved.display
        ));
    }
    // The image opens the file by name, and opening a named pipe would wait
    // for a writer until the build timeout: check what is there on a
    // non-blocking handle first, off the async workers. The image checks
    // the file it opens against this one (device and inode) before it
    // compiles, and a pipe swapped in after that is released (see
    // `watch_for_pipes`).
    let check = resolved.clone();
    let checked = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::MetadataExt;
        check.open_regular().map(|(_, m)| (m.dev(), m.ino()))
    })
    .await
    .unwrap_or_else(|e| Err(format!("Cannot check '{}': {e}", resolved.display)));
    let file_id = match checked {
        Ok((dev, ino)) => match (i64::try_from(dev), i64::try_from(ino)) {
            // `(list DEV INO)`: the form's arguments are evaluated.
            (Ok(d), Ok(i)) => Value::list(vec![
                Value::symbol_named(Some("COMMON-LISP"), "LIST"),
                Value::Integer(d),
                Value::Integer(i),
            ]),
            _ => Value::nil(),
        },
        Err(e) => return ToolOutput::error(e),
    };
    let load = a.load.unwrap_or(true);
    let timeout = match build_timeout(a.timeout_seconds) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(e),
    };
    // A system definition is loaded as ASDF loads it (`asdf:load-asd`), so
    // its systems become known by name; compiling it as plain code in
    // CL-USER fails on ASDF's own symbols.
    let asd = resolved
        .path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("asd"));
    let path = Value::string(resolved.path.display().to_string());
    let max_output = ("max-output", Value::Integer(DEFAULT_MAX_OUTPUT as i64));
    let file_id = ("file-id", file_id);
    let form = if asd {
        helper_form(
            "load-asd-with-diagnostics",
            vec![path],
            vec![max_output, file_id],
        )
    } else {
        helper_form(
            "compile-file-with-diagnostics",
            vec![path],
            vec![("load", Value::bool(load)), max_output, file_id],
        )
    };
    let what = format!("lisp-compile-file {}", resolved.display);
    let done = tokio_util::sync::CancellationToken::new();
    let watch = tokio::spawn(watch_for_pipes(
        resolved.path.clone(),
        root.clone(),
        done.clone(),
    ));
    let v = lisp_call::call_build(&ctx, &what, &form, timeout).await;
    done.cancel();
    if watch.await.unwrap_or(false) {
        return ToolOutput::error(format!(
            "{} was replaced by a named pipe (FIFO) while the image opened it to compile: the \
             server opened the pipe's other end, so the compiler read an empty input instead of \
             waiting for a writer forever. What was compiled{} was not your file. Compile again \
             once a regular file is there.",
            resolved.display,
            if load && !asd { " (and loaded)" } else { "" }
        ));
    }
    let v = match v {
        Ok(v) => v,
        Err(e) => return ToolOutput::error(e),
    };
    let mut out = BuildOutput::from_plist(&v, &root);
    if asd {
        let systems = plist_strings(&v, "systems");
        let headline = if out.success {
            format!(
                "Loaded {} with asdf:load-asd in {} ms: defines {}; {}",
                resolved.display,
                out.elapsed_ms,
                if systems.is_empty() {
                    "no system".to_string()
                } else {
                    format!(
                        "{} {}",
                        if systems.len() == 1 {
                            "system"
                        } else {
                            "systems"
                        },
                        systems.join(", ")
                    )
                },
                out.summary()
            )
        } else {
            format!(
                "Loading {} with asdf:load-asd failed in {} ms: {}",
                resolved.display,
                out.elapsed_ms,
                out.summary()
            )
        };
        out.systems = Some(systems);
        return build_result(headline, out, &v, "Loading the .asd", timeout);
    }
    let loaded = load && plist_bool(&v, "loaded");
    let headline = if out.success {
        format!(
            "{} {} in {} ms: {}",
            if loaded {
                "Compiled and loaded"
            } else {
                "Compiled"
            },
            resolved.display,
            out.elapsed_ms,
            out.summary()
        )
    } else {
        format!(
            "Compilation failed for {} in {} ms (compile-file's failure-p{}): {}",
            resolved.display,
            out.elapsed_ms,
            if loaded {
                "; the fasl was loaded anyway"
            } else {
                ""
            },
            out.summary()
        )
    };
    note_build(&ctx, &out, &headline);
    build_result(headline, out, &v, "The compilation", timeout)
}

/// How often a compile looks whether a named pipe was swapped in at its
/// file while the image opens it.
const PIPE_WATCH: std::time::Duration = std::time::Duration::from_millis(100);

/// Until `done`: releases a reader stuck opening a named pipe swapped in
/// at `path` after the server and the image checked it (the compiler opens
/// the file by name once more; no portable Lisp can compile an opened
/// file). Returns true when it released one.
async fn watch_for_pipes(
    path: std::path::PathBuf,
    root: std::path::PathBuf,
    done: tokio_util::sync::CancellationToken,
) -> bool {
    let mut released = false;
    loop {
        tokio::select! {
            _ = done.cancelled() => return released,
            _ = tokio::time::sleep(PIPE_WATCH) => {}
        }
        let (p, r) = (path.clone(), root.clone());
        released |= tokio::task::spawn_blocking(move || fs_paths::release_pipe_readers(&p, &r))
            .await
            .unwrap_or(false);
    }
}

/// The result of a compile or load: the headline, then the diagnostics as
/// `path:line:column: severity: message`, any build error or interruption,
/// and the captured output when it failed.
/// A build note for a client that asked for logs: the headline at `info`
/// (`warning` when the build failed), each warning or error diagnostic at
/// `warning`/`error`.
pub fn note_build(ctx: &ToolContext, out: &BuildOutput, headline: &str) {
    use crate::tools::LogLevel;
    ctx.log(
        if out.success {
            LogLevel::Info
        } else {
            LogLevel::Warning
        },
        headline,
    );
    for d in &out.diagnostics {
        let level = match d.severity.as_str() {
            "error" => LogLevel::Error,
            "warning" => LogLevel::Warning,
            _ => continue,
        };
        ctx.log(level, &render_diagnostics(std::slice::from_ref(d)));
    }
}

pub fn build_result(
    headline: String,
    out: BuildOutput,
    v: &Value,
    what: &str,
    timeout: std::time::Duration,
) -> ToolOutput {
    let mut text = headline;
    if let Some(f) = &out.failed {
        text.push_str(&format!("\nFailed: {}", f.line()));
    }
    if !out.diagnostics.is_empty() {
        text.push('\n');
        text.push_str(&render_diagnostics(&out.diagnostics));
    }
    if let Some(e) = render_build_error(v) {
        text.push_str(&format!("\n\n{e}"));
    }
    if let Some(t) = render_interruption(v, what, timeout) {
        text.push_str(&format!("\n\n{t}"));
    }
    if !out.success {
        text.push_str(&render_build_output(v));
    }
    let is_error = !out.success;
    ToolOutput::structured(text, serde_json::to_value(out).unwrap_or_default()).with_error(is_error)
}

/// The tools of the `code` group.
pub fn tools() -> Vec<ToolDef> {
    vec![
        tool(
            "code-find",
            ToolGroup::Code,
            "Find definitions",
            "Where a symbol is defined in the live image: each definition (function, method, \
             class, ...) with path, line and column, the project's first.",
            Annotations::READ_ONLY,
            |a: FindArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, code_find(a, ctx).await)
            },
        )
        .with_output_schema::<FindOutput>(),
        tool(
            "code-describe",
            ToolGroup::Code,
            "Describe a symbol",
            "What a symbol names in the live image: kinds, arglist, documentation, value and \
             `describe` text.",
            Annotations::READ_ONLY,
            |a: DescribeArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, code_describe(a, ctx).await)
            },
        )
        .with_output_schema::<DescribeOutput>(),
        tool(
            "code-find-references",
            ToolGroup::Code,
            "Find references",
            "Who refers to a symbol, per the image's cross references (`kind`): callers, users of \
             a variable or macro, methods on a class; the project's only unless `projectOnly` is \
             false.",
            Annotations::READ_ONLY,
            |a: RefsArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, code_find_references(a, ctx).await)
            },
        )
        .with_output_schema::<RefsOutput>(),
        tool(
            "code-apropos",
            ToolGroup::Code,
            "Apropos",
            "Symbols whose names contain `query` (any case), with what each names.",
            Annotations::READ_ONLY,
            |a: AproposArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, code_apropos(a, ctx).await)
            },
        )
        .with_output_schema::<AproposOutput>(),
        tool(
            "code-macroexpand",
            ToolGroup::Code,
            "Macroexpand",
            "Expand a macro form once (`mode` 1) or fully (`all`, the default), read in \
             `package`.",
            Annotations::READ_ONLY,
            |a: MacroexpandArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, code_macroexpand(a, ctx).await)
            },
        )
        .with_output_schema::<MacroexpandOutput>(),
        tool(
            "lisp-compile-file",
            ToolGroup::Code,
            "Compile a file",
            "Compile and load (unless `load` is false) a Lisp file. Diagnostics as \
             `path:line:col: severity: message`; a WARNING fails, a style-warning does not. An \
             `.asd` is loaded with asdf:load-asd.",
            Annotations::MUTATING,
            |a: CompileArgs, ctx: ToolContext| async move {
                let c = ctx.clone();
                lisp_call::finish(&c, lisp_compile_file(a, ctx).await)
            },
        )
        .with_output_schema::<BuildOutput>()
        .with_task_support(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use lisp_syntax::data;

    #[test]
    fn diagnostics_are_relative_and_rendered() {
        let v = data::read(
            r#"(:success nil :diagnostics ((:severity "warning" :message "bad
thing" :path "/proj/src/a.lisp" :line 5 :column 3) (:severity "error" :message "no file" :path nil))
               :elapsed-ms 12 :error nil)"#,
        )
        .unwrap();
        let out = BuildOutput::from_plist(&v, Path::new("/proj"));
        assert_eq!(
            out.diagnostics[0].location.path.as_deref(),
            Some("src/a.lisp")
        );
        assert_eq!(
            render_diagnostics(&out.diagnostics),
            "src/a.lisp:5:3: warning: bad\n    thing\n<no file>: error: no file"
        );
        assert_eq!(out.summary(), "1 error, 1 warning");
        let json = serde_json::to_value(&out).unwrap();
        assert_eq!(json["diagnostics"][0]["line"], 5);
        assert_eq!(json["diagnostics"][0]["path"], "src/a.lisp");
        assert_eq!(json["elapsedMs"], 12);
    }
}
