//! `asdf-test-system` without a system: `file` (a test file, a script,
//! an exercise's tests beside its stub: compiled and loaded as
//! `lisp-compile-file` does, then the suites it defines run) or `test`
//! alone (a suite already in the image). The Lisp half is
//! `test-file` in `lisp/loose-files.lisp`; its reply has a system run's
//! shape, so the answer is rendered as a system's.

use lisp_syntax::data::Value;

use super::TestArgs;
use crate::tools::code::file_to_compile;
use crate::tools::lisp_call::helper_form;
use crate::tools::{ToolContext, ToolError};

/// Why the arguments name nothing to run, or too much.
pub(super) fn refuse_subject(a: &TestArgs) -> Option<String> {
    let blank = |s: &Option<String>| s.as_deref().is_some_and(|s| s.trim().is_empty());
    if blank(&a.system) || blank(&a.file) || blank(&a.test) {
        return Some(
            "`system`, `file` and `test` must not be empty: give a system name, a file path or \
             a FiveAM test or suite name (pkg::name)."
                .into(),
        );
    }
    match (&a.system, &a.file, &a.test) {
        (None, None, None) => Some(
            "Nothing to run: give `system` (an ASDF system), `file` (a Lisp file whose tests to \
             load and run, e.g. an exercise's test file) or `test` (a FiveAM test or suite \
             already defined in the image)."
                .into(),
        ),
        (Some(s), Some(f), _) => Some(format!(
            "Give `system` or `file`, not both (system {s}, file {f}): `file` runs the tests a \
             file outside any system defines."
        )),
        (None, _, _) if a.coverage == Some(true) => Some(
            "coverage: true measures a system's files: it needs `system` (give the system, or \
             run the file's tests without coverage)."
                .into(),
        ),
        _ => None,
    }
}

/// `Tests of my-app`, `Test pkg::suite of file tests/x.lisp`, `Test pkg::suite`.
pub(super) fn run_title(a: &TestArgs) -> String {
    let of = match (&a.system, &a.file) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(f)) => Some(f.clone()),
        (None, None) => None,
    };
    match (&a.test, of) {
        (Some(t), Some(of)) => format!("Test {t} of {of}"),
        (Some(t), None) => format!("Test {t}"),
        (None, Some(of)) => format!("Tests of {of}"),
        (None, None) => "Tests".into(),
    }
}

/// The `test-file` call for `file` (checked as `lisp-compile-file` checks
/// it) or `test` alone, and what it is called in errors.
pub(super) async fn test_file_form(
    a: &TestArgs,
    ctx: &ToolContext,
    mut keys: Vec<(&'static str, Value)>,
) -> Result<(String, String), ToolError> {
    let Some(file) = &a.file else {
        let test = a.test.clone().unwrap_or_default();
        return Ok((
            helper_form("test-file", vec![Value::nil()], keys),
            format!("asdf-test-system test {test}"),
        ));
    };
    let root = ctx.session.project_root();
    let (resolved, file_id) = file_to_compile(ctx, &root, file).await?;
    keys.push(("file-id", file_id));
    Ok((
        helper_form(
            "test-file",
            vec![Value::string(resolved.path.display().to_string())],
            keys,
        ),
        format!("asdf-test-system file {}", resolved.display),
    ))
}
