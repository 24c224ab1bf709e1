//! MCP prompts: reusable instructions that teach a model the REPL-driven way
//! of working with this server's tools.

use serde_json::{json, Map, Value};

/// One prompt argument.
pub struct PromptArg {
    pub name: &'static str,
    pub description: &'static str,
    pub required: bool,
}

/// A prompt: its listing and how to render it.
pub struct Prompt {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub arguments: &'static [PromptArg],
    render: fn(&Map<String, Value>) -> String,
}

fn arg<'a>(args: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    args.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
}

fn repl_driven(args: &Map<String, Value>) -> String {
    // The task is the user's own words (a sentence, a question, a name):
    // on a line of its own, it reads right whatever it is.
    let task = match arg(args, "task") {
        Some(t) => format!("Task: {t}\n\nWork on it"),
        None => "Work on the task at hand".to_string(),
    };
    format!(
        "{task} in the live Common Lisp image, REPL-first:\n\
\n\
1. Explore. Find what exists before writing anything: clgrep-signatures and lisp-read-file \
(collapsed) for the files, code-apropos / code-describe / code-find for what the image knows, \
code-find-references for who calls what.\n\
2. Experiment. Try small forms with evaluate-lisp; state persists between calls (definitions, \
variables, *package*). Evaluate definitions in the image to try them before touching files. \
Long calls can time out (timeoutSeconds) without losing state.\n\
3. Persist. Put what works into the source files with lisp-edit-form (replace/insert a whole \
top-level form by type and name; it keeps the file readable and shows a diff). Use dryRun to \
preview. Check with lisp-check-parens if you edit text any other way.\n\
4. Verify. lisp-compile-file the changed file (read every warning), asdf-load-system the \
system, asdf-test-system its tests. Fix warnings, not just errors.\n\
\n\
Repeat in small steps. Prefer asking the image over guessing: arglists, documentation and \
macroexpansions (code-macroexpand) are one call away."
    )
}

fn debug_error(args: &Map<String, Value>) -> String {
    let error = arg(args, "error").unwrap_or("(no error text given)");
    let code = arg(args, "code")
        .map(|c| format!("\n\nThe code that failed:\n\n```lisp\n{c}\n```"))
        .unwrap_or_default();
    format!(
        "Debug this Common Lisp error:\n\n```\n{error}\n```{code}\n\n\
Steps:\n\
1. Read the condition type and the top user frames of the backtrace; find each function with \
code-find and read it with lisp-read-file (namePattern).\n\
2. Reproduce it with the smallest form in evaluate-lisp; check arguments and types with \
code-describe and by evaluating sub-forms.\n\
3. Form a hypothesis and test it in the image before editing files.\n\
4. Fix the source with lisp-edit-form, recompile with lisp-compile-file (no new warnings), and \
re-run the reproducing form and the system's tests (asdf-test-system)."
    )
}

fn add_tests(args: &Map<String, Value>) -> String {
    let target = arg(args, "target").unwrap_or("the code in question");
    let framework = arg(args, "framework").unwrap_or("FiveAM");
    format!(
        "Add tests for {target} using {framework}.\n\n\
1. Learn the behaviour: code-describe and code-find for {target}, lisp-read-file of its \
definition, code-find-references for how callers use it.\n\
2. Find the existing test system (asdf-system-info; clgrep-search for `def-suite`, `deftest` \
or `define-test`) and follow its conventions; create one if there is none.\n\
3. Try each assertion in evaluate-lisp first, covering normal cases, edge cases and errors \
(signals).\n\
4. Write the tests into the test file with lisp-edit-form: `insert_after` the last test of \
the suite (`formType` `test`, `deftest` or `define-test`; clgrep-signatures lists them) keeps \
the new test in that suite. Then run asdf-test-system and make sure they pass — and that a \
deliberately wrong expectation would fail."
    )
}

/// Every prompt this server offers.
pub static PROMPTS: &[Prompt] = &[
    Prompt {
        name: "repl-driven-development",
        title: "REPL-driven development",
        description: "The explore → experiment → persist → verify loop with this server's tools.",
        arguments: &[PromptArg {
            name: "task",
            description: "What you are working on (optional).",
            required: false,
        }],
        render: repl_driven,
    },
    Prompt {
        name: "debug-error",
        title: "Debug a Lisp error",
        description: "A method for finding and fixing the cause of a Lisp error or backtrace.",
        arguments: &[
            PromptArg {
                name: "error",
                description: "The error text or backtrace.",
                required: true,
            },
            PromptArg {
                name: "code",
                description: "The code that failed (optional).",
                required: false,
            },
        ],
        render: debug_error,
    },
    Prompt {
        name: "add-tests",
        title: "Add tests",
        description: "Write tests for a function, macro or system, verified in the image.",
        arguments: &[
            PromptArg {
                name: "target",
                description: "The function, macro or system to test.",
                required: true,
            },
            PromptArg {
                name: "framework",
                description: "Test framework: fiveam (default), rove, parachute, lisp-unit2.",
                required: false,
            },
        ],
        render: add_tests,
    },
];

/// Test frameworks offered for completion of `add-tests`' `framework`.
pub const FRAMEWORKS: &[&str] = &["fiveam", "rove", "parachute", "lisp-unit2"];

impl Prompt {
    pub fn describe(&self) -> Value {
        let args: Vec<Value> = self
            .arguments
            .iter()
            .map(|a| json!({"name": a.name, "description": a.description, "required": a.required}))
            .collect();
        json!({"name": self.name, "title": self.title, "description": self.description, "arguments": args})
    }

    /// The `prompts/get` result, or which required argument is missing.
    pub fn get(&self, args: &Map<String, Value>) -> Result<Value, PromptError> {
        for a in self.arguments.iter().filter(|a| a.required) {
            if arg(args, a.name).is_none() {
                return Err(PromptError::MissingArgument {
                    prompt: self.name.to_string(),
                    argument: a.name.to_string(),
                    about: format!(" ({})", a.description),
                });
            }
        }
        Ok(json!({
            "description": self.description,
            "messages": [{"role": "user", "content": {"type": "text", "text": (self.render)(args)}}],
        }))
    }
}

/// Why a prompt cannot be given; the text is the `-32602` error's data.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("Unknown prompt: {0}")]
    Unknown(String),
    /// `about` is empty or ` (what the argument is)`.
    #[error("Prompt '{prompt}' needs the argument '{argument}'{about}")]
    MissingArgument {
        prompt: String,
        argument: String,
        about: String,
    },
    #[error(
        "Prompt '{0}' asks the user for context: it needs a client with the elicitation capability"
    )]
    NeedsElicitation(String),
}

/// The prompt named `name`, if there is one.
pub fn find(name: &str) -> Option<&'static Prompt> {
    PROMPTS.iter().find(|p| p.name == name)
}
