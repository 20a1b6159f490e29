//! The parse driver: lexes, cuts the token stream into statements, runs the grammar on
//! each statement and hands the syntax trees to `resolve`.
//!
//! Statements are the module header, the stack-frame tables, each computation header and
//! each instruction. An instruction starts at `ROOT` or at a name followed by ` = ` (an
//! attribute is `name=value` with no space, so the two never mix), and a computation body
//! ends at the `}` that brings the bracket depth below zero. A syntax error therefore
//! costs one instruction: the parser reports it and goes on with the next one.

use lalrpop_util::ParseError;

use super::ast::{CompAst, ModuleAst};
use super::grammar;
use super::lexer::{LexError, LexErrorKind, Lexer, Spanned, Tok, lex};
use super::resolve;
use crate::diag::{Diagnostic, Diagnostics, Span};
use crate::module::Module;
use crate::opcode::edit_distance;
use crate::types::ElemType;

/// Parses HLO text. Returns the module when there were no errors, and every diagnostic
/// found (errors and warnings). Never panics, whatever the input.
pub fn parse(src: &str) -> (Option<Module>, Diagnostics) {
    crate::counters::bump("parse");
    let mut diags = Diagnostics::new();
    // Fast path: the whole module in one grammar run over the streamed tokens. Only when
    // that fails does the driver lex everything and re-parse statement by statement, to
    // report every error with its location.
    let fast = parse_fast(src);
    let toks;
    // Two threads may resolve a module read in one go, unless it has inline bodies.
    let mut threads = false;
    let (ast, broken) = match fast {
        Some((ast, inline_bodies)) => {
            threads = !inline_bodies;
            (ast, Vec::new())
        }
        None => {
            let lex_errors;
            (toks, lex_errors) = lex(src);
            for e in lex_errors {
                diags.push(lex_diagnostic(e.kind, e.span));
            }
            let mut p = Driver { src, toks: &toks, pos: 0, diags, broken: Vec::new() };
            let ast = p.module();
            diags = p.diags;
            (ast, p.broken)
        }
    };
    // An unterminated string or comment swallows the rest of the input: what the grammar
    // then says about the end of the text is noise.
    let cut = diags
        .iter()
        .filter(|d| d.message.starts_with("unterminated"))
        .filter_map(|d| d.span)
        .map(|s| s.start)
        .min();
    if let Some(cut) = cut {
        diags.0.retain(|d| {
            d.message.starts_with("unterminated")
                || (!d.message.starts_with("unclosed body") && d.span.is_none_or(|s| s.start < cut))
        });
    }
    let module = resolve::resolve(src, ast, &broken, &mut diags, threads);
    diags.sort();
    // The same error reached twice (an inline computation's, at its use) is said once.
    diags.0.dedup();
    if diags.has_errors() { (None, diags) } else { (module, diags) }
}

/// The grammar's input: the tokens of `src` from byte `start`, lexical errors as diagnostics.
fn tokens(src: &str, start: usize) -> impl Iterator<Item = Result<Spanned<'_>, Diagnostic>> {
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
fn with_lexer<'a, T>(
    mut lexer: Lexer<'a>,
    f: impl FnOnce(&mut dyn Iterator<Item = Result<Spanned<'a>, Diagnostic>>) -> T,
) -> (T, bool) {
    let t = f(&mut diagnosed(&mut lexer));
    (t, lexer.inline_bodies)
}

/// Parses `src[start..end]` as one shaped literal (`f32[2]{0} {1, 2}`), an element of a
/// tuple literal.
pub(crate) fn literal_elem(
    src: &str,
    start: usize,
    end: usize,
) -> Result<(crate::types::Shape, super::ast::Tt<'_>), Diagnostic> {
    let src = &src[..end];
    let toks: Vec<Spanned<'_>> = tokens(src, start).collect::<Result<_, _>>()?;
    grammar::LiteralElemParser::new()
        .parse(src, toks.iter().copied())
        .map_err(|e| syntax_error(e, &toks, false))
}

/// Parses the inline computation body `src[start..end]` (`{ instructions }`).
pub(crate) fn inline_body(
    src: &str,
    start: usize,
    end: usize,
) -> Result<(Vec<Box<super::ast::Instr<'_>>>, Span), Diagnostic> {
    let src = &src[..end];
    let toks: Vec<Spanned<'_>> =
        diagnosed(Lexer::starting_in_body(src, start)).collect::<Result<_, _>>()?;
    grammar::InlineBodyParser::new()
        .parse(src, toks.iter().copied())
        .map_err(|e| syntax_error(e, &toks, false))
}

/// Below this size a module is parsed on one thread.
const PARALLEL_MIN_BYTES: usize = 256 * 1024;

