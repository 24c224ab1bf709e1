//! The `code` tools: introspection of the live image through Swank
//! (`code-find`, `code-describe`, `code-find-references`, `code-apropos`,
//! `code-macroexpand`) and `lisp-compile-file`. The Lisp halves are in
//! `lisp/introspect.lisp`, `lisp/build.lisp` and `lisp/systems.lisp`; the
//! image computes lines and columns (1-based, characters), this side makes paths relative to the
//! project root and renders text and `structuredContent`.

mod build;
mod compile;
mod introspect;
mod location;

pub use build::{
    build_result, build_timeout, diagnostics_from, note_build, render_build_error,
    render_build_output, render_diagnostics, render_interruption, BuildOutput, Diagnostic,
    FailedAction, BUILD_TIMEOUT_SECONDS,
};
pub(crate) use compile::file_to_compile;
pub use location::Location;

use super::lisp_call;
use super::{tool, Annotations, ToolContext, ToolDef, ToolGroup};
use compile::{lisp_compile_file, CompileArgs};
use introspect::{
    code_apropos, code_describe, code_find, code_find_references, code_macroexpand, AproposArgs,
    AproposOutput, DescribeArgs, DescribeOutput, FindArgs, FindOutput, MacroexpandArgs,
    MacroexpandOutput, RefsArgs, RefsOutput,
};

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
            "Who refers to a symbol (`kind`), per the image's cross references: callers, users of \
             a variable or macro, methods on a class; `projectOnly` (default true).",
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
