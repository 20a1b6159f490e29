//! The grammar run over tokens: a lexer's tokens with its errors as diagnostics, the
//! grammar's entry points for the parts of a module read on their own (a tuple literal's
//! element, an inline computation body), and syntax errors worded for people.

use lalrpop_util::ParseError;

use super::ast::{Instr, Tt};
use super::grammar;
use super::lexer::{LexError, LexErrorKind, Lexer, Spanned, Tok};
use crate::diag::{Diagnostic, Span};
use crate::types::Shape;

/// The grammar's input: the tokens of `src` from byte `start`, lexical errors as diagnostics.
pub(super) fn tokens(
    src: &str,
    start: usize,
) -> impl Iterator<Item = Result<Spanned<'_>, Diagnostic>> {
    diagnosed(Lexer::starting_at(src, start))
}

/// A lexer's tokens, its errors as diagnostics.
fn diagnosed<'a>(
    lexer: impl Iterator<Item = Result<Spanned<'a>, LexError>>,
) -> impl Iterator<Item = Result<Spanned<'a>, Diagnostic>> {
    lexer.map(|t| t.map_err(|e| lex_diagnostic(e.kind, e.span)))
}

/// Runs the grammar `f` over the tokens of `lexer`; with its result, whether the lexer
/// met an inline computation body.
pub(super) fn with_lexer<'a, T>(
    mut lexer: Lexer<'a>,
    f: impl FnOnce(&mut dyn Iterator<Item = Result<Spanned<'a>, Diagnostic>>) -> T,
) -> (T, bool) {
    let t = f(&mut diagnosed(&mut lexer));
    (t, lexer.inline_bodies)
}

/// Parses `src[start..end]` as one shaped literal (`f32[2]{0} {1, 2}`), an element of a
/// tuple literal.
pub(super) fn literal_elem(
    src: &str,
    start: usize,
    end: usize,
) -> Result<(Shape, Tt<'_>), Diagnostic> {
    let src = &src[..end];
    let toks: Vec<Spanned<'_>> = tokens(src, start).collect::<Result<_, _>>()?;
    grammar::LiteralElemParser::new()
        .parse(src, toks.iter().copied())
        .map_err(|e| syntax_error(e, &toks, false))
}

/// Parses the inline computation body `src[start..end]` (`{ instructions }`).
pub(super) fn inline_body(
    src: &str,
    start: usize,
    end: usize,
) -> Result<(Vec<Box<Instr<'_>>>, Span), Diagnostic> {
    let src = &src[..end];
    let toks: Vec<Spanned<'_>> =
        diagnosed(Lexer::starting_in_body(src, start)).collect::<Result<_, _>>()?;
    grammar::InlineBodyParser::new()
        .parse(src, toks.iter().copied())
        .map_err(|e| syntax_error(e, &toks, false))
}

pub(super) fn lex_diagnostic(kind: LexErrorKind, span: Span) -> Diagnostic {
    match kind {
        LexErrorKind::UnexpectedChar => {
            Diagnostic::error(span, "unexpected character").with_label("not part of any HLO token")
        }
        LexErrorKind::UnterminatedString => {
            Diagnostic::error(Span { end: span.start + 1, ..span }, "unterminated string")
                .with_label("this string is never closed")
                .with_help("add the closing `\"`")
        }
        LexErrorKind::UnterminatedComment => {
            Diagnostic::error(Span { end: span.start + 2, ..span }, "unterminated block comment")
                .with_label("this comment is never closed")
                .with_help("add the closing `*/`")
        }
        LexErrorKind::NulByte => Diagnostic::error(span, "NUL byte in HLO text"),
        LexErrorKind::UnclosedBrace => Diagnostic::error(span, "unclosed `{` in attribute value")
            .with_label("this `{` is never closed")
            .with_help(
                "`frontend_attributes` and `backend_config` values must have balanced braces",
            ),
    }
}

/// Turns a grammar error into a diagnostic.
pub(super) fn syntax_error(
    e: ParseError<usize, Tok<'_>, Diagnostic>,
    slice: &[Spanned<'_>],
    at_eof: bool,
) -> Diagnostic {
    match e {
        ParseError::User { error } => error,
        ParseError::UnrecognizedToken { token: (l, t, r), expected } => {
            let next = slice.iter().position(|x| x.0 == l).and_then(|k| slice.get(k + 1));
            if let (Tok::Ident(name) | Tok::InstrName(name), Some((el, Tok::Eq, _))) = (t, next)
                && expected.iter().any(|e| e.contains("attribute"))
            {
                return Diagnostic::error(
                    Span::new(l, r),
                    format!("space between attribute name `{name}` and `=`"),
                )
                .with_label("attribute names are written `name=value`")
                .with_note(Span::new(*el, el + 1), "remove the space before this `=`");
            }
            let label = if expected.len() == 1 && expected[0] == "\",\"" {
                "expected a `,` before another attribute, or the start of a new statement"
                    .to_string()
            } else {
                expected_list(&expected)
            };
            Diagnostic::error(Span::new(l, r), format!("unexpected {}", t.describe()))
                .with_label(label)
        }
        ParseError::UnrecognizedEof { location, expected } => {
            // Point just after the last token: that is where something is missing.
            let end = slice.last().map_or(location, |t| t.2);
            let at = Span::new(end, end);
            if at_eof {
                Diagnostic::error(at, "unexpected end of input")
                    .with_label(expected_list(&expected))
                    .with_help("the input looks truncated")
            } else {
                Diagnostic::error(at, "incomplete statement").with_label(expected_list(&expected))
            }
        }
        ParseError::ExtraToken { token: (l, t, r) } => {
            Diagnostic::error(Span::new(l, r), format!("unexpected {}", t.describe()))
                .with_label("expected the end of the statement")
        }
        ParseError::InvalidToken { location } => {
            Diagnostic::error(Span::new(location, location + 1), "invalid token")
        }
    }
}

fn expected_list(expected: &[String]) -> String {
    let names: Vec<String> = expected
        .iter()
        .map(|e| {
            let e = e.trim_matches('"').replace("\\\"", "\"");
            match e.as_str() {
                "integer" | "attribute=" | "instruction name" => {
                    format!("an {}", e.trim_end_matches('='))
                }
                "name" | "%name" | "float" | "string" | "padding" | "dim-labels" | "non-finite"
                | "NxM" | "'string'" | "name:" | "computation name" | "raw value" | "shape" => {
                    format!("a {e}")
                }
                _ => format!("`{e}`"),
            }
        })
        .collect();
    match names.len() {
        0 => "nothing more was expected".to_string(),
        1 => format!("expected {}", names[0]),
        n if n <= 6 => format!("expected one of {}", names.join(", ")),
        _ => format!("expected one of {}, ...", names[..5].join(", ")),
    }
}