/// The grammar over the whole text, on two threads for large modules: the text is cut
/// at a computation boundary near its middle and the second half is parsed as a list of
/// computations. `None` on any error (the caller then re-parses for diagnostics); with the
/// module, whether it has inline computation bodies.
fn parse_fast(src: &str) -> Option<(ModuleAst<'_>, bool)> {
    let whole = || {
        let (ast, inline) =
            with_lexer(Lexer::new(src), |t| grammar::ModuleParser::new().parse(src, t).ok());
        Some((ast?, inline))
    };
    if src.len() < PARALLEL_MIN_BYTES {
        return whole();
    }
    // Preferably at an instruction near the middle (a module is often one huge
    // computation), else between computations.
    if let Some(cut) = instruction_boundary(src) {
        let text = &src[..cut];
        let ((head, i1), (tail, i2)) = crate::halves::both(
            || {
                with_lexer(Lexer::new(text), |t| {
                    grammar::ModuleHeadParser::new().parse(text, t).ok()
                })
            },
            || {
                with_lexer(Lexer::starting_in_body(src, cut), |t| {
                    grammar::ModuleTailParser::new().parse(src, t).ok()
                })
            },
        );
        return match (head, tail) {
            (Some((mut ast, header, mut instrs)), Some((rest, (close, thread), comps))) => {
                instrs.extend(rest);
                ast.comps.push(CompAst { header, instrs, thread, close });
                ast.comps.extend(comps);
                Some((ast, i1 || i2))
            }
            // A cut in the wrong place (unusual formatting) only costs the single-thread parse.
            _ => whole(),
        };
    }
    let Some(cut) = computation_boundary(src) else {
        return whole();
    };
    let head = &src[..cut];
    let ((first, i1), (rest, i2)) = crate::halves::both(
        || with_lexer(Lexer::new(head), |t| grammar::ModuleParser::new().parse(head, t).ok()),
        || {
            with_lexer(Lexer::starting_at(src, cut), |t| {
                grammar::ComputationsParser::new().parse(src, t).ok()
            })
        },
    );
    match (first, rest) {
        (Some(mut ast), Some(comps)) => {
            ast.comps.extend(comps);
            Some((ast, i1 || i2))
        }
        // A cut in the wrong place (unusual formatting) only costs the single-thread parse.
        _ => whole(),
    }
}

/// A byte offset near the middle of `src` where an instruction statement starts inside a
/// computation body: a line `  [ROOT] name = ...` after a line that ends a statement (not
/// in `,`, `(`, `{` or `[`), outside strings and block comments. `None` if the middle half
/// of the text has none. A wrong guess (hand-formatted text) only makes the halves fail to
/// parse, and the caller then parses the whole text.
fn instruction_boundary(src: &str) -> Option<usize> {
    let b = src.as_bytes();
    let mut at = src.len() / 2;
    let limit = src.len() * 3 / 4;
    while at < limit {
        let line = at + src[at..].find('\n')? + 1;
        at = line;
        let rest = &src[line..];
        let body = rest.trim_start_matches([' ', '\t']);
        if body.len() == rest.len() {
            continue;
        }
        let first = &body[..body.find('\n').unwrap_or(body.len())];
        let stmt = first.strip_prefix("ROOT ").unwrap_or(first);
        let Some(eq) = stmt.find(" = ") else { continue };
        let name = &stmt[..eq];
        if name.is_empty()
            || !name.bytes().all(|c| c.is_ascii_alphanumeric() || b"%._-".contains(&c))
        {
            continue;
        }
        let before = src[..line - 1].trim_end_matches([' ', '\t', '\r']);
        if before.ends_with([',', '(', '{', '[']) || before.is_empty() {
            continue;
        }
        let head = &src[..line];
        if head.rfind("/*").is_some_and(|o| head.rfind("*/").is_none_or(|c| c < o)) {
            continue;
        }
        // Unescaped quotes before the cut must pair up (not inside a string).
        let quotes = b[..line]
            .iter()
            .enumerate()
            .filter(|&(i, &c)| c == b'"' && (i == 0 || b[i - 1] != b'\\'))
            .count();
        if quotes % 2 == 1 {
            continue;
        }
        return Some(line);
    }
    None
}

/// A byte offset near the middle of `src` where a computation starts: just after a `}`
/// that stands alone at the start of a line (how printers close a computation body),
/// followed by a line that is not indented. `None` if there is none.
fn computation_boundary(src: &str) -> Option<usize> {
    let b = src.as_bytes();
    let mut at = src.len() / 2;
    while let Some(k) = src[at..].find("\n}\n") {
        let after = at + k + 3;
        let next = src[after..].trim_start_matches(['\n', '\r']);
        let line_start = src.len() - next.len();
        match b.get(line_start) {
            Some(c) if !c.is_ascii_whitespace() && *c != b'/' => return Some(after),
            Some(_) => at = after,
            None => return None,
        }
    }
    None
}

fn lex_diagnostic(kind: LexErrorKind, span: Span) -> Diagnostic {
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

struct Driver<'s, 't> {
    src: &'s str,
    toks: &'t [Spanned<'s>],
    pos: usize,
    diags: Diagnostics,
    /// Names of instructions that failed to parse; references to them are not reported again.
    broken: Vec<&'s str>,
}

