//! Diagnostics: spans, messages, hints, and their rustc-style rendering.
//!
//! Every error the library reports about user input is a [`Diagnostic`] with a byte
//! [`Span`] into the source text. [`Diagnostics::render`] prints
//!
//! ```text
//! model.hlo:5:8: error: unknown element type `f33`
//!   |
//! 5 |   p0 = f33[8,16]{1,0} parameter(0)
//!   |        ^^^ not an XLA primitive type
//!   |
//!   = help: did you mean `f32`?
//! ```
//!
//! The header line is `path:line:col: severity: message` (clickable in editors and
//! greppable); the snippet below it is drawn by `annotate-snippets`, the renderer rustc
//! itself uses.

use std::fmt;

use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};

/// A byte range `[start, end)` in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start: start as u32, end: end as u32 }
    }
    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span { start: self.start.min(other.start), end: self.end.max(other.end) }
    }
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The input cannot be used as it is.
    Error,
    /// The input is used, but probably not as meant.
    Warning,
    /// Information about what was done with the input.
    Note,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        })
    }
}

/// One message about the input.
#[derive(Debug, Clone, PartialEq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    /// Where the problem is; `None` for module-wide problems without a location.
    pub span: Option<Span>,
    /// Text under the caret.
    pub label: Option<String>,
    /// Secondary locations with their own labels (e.g. "first defined here").
    pub notes: Vec<(Span, String)>,
    /// `= help: ...` lines.
    pub help: Vec<String>,
}

impl Diagnostic {
    pub fn error(span: impl Into<Option<Span>>, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            span: span.into(),
            label: None,
            notes: Vec::new(),
            help: Vec::new(),
        }
    }
    pub fn warning(span: impl Into<Option<Span>>, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(span, message) }
    }
    /// A note: what was done with the input (`note: ...`).
    pub fn note(span: impl Into<Option<Span>>, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Note, ..Diagnostic::error(span, message) }
    }
    pub fn with_label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = Some(label.into());
        self
    }
    pub fn with_note(mut self, span: Span, note: impl Into<String>) -> Diagnostic {
        self.notes.push((span, note.into()));
        self
    }
    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help.push(help.into());
        self
    }
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// `severity: message`, without a location (use [`Diagnostics::render`] with the source
    /// for `file:line:col` and the source line).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.severity, self.message)?;
        for h in &self.help {
            write!(f, "\n  = help: {h}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostic {}

/// An error without a location (`Diagnostic::error(None, message)`).
impl From<String> for Diagnostic {
    fn from(message: String) -> Diagnostic {
        Diagnostic::error(None, message)
    }
}

/// An error without a location (`Diagnostic::error(None, message)`).
impl From<&str> for Diagnostic {
    fn from(message: &str) -> Diagnostic {
        Diagnostic::error(None, message)
    }
}

impl fmt::Display for Diagnostics {
    /// One diagnostic per line, errors first (see [`Diagnostic`]'s `Display`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for d in
            self.0.iter().filter(|d| d.is_error()).chain(self.0.iter().filter(|d| !d.is_error()))
        {
            if !first {
                f.write_str("\n")?;
            }
            first = false;
            d.fmt(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

/// An ordered collection of diagnostics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn new() -> Diagnostics {
        Diagnostics(Vec::new())
    }
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }
    pub fn extend(&mut self, other: Diagnostics) {
        self.0.extend(other.0);
    }
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(Diagnostic::is_error)
    }
    pub fn error_count(&self) -> usize {
        self.0.iter().filter(|d| d.is_error()).count()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter()
    }
    /// Sorts by position (diagnostics without a span last), keeping the order of equal ones.
    pub fn sort(&mut self) {
        self.0.sort_by_key(|d| d.span.map_or(u32::MAX, |s| s.start));
    }

    /// Renders every diagnostic against `src`, which `path` names. `color` adds ANSI styles.
    pub fn render(&self, src: &str, path: &str, color: bool) -> String {
        let mut out = String::new();
        if self.0.is_empty() {
            return out;
        }
        let index = LineIndex::new(src);
        for d in &self.0 {
            render_one(&mut out, d, src, path, &index, color);
        }
        out
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Diagnostics {
        Diagnostics(vec![d])
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// Byte offset → 1-based (line, column) lookups.
pub struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub fn new(src: &str) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(src.bytes().enumerate().filter(|&(_, b)| b == b'\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }
    /// 1-based line and column (columns count characters) of `offset` in `src`.
    pub fn line_col(&self, src: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(src.len());
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let start = self.starts[line];
        let col = src.get(start..offset).map_or(offset - start, |s| s.chars().count()) + 1;
        (line + 1, col)
    }
}

fn render_one(
    out: &mut String,
    d: &Diagnostic,
    src: &str,
    path: &str,
    index: &LineIndex,
    color: bool,
) {
    use std::fmt::Write;
    let level = match d.severity {
        Severity::Error => Level::ERROR,
        Severity::Warning => Level::WARNING,
        Severity::Note => Level::NOTE,
    };
    let Some(span) = d.span else {
        let _ = writeln!(out, "{path}: {}: {}", d.severity, d.message);
        for h in &d.help {
            let _ = writeln!(out, "  = help: {h}");
        }
        return;
    };
    let (line, col) = index.line_col(src, span.start as usize);
    let _ = writeln!(out, "{path}:{line}:{col}: {}: {}", d.severity, d.message);
    // Clamp to the source and to char boundaries: spans of truncated input may point at the end.
    let clamp = |s: Span| {
        let mut a = (s.start as usize).min(src.len());
        let mut b = (s.end as usize).clamp(a, src.len());
        while !src.is_char_boundary(a) {
            a -= 1;
        }
        while !src.is_char_boundary(b) {
            b += 1;
        }
        a..b
    };
    let mut snippet = Snippet::source(src).fold(true);
    let primary = AnnotationKind::Primary.span(clamp(span));
    snippet = snippet.annotation(match &d.label {
        Some(l) => primary.label(l.as_str()),
        None => primary,
    });
    for (s, n) in &d.notes {
        snippet = snippet.annotation(AnnotationKind::Context.span(clamp(*s)).label(n.as_str()));
    }
    let mut group = Group::with_level(level.clone()).element(snippet);
    for h in &d.help {
        group = group.element(Level::HELP.message(h.as_str()));
    }
    let renderer = if color { Renderer::styled() } else { Renderer::plain() };
    let _ = writeln!(out, "{}", renderer.render(&[group]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_header_snippet_and_help() {
        let src = "HloModule m\nENTRY e {\n  p0 = f33[8] parameter(0)\n}\n";
        let start = src.find("f33").unwrap();
        let d = Diagnostic::error(Span::new(start, start + 3), "unknown element type `f33`")
            .with_label("not an XLA primitive type")
            .with_help("did you mean `f32`?");
        let text = Diagnostics::from(d).render(src, "m.hlo", false);
        assert!(text.starts_with("m.hlo:3:8: error: unknown element type `f33`\n"), "{text}");
        assert!(text.contains("p0 = f33[8] parameter(0)"), "{text}");
        assert!(text.contains("^^^ not an XLA primitive type"), "{text}");
        assert!(text.contains("= help: did you mean `f32`?"), "{text}");
    }

    #[test]
    fn line_col_counts_chars() {
        let src = "ab\nçd\n";
        let idx = LineIndex::new(src);
        assert_eq!(idx.line_col(src, 0), (1, 1));
        assert_eq!(idx.line_col(src, 3), (2, 1));
        assert_eq!(idx.line_col(src, 5), (2, 2));
        assert_eq!(idx.line_col(src, 100), (3, 1));
    }
}
