//! The error of the `hloc` command line: one type for every subcommand. The subcommands
//! return it, `main` prints it and exits with 1 in one place, and the Python package
//! (`tools/python`) maps it to its exceptions.

use std::path::PathBuf;

use hlo_ir::Diagnostics;

/// Why an `hloc` command failed, and how that is shown on standard error.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Diagnostics about the text `src` (named `path`): rendered as rustc renders them
    /// (`path:line:col: error: ...`, the source line, a caret and any help), then
    /// `error: N errors in `path``. The command line colors them on a terminal.
    #[error("{}", render(.diags, .src, .path, false).trim_end())]
    Located { diags: Diagnostics, src: String, path: String },
    /// An input that is not text (a NUL byte, invalid UTF-8), located at the first byte
    /// that is not: `path:line:col: error: message`.
    #[error("{path}:{line}:{column}: error: {message}")]
    NotText { path: String, line: usize, column: usize, message: String },
    /// A message for the user: `error: message` (it may go on with `= help:` lines).
    #[error("error: {0}")]
    Message(String),
    /// A file that cannot be read, written or created: `error: cannot ACTION `path`: why`.
    #[error("error: cannot {action} `{}`: {source}", .path.display())]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    /// A failure the command has already reported (its diagnostics, or a table saying
    /// what failed): nothing more is printed.
    #[error("the failure was reported")]
    Reported,
}

impl CliError {
    /// `diags` about the text `src`, named `path` in the messages.
    pub fn located(diags: Diagnostics, src: &str, path: &str) -> CliError {
        CliError::Located { diags, src: src.to_string(), path: path.to_string() }
    }

    /// `action` (`read`, `write`, `create`) on `path` failed with `source`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> CliError {
        CliError::Io { action, path: path.into(), source }
    }
}

/// A message for the user (without the leading `error: `).
impl From<String> for CliError {
    fn from(message: String) -> CliError {
        CliError::Message(message)
    }
}

/// A message for the user (without the leading `error: `).
impl From<&str> for CliError {
    fn from(message: &str) -> CliError {
        CliError::Message(message.to_string())
    }
}

/// `diags` rendered against `src` (named `path`) as the command line prints them (`color`:
/// ANSI styles), followed by `error: N errors in `path`` when there is any error.
pub fn render(diags: &Diagnostics, src: &str, path: &str, color: bool) -> String {
    let mut text = diags.render(src, path, color);
    let n = diags.error_count();
    if n > 0 {
        text.push_str(&format!("error: {n} error{} in `{path}`\n", if n == 1 { "" } else { "s" }));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_reads_as_the_command_line_prints_it() {
        let src = "HloModule m\n\nENTRY e {\n  ROOT p = f33[] parameter(0)\n}\n";
        let d = hlo_ir::Diagnostic::error(Some(hlo_ir::Span::new(34, 37)), "bad type");
        let e = CliError::located(Diagnostics::from(d), src, "m.hlo");
        let text = e.to_string();
        assert!(text.starts_with("m.hlo:4:"), "{text}");
        assert!(text.ends_with("error: 1 error in `m.hlo`"), "{text}");
        let e = CliError::NotText { path: "b".into(), line: 2, column: 3, message: "x".into() };
        assert_eq!(e.to_string(), "b:2:3: error: x");
        assert_eq!(CliError::from("no such row").to_string(), "error: no such row");
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        assert_eq!(
            CliError::io("read", "a.json", io).to_string(),
            "error: cannot read `a.json`: gone"
        );
        // Warnings alone have no count line.
        let w = hlo_ir::Diagnostic::warning(None, "w");
        assert!(!render(&Diagnostics::from(w), src, "m.hlo", false).contains("errors in"));
    }
}