impl<'s> Driver<'s, '_> {
    fn tok(&self, i: usize) -> Option<&Tok<'s>> {
        self.toks.get(i).map(|t| &t.1)
    }

    /// Does a computation start at token `i` (`ENTRY`, or a top-level name before `(`/`{`)?
    fn comp_start(&self, i: usize) -> bool {
        matches!(self.tok(i), Some(Tok::KwEntry | Tok::CompName(_)))
    }

    /// Does an instruction start at token `i` (`ROOT`, or a name before a spaced `=`)?
    fn instr_start(&self, i: usize) -> bool {
        matches!(self.tok(i), Some(Tok::KwRoot | Tok::InstrName(_)))
    }

    fn module(&mut self) -> ModuleAst<'s> {
        let mut header = None;
        let mut frames = None;
        let mut comps = Vec::new();
        if self.toks.is_empty() {
            self.diags.push(
                Diagnostic::error(Span::new(0, 0), "empty module")
                    .with_help("an HLO module needs at least one computation, e.g. `ENTRY main { ROOT p = f32[] parameter(0) }`"),
            );
            return ModuleAst { header, frames, comps };
        }
        if self.tok(0) == Some(&Tok::KwHloModule) {
            let end =
                self.scan_until(1, |d, i| d.tok(i) == Some(&Tok::KwFileNames) || d.comp_start(i));
            header = self.run(end, |src, toks| grammar::ModuleHeaderParser::new().parse(src, toks));
            self.pos = end;
        }
        if self.tok(self.pos) == Some(&Tok::KwFileNames) {
            let end = self.scan_until(self.pos, |d, i| d.comp_start(i));
            frames = self.run(end, |src, toks| grammar::FrameTablesParser::new().parse(src, toks));
            self.pos = end;
        }
        while self.pos < self.toks.len() {
            if !self.comp_start(self.pos) {
                let (l, t, r) = self.toks[self.pos];
                let msg = if t == Tok::KwHloModule {
                    "a second `HloModule` header".to_string()
                } else {
                    format!("unexpected {} at the top level", t.describe())
                };
                self.diags.push(
                    Diagnostic::error(Span::new(l, r), msg)
                        .with_label("expected a computation")
                        .with_help("a computation looks like `name { ... }` or `ENTRY name (p: f32[]) -> f32[] { ... }`"),
                );
                self.pos = self.scan_until(self.pos + 1, |d, i| d.comp_start(i));
                continue;
            }
            if let Some(c) = self.computation() {
                comps.push(c);
            }
        }
        if comps.is_empty() && !self.diags.has_errors() {
            self.diags.push(Diagnostic::error(
                Span::new(self.src.len(), self.src.len()),
                "module has no computations",
            ));
        }
        ModuleAst { header, frames, comps }
    }

    /// First index at or after `from` (at bracket depth 0) where `stop` holds, or the end.
    fn scan_until(&self, from: usize, stop: impl Fn(&Self, usize) -> bool) -> usize {
        let mut depth = 0i32;
        let mut i = from;
        while i < self.toks.len() {
            if depth <= 0 && stop(self, i) {
                return i;
            }
            depth += self.toks[i].1.depth_delta();
            i += 1;
        }
        i
    }

    /// Runs a grammar entry point on tokens `self.pos..end`, converting its errors.
    fn run<T>(
        &mut self,
        end: usize,
        f: impl FnOnce(
            &'s str,
            std::iter::Copied<std::slice::Iter<'_, Spanned<'s>>>,
        ) -> Result<T, ParseError<usize, Tok<'s>, Diagnostic>>,
    ) -> Option<T> {
        let slice = &self.toks[self.pos..end];
        match f(self.src, slice.iter().copied()) {
            Ok(t) => Some(t),
            Err(e) => {
                let at_eof = end == self.toks.len();
                let d = syntax_error(e, slice, at_eof);
                self.diags.push(d);
                None
            }
        }
    }

    fn computation(&mut self) -> Option<CompAst<'s>> {
        let start = self.pos;
        // The header runs to the first `{` at depth 0 (layout braces are their own token);
        // an instruction, or another computation after this one's name, means it has none.
        let mut depth = 0i32;
        let mut i = start;
        let mut named = false;
        let body_open = loop {
            match self.tok(i) {
                None => break None,
                Some(Tok::LBrace) if depth == 0 => break Some(i),
                Some(t) => {
                    let stray = self.instr_start(i) || (named && self.comp_start(i));
                    if i > start && depth == 0 && stray {
                        break None;
                    }
                    named |= matches!(t, Tok::CompName(_) | Tok::Ident(_) | Tok::PctIdent(_));
                    depth += t.depth_delta();
                }
            }
            i += 1;
        };
        let Some(open) = body_open else {
            // Let the grammar say precisely what is missing.
            let errors_before = self.diags.len();
            if self.run(i, |src, toks| grammar::CompHeaderParser::new().parse(src, toks)).is_some()
                || self.diags.len() == errors_before
            {
                let (l, _, r) = self.toks[start];
                self.diags.push(
                    Diagnostic::error(Span::new(l, r), "computation has no body")
                        .with_label("expected `{` after this computation's name and signature"),
                );
            }
            self.pos = i.max(start + 1);
            return None;
        };
        let header =
            self.run(open + 1, |src, toks| grammar::CompHeaderParser::new().parse(src, toks));
        let name_text = self.toks[start..=open].iter().find_map(|t| match t.1 {
            Tok::CompName(s) | Tok::Ident(s) | Tok::PctIdent(s) => Some(s),
            _ => None,
        });
        self.pos = open + 1;
        let mut instrs = Vec::new();
        let mut closed = None;
        let errors_before = self.diags.len();
        while self.pos < self.toks.len() {
            if self.tok(self.pos) == Some(&Tok::RBrace) {
                closed = Some(self.pos);
                self.pos += 1;
                break;
            }
            if self.comp_start(self.pos) {
                break;
            }
            let end = self.instr_end(self.pos);
            let first_name = self.toks[self.pos..end].iter().find_map(|t| match t.1 {
                Tok::InstrName(s) | Tok::Ident(s) | Tok::PctIdent(s) => Some(s),
                _ => None,
            });
            match self.run(end, |src, toks| grammar::InstrParser::new().parse(src, toks)) {
                Some(instr) => instrs.push(instr),
                None => self.broken.extend(first_name),
            }
            self.pos = end;
        }
        let Some(close) = closed else {
            let (l, _, r) = self.toks[open];
            // A statement that already failed (truncated input, say) explains the missing `}`.
            if self.diags.len() > errors_before {
                return None;
            }
            let d = Diagnostic::error(
                Span::new(l, r),
                format!("unclosed body of computation `{}`", name_text.unwrap_or("?")),
            )
            .with_label("this `{` is never closed");
            let d = match self.toks.get(self.pos) {
                Some(&(nl, t @ (Tok::CompName(_) | Tok::KwEntry), nr)) => d
                    .with_note(Span::new(nl, nr), "the next computation starts here")
                    .with_help(format!("add `}}` before `{}`", t.text())),
                _ => d.with_help("add `}` after the last instruction"),
            };
            self.diags.push(d);
            return None;
        };
        let mut thread = None;
        if self.tok(self.pos) == Some(&Tok::Comma)
            && self.tok(self.pos + 1) == Some(&Tok::AttrName("execution_thread"))
        {
            match self.toks.get(self.pos + 2) {
                Some(&(l, Tok::Str(s), r)) => {
                    thread = Some((s, Span::new(l, r)));
                    self.pos += 3;
                }
                _ => {
                    let (l, _, r) = self.toks[self.pos + 1];
                    self.diags.push(Diagnostic::error(
                        Span::new(l, r),
                        "`execution_thread=` needs a string",
                    ));
                    self.pos += 2;
                }
            }
        }
        Some(CompAst {
            header: header?,
            instrs,
            thread,
            close: Span::new(self.toks[close].0, self.toks[close].2),
        })
    }

    /// End (exclusive) of the instruction starting at `from`.
    fn instr_end(&self, from: usize) -> usize {
        let mut depth = 0i32;
        let mut i = from;
        // skip `ROOT name` so the start itself is not mistaken for the next instruction
        if self.tok(i) == Some(&Tok::KwRoot) {
            i += 1;
        }
        i = (i + 1).min(self.toks.len());
        while i < self.toks.len() {
            let t = &self.toks[i].1;
            if self.instr_start(i) || self.comp_start(i) {
                return i;
            }
            if *t == Tok::RBrace && depth == 0 {
                return i;
            }
            // Clamped: a stray `)` must not swallow the body's closing `}`.
            depth = (depth + t.depth_delta()).max(0);
            i += 1;
        }
        i
    }
}

