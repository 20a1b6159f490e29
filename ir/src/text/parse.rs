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
use super::lexer::{Lexer, Spanned, Tok, lex};
use super::resolve;
use super::syntax::{lex_diagnostic, syntax_error, with_lexer};
use crate::diag::{Diagnostic, Diagnostics, Span};
use crate::module::Module;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::syntax::tokens;

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