/// Turns a grammar error into a diagnostic.
fn syntax_error(
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

/// Checks the parts of a layout extension (after `:`) that XLA's parser checks: the dim
/// level types of `D(...)` are `D`, `C`, `S` or `H` (dense, compressed, singleton, loose
/// compressed), each optionally followed by `+` (not unique) and `~` (not ordered); and a
/// physical shape `P(...)` belongs to sparse layouts only. The rest (tiles, memory
/// space, element sizes, ...) is kept verbatim (grammar helper).
pub(crate) fn check_layout_ext(ext: &str, span: Span, rank: usize) -> Result<(), Diagnostic> {
    let at = |k: usize, len: usize| {
        let start = span.start as usize + k;
        Span::new(start, start + len.max(1))
    };
    let mut sparse = false;
    if let Some(open) = ext.find("D(") {
        let body_start = open + 2;
        let body =
            &ext[body_start..ext[body_start..].find(')').map_or(ext.len(), |c| body_start + c)];
        let mut offset = body_start;
        for item in body.split(',') {
            let t = item.trim();
            let lead = item.len() - item.trim_start().len();
            let kind = t.trim_end_matches(['+', '~']);
            match kind {
                "D" => {}
                "C" | "S" | "H" => sparse = true,
                _ => {
                    return Err(Diagnostic::error(
                        at(offset + lead, t.len()),
                        format!("`{t}` is not a dim level type"),
                    )
                    .with_help("expected a DimLevelType abbreviation: D, C, S or H, optionally followed by + and ~"));
                }
            }
            offset += item.len() + 1;
        }
        let count = body.split(',').count();
        if count != rank {
            return Err(Diagnostic::error(
                at(open, body.len() + 3),
                format!(
                    "{count} dim level type{} for a layout of {rank} dimensions",
                    if count == 1 { "" } else { "s" }
                ),
            )
            .with_label("one dim level type per dimension")
            .with_help(
                "list a level type for every dimension of the shape, e.g. `D(D,C)` for rank 2",
            ));
        }
        if sparse && let Some(t) = ext.find("T(") {
            return Err(Diagnostic::error(at(t, 2), "tiles `T(...)` on a sparse layout")
                .with_label("a sparse array is not tiled")
                .with_help("drop the tiles, or make every dim level type dense (`D`)"));
        }
    }
    if let Some(p) = ext.find("P(")
        && !sparse
    {
        return Err(Diagnostic::error(at(p, 2), "a physical shape `P(...)` on a dense layout")
            .with_label("only sparse arrays have a physical shape")
            .with_help(
                "a layout has a physical shape only with a sparse dim level type in `D(...)`",
            ));
    }
    Ok(())
}

/// Parses a non-negative decimal integer token that fits XLA's `int64` (grammar helper).
pub(crate) fn parse_u64(s: &str, span: Span, what: &str) -> Result<u64, Diagnostic> {
    match s.parse::<u64>() {
        Ok(v) if v <= i64::MAX as u64 => Ok(v),
        _ if s.starts_with('-') => Err(Diagnostic::error(span, format!("negative {what} `{s}`"))
            .with_label("must be zero or positive")),
        _ => Err(Diagnostic::error(span, format!("{what} `{s}` is too large"))
            .with_label("does not fit in a signed 64-bit integer")),
    }
}

/// Builds the shape of an [`Tok::ArrayShape`] token, `et[d0,d1]{m0,m1}`, with an optional
/// layout extension that followed it as separate tokens (grammar helper).
pub(crate) fn array_shape(
    text: &str,
    span: Span,
    ext_layout: Option<(crate::types::Layout, Span)>,
) -> Result<crate::types::Shape, ParseError<usize, Tok<'_>, Diagnostic>> {
    use crate::types::{ArrayShape, Dim, Layout, Shape};
    if ext_layout.is_none()
        && let Some(a) = fast_array_shape(text)
    {
        return Ok(Shape::Array(a));
    }
    let user = |error| ParseError::User { error };
    let open = text.find('[').unwrap_or(text.len());
    let close = text.rfind(']').unwrap_or(text.len());
    let et = &text[..open];
    let at = |a: usize, b: usize| Span::new(span.start as usize + a, span.start as usize + b);
    let dims_text = &text[(open + 1).min(close)..close];
    let mut dims = Vec::with_capacity(dims_text.bytes().filter(|&b| b == b',').count() + 1);
    if !dims_text.is_empty() {
        let mut pos = open + 1;
        for d in dims_text.split(',') {
            let sp = at(pos, pos + d.len());
            pos += d.len() + 1;
            dims.push(match d {
                "?" => Dim::Unbounded,
                "" => {
                    return Err(user(
                        Diagnostic::error(sp, "expected a dimension size")
                            .with_label("empty dimension"),
                    ));
                }
                _ => match d.strip_prefix("<=") {
                    Some(b) => Dim::Bounded(parse_u64(b, sp, "dimension bound").map_err(user)?),
                    None => Dim::Static(parse_u64(d, sp, "dimension size").map_err(user)?),
                },
            });
        }
    }
    match et {
        "token" if dims.is_empty() && ext_layout.is_none() && close + 1 == text.len() => {
            return Ok(Shape::Token);
        }
        "opaque" | "opaque_type"
            if dims.is_empty() && ext_layout.is_none() && close + 1 == text.len() =>
        {
            return Ok(Shape::Opaque);
        }
        _ => {}
    }
    let elem = crate::types::ElemType::from_name(et)
        .ok_or_else(|| user(unknown_elem_type(et, at(0, open))))?;
    let mut layout_span = None;
    let mut layout = None;
    if close + 1 < text.len() {
        let l = &text[close + 2..text.len() - 1];
        let mut minor_to_major = Vec::with_capacity(dims.len());
        if !l.is_empty() {
            for d in l.split(',') {
                minor_to_major.push(
                    parse_u64(d, at(close + 1, text.len()), "layout dimension").map_err(user)?
                        as u32,
                );
            }
        }
        layout_span = Some(at(close + 1, text.len()));
        layout = Some(Box::new(Layout { minor_to_major, ext: None }));
        if let Some((_, sp)) = ext_layout {
            return Err(user(
                Diagnostic::error(sp, "a shape has one layout").with_label("second layout"),
            ));
        }
    } else if let Some((l, sp)) = ext_layout {
        layout_span = Some(sp);
        layout = Some(Box::new(l));
    }
    let a = ArrayShape { elem, dims, layout };
    check_array_shape(&a, at(0, open), layout_span).map_err(user)?;
    Ok(Shape::Array(a))
}

/// The common case of [`array_shape`] in one pass over the bytes: static dims, an optional
/// row-major-or-not plain layout, sizes in range. Anything else (`<=`, `?`, errors) returns
/// `None` and takes the general path, which also words the diagnostics.
fn fast_array_shape(text: &str) -> Option<crate::types::ArrayShape> {
    use crate::types::{ArrayShape, Dim, ElemType, Layout};
    let b = text.as_bytes();
    let open = b.iter().position(|&c| c == b'[')?;
    let elem = ElemType::from_name(&text[..open])?;
    // Digits separated by commas up to `close`; returns the stop index.
    fn numbers(b: &[u8], mut i: usize, close: u8, mut push: impl FnMut(u64)) -> Option<usize> {
        if b.get(i) == Some(&close) {
            return Some(i);
        }
        loop {
            let start = i;
            let mut v: u64 = 0;
            while let Some(&c @ b'0'..=b'9') = b.get(i) {
                v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                i += 1;
            }
            if i == start || v > i64::MAX as u64 {
                return None;
            }
            push(v);
            match b.get(i)? {
                b',' => i += 1,
                c if *c == close => return Some(i),
                _ => return None,
            }
        }
    }
    let mut dims = Vec::with_capacity(4);
    let close = numbers(b, open + 1, b']', |v| dims.push(Dim::Static(v)))?;
    let layout = if close + 1 < b.len() {
        let mut m2m = Vec::with_capacity(dims.len());
        let end = numbers(b, close + 2, b'}', |v| m2m.push(v as u32))?;
        if end + 1 != b.len() {
            return None;
        }
        Some(Box::new(Layout { minor_to_major: m2m, ext: None }))
    } else {
        None
    };
    let a = ArrayShape { elem, dims, layout };
    // Layout and size rules: let the general path report any violation.
    check_array_shape(&a, Span::default(), Some(Span::default())).ok()?;
    Some(a)
}

/// XLA's shape validity rules that need no context: the layout is a permutation of the
/// dimensions, and the array's byte size fits in `int64` (grammar helper).
pub(crate) fn check_array_shape(
    a: &crate::types::ArrayShape,
    span: Span,
    layout_span: Option<Span>,
) -> Result<(), Diagnostic> {
    let bytes = a.dims.iter().try_fold(u64::from(a.elem.bits().div_ceil(8)), |acc, d| {
        acc.checked_mul(d.bound().unwrap_or(1))
    });
    if bytes.is_none_or(|b| b > i64::MAX as u64) {
        return Err(Diagnostic::error(span, "array is too large")
            .with_label("its size in bytes does not fit in a signed 64-bit integer"));
    }
    if let (Some(l), Some(ls)) = (&a.layout, layout_span) {
        let rank = a.dims.len();
        if l.minor_to_major.len() != rank {
            let n = l.minor_to_major.len();
            return Err(Diagnostic::error(
                ls,
                format!(
                    "layout has {n} {} but the shape has rank {rank}",
                    if n == 1 { "entry" } else { "entries" }
                ),
            )
            .with_label("one entry per dimension, minor to major")
            .with_help(format!(
                "the row-major layout of a rank-{rank} array is `{}`",
                crate::types::Layout::row_major(rank)
            )));
        }
        // A permutation of 0..rank: in range and no repeats (rank <= 64 fits a bitmask).
        let mut seen = vec![false; if rank > 64 { rank } else { 0 }];
        let mut mask = 0u64;
        let repeated = |d: usize, mask: &mut u64, seen: &mut Vec<bool>| {
            if rank > 64 {
                std::mem::replace(&mut seen[d], true)
            } else {
                std::mem::replace(mask, *mask | 1 << d) & (1 << d) != 0
            }
        };
        if l.minor_to_major
            .iter()
            .any(|&d| (d as usize) >= rank || repeated(d as usize, &mut mask, &mut seen))
        {
            return Err(Diagnostic::error(ls, "layout is not a permutation of the dimensions")
                .with_label(format!("must list each of 0..{rank} exactly once")));
        }
    }
    Ok(())
}

/// "unknown element type" with a spelling suggestion (grammar helper).
pub(crate) fn unknown_elem_type(name: &str, span: Span) -> Diagnostic {
    let d = Diagnostic::error(span, format!("unknown element type `{name}`"))
        .with_label("not an XLA primitive type");
    let best = ElemType::ALL.iter().map(|t| (edit_distance(name, t.name()), t.name())).min();
    match best {
        Some((dist, best)) if dist <= 2 => d.with_help(format!("did you mean `{best}`?")),
        _ => d.with_help("element types are pred, s8/s16/s32/s64, u8/u16/u32/u64, f16, bf16, f32, f64, c64, c128, f8*/f4* and token"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `head`, then computations `%c0..%c{n-1}` (each `body(k)`, taking and returning
    /// f32[8]), then an entry that calls them one after the other.
    fn module_of_calls(head: &str, n: usize, body: impl Fn(usize) -> String) -> String {
        let mut s = String::from(head);
        for k in 0..n {
            s.push_str(&format!("%c{k} (p.{k}: f32[8]) -> f32[8] {{\n{}}}\n\n", body(k)));
        }
        s.push_str("ENTRY %main (x: f32[8]) -> f32[8] {\n  %x = f32[8]{0} parameter(0)\n");
        let mut prev = "x".to_string();
        for k in 0..n {
            s.push_str(&format!("  %call.{k} = f32[8]{{0}} call(%{prev}), to_apply=%c{k}\n"));
            prev = format!("call.{k}");
        }
        s.push_str(&format!("  ROOT %r = f32[8]{{0}} copy(%{prev})\n}}\n"));
        s
    }

    /// A large module made of many computations, each called by the entry.
    fn big_module() -> String {
        module_of_calls(
            "HloModule big, entry_computation_layout={(f32[8]{0})->f32[8]{0}}\n\n",
            2000,
            |k| {
                format!(
                    "  %p.{k} = f32[8]{{0}} parameter(0), metadata={{op_name=\"c{k}\"}}\n  ROOT %n.{k} = f32[8]{{0}} negate(%p.{k})\n"
                )
            },
        )
    }

    #[test]
    fn the_lexer_flags_inline_bodies() {
        let inline = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply={\n    a = f32[] parameter(0)\n    b = f32[] parameter(1)\n    ROOT s = f32[] add(a, b)\n  }\n}\n";
        assert!(parse_fast(inline).expect("parses").1);
        let named = "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  p = f32[4] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add\n}\n";
        assert!(!parse_fast(named).expect("parses").1);
    }

    #[test]
    fn two_thread_parse_equals_one_thread_parse() {
        let src = big_module();
        assert!(src.len() >= PARALLEL_MIN_BYTES, "the test module must take the parallel path");
        let cut = computation_boundary(&src).expect("a boundary exists");
        assert!(
            src[cut..].starts_with("%c") || src[cut..].starts_with("\n%c"),
            "cut at a computation: {:?}",
            &src[cut..cut + 10]
        );
        let (parallel, inline) = parse_fast(&src).expect("parses");
        assert!(!inline, "no inline bodies in the test module");
        let whole = grammar::ModuleParser::new().parse(&src, tokens(&src, 0)).expect("parses");
        assert_eq!(parallel, whole);
    }

    /// One computation holding everything (how large training steps print).
    fn one_huge_computation() -> String {
        let mut s = String::from(
            "HloModule huge\n\nENTRY %main (x: f32[8]) -> f32[8] {\n  %x = f32[8]{0} parameter(0)\n",
        );
        let mut prev = "x".to_string();
        for k in 0..6000 {
            s.push_str(&format!("  %n.{k} = f32[8]{{0}} negate(f32[8]{{0}} %{prev}), metadata={{op_name=\"jit(f)/neg\" source_line={k}}}\n"));
            prev = format!("n.{k}");
        }
        s.push_str(&format!("  ROOT %r = f32[8]{{0}} copy(%{prev})\n}}\n"));
        s
    }

    #[test]
    fn one_huge_computation_is_cut_at_an_instruction() {
        let src = one_huge_computation();
        assert!(src.len() >= PARALLEL_MIN_BYTES);
        let cut = instruction_boundary(&src).expect("an instruction line near the middle");
        assert!(
            src[cut..].starts_with("  %n."),
            "cut at an instruction: {:?}",
            &src[cut..cut + 12]
        );
        let whole = grammar::ModuleParser::new().parse(&src, tokens(&src, 0)).expect("parses");
        assert_eq!(parse_fast(&src).expect("parses").0, whole);
        let (m, d) = parse(&src);
        assert!(!d.has_errors(), "{d:?}");
        assert_eq!(m.expect("module").instr_count(), 6002);
    }

    #[test]
    fn no_cut_inside_a_string_or_comment() {
        // Lines that look like instructions, inside a multi-line string and a block
        // comment that span the middle of the text.
        let mut src = one_huge_computation();
        let mid = src.len() / 2;
        let at = mid - 2000 + src[mid - 2000..].find("\n  %n.").expect("an instruction") + 1;
        let fake: String =
            (0..200).map(|k| format!("  %fake.{k} = f32[8]{{0}} negate(%x)\n")).collect();
        src.insert_str(at, &format!("  %s = f32[8]{{0}} custom-call(%x), custom_call_target=\"t\", backend_config=\"\n{fake}\"\n/*\n{fake}*/\n"));
        let cut = instruction_boundary(&src).expect("a later instruction");
        let inside = src[..cut].matches('"').count() % 2 == 1;
        assert!(!inside, "the cut is not inside the string");
        let whole = grammar::ModuleParser::new().parse(&src, tokens(&src, 0)).expect("valid");
        assert_eq!(parse_fast(&src).expect("parses").0, whole);
    }

    /// Many computations using compact tuple indices, omitted shapes and control
    /// predecessors, then an entry calling them: over the two-thread resolve threshold.
    fn many_computations() -> String {
        let head = "HloModule many\n\n%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n";
        module_of_calls(head, 500, |k| {
            format!(
                "  %p.{k} = f32[8]{{0}} parameter(0)\n  %t.{k} = (f32[8]{{0}}, f32[8]{{0}}) tuple(%p.{k}, %p.{k})\n  %n.{k} = f32[8]{{0}} negate(%t.{k}#1)\n  %m.{k} = multiply(%n.{k}, %t.{k}#0), control-predecessors={{%n.{k}}}\n  %z.{k} = f32[] constant(0)\n  %r.{k} = f32[] reduce(%m.{k}, %z.{k}), dimensions={{0}}, to_apply=%add\n  %b.{k} = f32[8]{{0}} broadcast(%r.{k}), dimensions={{}}\n  ROOT %o.{k} = f32[8]{{0}} add(%m.{k}, %b.{k})\n"
            )
        })
    }

    /// Resolves `src` on one thread and, where the module is large enough, on two.
    fn resolve_both_ways(src: &str) -> [(Option<Module>, Diagnostics); 2] {
        [false, true].map(|threads| {
            let mut diags = Diagnostics::new();
            let ast = grammar::ModuleParser::new().parse(src, tokens(src, 0)).expect("parses");
            let m = resolve::resolve(src, ast, &[], &mut diags, threads);
            diags.sort();
            (m, diags)
        })
    }

    #[test]
    fn two_thread_resolve_builds_the_same_module() {
        let src = many_computations();
        let [(one, d1), (two, d2)] = resolve_both_ways(&src);
        assert!(!d1.has_errors() && !d2.has_errors(), "{d1:?}");
        let (one, two) = (one.expect("module"), two.expect("module"));
        assert!(
            one.instr_count() > crate::halves::PARALLEL_MIN_INSTRS,
            "the module must take the two-thread path"
        );
        // Debug covers every field: names, sequence numbers, spans, edges, roots.
        assert_eq!(format!("{one:?}"), format!("{two:?}"));
    }

    #[test]
    fn two_thread_resolve_reports_the_same_errors() {
        // Errors in both halves: an unknown attribute early, a bad operand late, a shape
        // that cannot be inferred in the middle.
        let src = many_computations()
            .replacen(
                "%t.3 = (f32[8]{0}, f32[8]{0}) tuple(%p.3, %p.3)",
                "%t.3 = (f32[8]{0}, f32[8]{0}) tuple(%p.3, %p.3), colour=red",
                1,
            )
            .replacen("%n.250 = f32[8]{0} negate(%t.250#1)", "%n.250 = negate(%t.250#7)", 1)
            .replacen(
                "%call.480 = f32[8]{0} call(%call.479)",
                "%call.480 = f32[8]{0} call(%call.4799)",
                1,
            );
        let [(one, d1), (two, d2)] = resolve_both_ways(&src);
        assert!(one.is_none() && two.is_none());
        let render = |d: &Diagnostics| d.render(&src, "m.hlo", false);
        assert_eq!(render(&d1), render(&d2));
        assert!(d1.iter().filter(|d| d.is_error()).count() >= 3, "{}", render(&d1));
    }

    #[test]
    fn two_thread_verify_reports_what_one_thread_does() {
        // Verifier errors early, in the middle and late (parsing accepts them all).
        let src = many_computations()
            .replacen(
                "ROOT %o.2 = f32[8]{0} add(%m.2, %b.2)",
                "ROOT %o.2 = f32[9]{0} add(%m.2, %b.2)",
                1,
            )
            .replacen(
                "%b.260 = f32[8]{0} broadcast(%r.260), dimensions={}",
                "%b.260 = f32[8]{0} broadcast(%r.260), dimensions={0}",
                1,
            )
            .replacen(
                "%call.470 = f32[8]{0} call(%call.469), to_apply=%c470",
                "%call.470 = f32[8]{0} call(%call.469, %x), to_apply=%c470",
                1,
            );
        let (m, d) = parse(&src);
        assert!(!d.has_errors(), "{d:?}");
        let m = m.expect("module");
        assert!(m.instr_count() > crate::halves::PARALLEL_MIN_INSTRS);
        let mut one = crate::verify::verify_with(&m, Some(&src), false);
        one.sort();
        let two = crate::verify::verify_with(&m, Some(&src), true);
        let render = |d: &Diagnostics| d.render(&src, "m.hlo", false);
        assert_eq!(render(&one), render(&two));
        assert!(two.iter().filter(|d| d.is_error()).count() >= 3, "{}", render(&two));
    }

    #[test]
    fn metadata_read_whole_gives_the_fields_token_trees_give() {
        use crate::metadata::MetaValue;
        // The instruction's metadata is one raw token; the sharding's, one level down, is
        // read as token trees: both must give the same fields for the same text.
        let meta = r#"{op_type="dot" op_name="jit(f)/a{b}\"c" source_line=12 profile_type={1,2} preserve_layout=true my_key="v"}"#;
        let src = format!(
            "HloModule m\n\nENTRY e {{\n  p = f32[4] parameter(0), sharding={{replicated metadata={meta}}}, metadata={meta}\n  ROOT n = f32[4] negate(p)\n}}\n"
        );
        let (m, d) = parse(&src);
        assert!(!d.has_errors(), "{d:?}");
        let m = m.expect("module");
        let p = m.entry().instrs().find(|i| i.name == "p").expect("p");
        let fields = &p.metadata.as_ref().expect("metadata").fields;
        let want = [
            ("op_type", MetaValue::Str("dot".into())),
            ("op_name", MetaValue::Str("jit(f)/a{b}\"c".into())),
            ("source_line", MetaValue::Int(12)),
            ("profile_type", MetaValue::Raw("{1,2}".into())),
            ("preserve_layout", MetaValue::Raw("true".into())),
            ("my_key", MetaValue::Str("v".into())),
        ];
        let got: Vec<(&str, &MetaValue)> = fields.iter().map(|(k, v)| (k.as_ref(), v)).collect();
        assert_eq!(got, want.iter().map(|(k, v)| (*k, v)).collect::<Vec<_>>());
        let printed = crate::text::printer::print(&m);
        assert_eq!(printed.matches(r#"op_name="jit(f)/a{b}\"c""#).count(), 2, "{printed}");
        // Malformed inside: located at the bad field.
        let bad = src.replacen("source_line=12 profile", "source_line=12 , = profile", 1);
        let (_, d) = parse(&bad);
        assert!(d.has_errors());
    }

    #[test]
    fn a_wrong_cut_falls_back_to_one_thread() {
        // A `}` alone on a line inside a multi-line attribute, followed by an unindented
        // line, looks like the end of a computation: the cut lands inside an instruction.
        let mut src = big_module();
        let mid = src.len() / 2;
        let at = mid + src[mid..].find("\n  ROOT").expect("an instruction");
        src.insert_str(at, ", backend_config={\n}\n, frontend_attributes={a=\"b\"}");
        let cut = computation_boundary(&src).expect("a boundary candidate");
        assert!(
            src[cut..].starts_with(", frontend_attributes"),
            "the misleading cut is taken: {:?}",
            &src[cut..cut + 20]
        );
        let whole = grammar::ModuleParser::new().parse(&src, tokens(&src, 0)).expect("valid");
        assert_eq!(parse_fast(&src).expect("parses after falling back").0, whole);
    }
}
