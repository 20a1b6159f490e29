//! Tokens of the HLO text format (logos).
//!
//! The lexer is context-free except for one rule XLA also has: a `{` that directly
//! follows a `]` and whose next token is an integer or `:` opens a *layout*
//! (`f32[8]{0}`), not a computation body (`-> f32[8] {`). [`lex`] applies that rule
//! and returns [`Tok::LayoutOpen`] for such braces.
//!
//! Numbers are kept as source slices and converted by the grammar/resolver, so that
//! range errors (`u4` overflow, `s64` underflow) get a span and a message.

use logos::Logos;

use crate::diag::Span;

/// What went wrong while cutting a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LexErrorKind {
    #[default]
    UnexpectedChar,
    UnterminatedString,
    UnterminatedComment,
    NulByte,
    UnclosedBrace,
}

#[derive(Logos, Debug, Clone, Copy, PartialEq)]
#[logos(error = LexErrorKind)]
#[logos(skip r"[ \t\r\n\f]+")]
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
#[logos(skip r"/\*([^*]|\*+[^*/])*\*+/")]
pub enum Tok<'a> {
    #[token("HloModule")]
    KwHloModule,
    #[token("ENTRY")]
    KwEntry,
    #[token("ROOT")]
    KwRoot,
    #[token("FileNames")]
    KwFileNames,
    #[token("FunctionNames")]
    KwFunctionNames,
    #[token("FileLocations")]
    KwFileLocations,
    #[token("StackFrames")]
    KwStackFrames,

    /// `entry_computation_layout=`: its value holds shapes, so the grammar parses it.
    #[token("entry_computation_layout=")]
    AttrEntryLayout,
    /// `operand_layout_constraints=` (custom-call): a braced list of shapes.
    #[token("operand_layout_constraints=")]
    AttrOperandLayouts,
    /// `outfeed_shape=`: one shape.
    #[token("outfeed_shape=")]
    AttrOutfeedShape,
    /// `literal=`: a shape followed by a literal.
    #[token("literal=")]
    AttrLiteral,

    /// A whole array shape with at most a plain layout, `bf16[8,4096]{1,0}`, as one token:
    /// shapes are half the tokens of a module, and cutting them here is what makes the
    /// parser fast. Shapes with spaces, tiled layouts or tuples go through the grammar.
    #[regex(r"[a-z][a-z0-9]*\[[0-9,<=?]*\](\{[0-9,]*\})?")]
    ArrayShape(&'a str),
    /// A name or bare word: `add.3`, `f32`, `kLoop`, `true`, `fused_computation.2`.
    #[regex(r"[A-Za-z_][A-Za-z0-9_.\-]*")]
    Ident(&'a str),
    /// A name that starts an instruction (`name = ...`): an [`Tok::Ident`] or
    /// [`Tok::PctIdent`] followed by a spaced `=`. Produced by [`lex`].
    InstrName(&'a str),
    /// A name that starts a computation (followed by `(` or `{` at the top level).
    /// Produced by [`lex`].
    CompName(&'a str),
    /// A `%`-sigiled name; the slice excludes the `%`.
    #[regex(r"%[A-Za-z0-9_.\-]+", |lex| &lex.slice()[1..])]
    PctIdent(&'a str),
    /// A name immediately followed by `:` (computation parameter lists); slice without `%`/`:`.
    #[regex(r"%?[A-Za-z_][A-Za-z0-9_.\-]*:", |lex| { let s = lex.slice(); &s[usize::from(s.starts_with('%'))..s.len() - 1] })]
    NameColon(&'a str),
    /// An attribute name immediately followed by `=`; slice without `=`.
    #[regex(r"[A-Za-z_][A-Za-z0-9_.\-]*=", |lex| { let s = lex.slice(); &s[..s.len() - 1] })]
    AttrName(&'a str),
    /// `b(`: the start of a buffer shape `b(f32[4])`.
    #[token("b(")]
    BufferOpen,

    #[regex(r"-?[0-9]+")]
    Int(&'a str),
    #[regex(r"-?([0-9]+\.[0-9]*|\.[0-9]+)([eE][+\-]?[0-9]+)?")]
    #[regex(r"-?[0-9]+[eE][+\-]?[0-9]+")]
    Float(&'a str),
    /// `-inf`, `-nan`, `nan(0x7)`, `-nan(0x7)`: non-finite literals that are not words.
    #[regex(r"-inf|-?nan\(0x[0-9A-Fa-f]+\)|-nan")]
    NonFinite(&'a str),
    /// Window sizes and strides: `3x3`, `2x1x1`.
    #[regex(r"[0-9]+(x[0-9]+)+")]
    DimsX(&'a str),
    /// Padding configs: `0_1`, `1_1x-1_2_1`.
    #[regex(r"-?[0-9]+_-?[0-9]+(_-?[0-9]+)?(x-?[0-9]+_-?[0-9]+(_-?[0-9]+)?)*")]
    Pad(&'a str),
    /// Convolution dimension labels: `b01f_01io->b01f`.
    #[regex(r"[0-9bf?]+_[0-9io?]+->[0-9bf?]+")]
    DimLabels(&'a str),
    /// A double-quoted string, quotes included, escapes not yet processed.
    #[regex(r#""([^"\\]|\\(.|\n))*""#)]
    Str(&'a str),
    /// A single-quoted string (named shardings in the newest XLA).
    #[regex(r"'([^'\\]|\\(.|\n))*'")]
    SqStr(&'a str),

    #[token("=")]
    Eq,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("{")]
    LBrace,
    /// A `{` that opens a layout (see the module doc). Never produced by logos itself.
    LayoutOpen,
    #[token("}")]
    RBrace,
    #[token("<=")]
    Le,
    #[token("->")]
    Arrow,
    #[token("*")]
    Star,
    #[token("#")]
    Hash,
    #[token("?")]
    Question,
    #[token("...")]
    Ellipsis,
    #[token("+")]
    Plus,
    #[token("~")]
    Tilde,
    #[token("!")]
    Bang,

    /// The brace-balanced value of `frontend_attributes=`/`backend_config=`, taken verbatim
    /// (XLA scans these by brace counting: they may hold MLIR or JSON). Produced by [`lex`].
    RawBraced(&'a str),

    /// An unterminated `"...` (longest-match loses to [`Tok::Str`] when it is closed).
    #[regex(r#""([^"\\]|\\(.|\n))*"#, unterminated_string)]
    #[token("/*", unterminated_comment)]
    #[token("\0", nul_byte)]
    Invalid,
}

fn unterminated_string<'a>(_: &mut logos::Lexer<'a, Tok<'a>>) -> Result<(), LexErrorKind> {
    Err(LexErrorKind::UnterminatedString)
}
fn unterminated_comment<'a>(_: &mut logos::Lexer<'a, Tok<'a>>) -> Result<(), LexErrorKind> {
    Err(LexErrorKind::UnterminatedComment)
}
fn nul_byte<'a>(_: &mut logos::Lexer<'a, Tok<'a>>) -> Result<(), LexErrorKind> {
    Err(LexErrorKind::NulByte)
}

impl Tok<'_> {
    /// How a token is named in "expected one of ..." messages and by `hloc`.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) | Tok::InstrName(s) | Tok::CompName(s) => format!("`{s}`"),
            Tok::PctIdent(s) => format!("`%{s}`"),
            Tok::NameColon(s) => format!("`{s}:`"),
            Tok::AttrName(s) => format!("attribute `{s}=`"),
            Tok::Int(s)
            | Tok::Float(s)
            | Tok::NonFinite(s)
            | Tok::DimsX(s)
            | Tok::Pad(s)
            | Tok::DimLabels(s)
            | Tok::ArrayShape(s) => {
                format!("`{s}`")
            }
            Tok::Str(s) | Tok::SqStr(s) => {
                if s.len() > 40 {
                    format!("string {}...", &s[..s.floor_char_boundary(36)])
                } else {
                    format!("string {s}")
                }
            }
            other => format!("`{}`", other.text()),
        }
    }

    /// Source text of a fixed token.
    pub fn text(&self) -> &str {
        match self {
            Tok::KwHloModule => "HloModule",
            Tok::KwEntry => "ENTRY",
            Tok::KwRoot => "ROOT",
            Tok::KwFileNames => "FileNames",
            Tok::KwFunctionNames => "FunctionNames",
            Tok::KwFileLocations => "FileLocations",
            Tok::KwStackFrames => "StackFrames",
            Tok::AttrEntryLayout => "entry_computation_layout=",
            Tok::AttrOperandLayouts => "operand_layout_constraints=",
            Tok::AttrOutfeedShape => "outfeed_shape=",
            Tok::AttrLiteral => "literal=",
            Tok::BufferOpen => "b(",
            Tok::Eq => "=",
            Tok::Comma => ",",
            Tok::Colon => ":",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::LBrace | Tok::LayoutOpen => "{",
            Tok::RBrace => "}",
            Tok::Le => "<=",
            Tok::Arrow => "->",
            Tok::Star => "*",
            Tok::Hash => "#",
            Tok::Question => "?",
            Tok::Ellipsis => "...",
            Tok::Plus => "+",
            Tok::Tilde => "~",
            Tok::Bang => "!",
            Tok::Invalid => "<invalid>",
            Tok::Ident(s)
            | Tok::InstrName(s)
            | Tok::CompName(s)
            | Tok::PctIdent(s)
            | Tok::NameColon(s)
            | Tok::AttrName(s)
            | Tok::Int(s)
            | Tok::Float(s)
            | Tok::NonFinite(s)
            | Tok::DimsX(s)
            | Tok::Pad(s)
            | Tok::DimLabels(s)
            | Tok::Str(s)
            | Tok::SqStr(s)
            | Tok::RawBraced(s)
            | Tok::ArrayShape(s) => s,
        }
    }

    /// Opening delimiters (depth +1) and closing ones (depth -1).
    pub fn depth_delta(&self) -> i32 {
        match self {
            Tok::LParen | Tok::LBracket | Tok::LBrace | Tok::LayoutOpen | Tok::BufferOpen => 1,
            Tok::RParen | Tok::RBracket | Tok::RBrace => -1,
            _ => 0,
        }
    }
}

/// One token with its byte range.
pub type Spanned<'a> = (usize, Tok<'a>, usize);

/// A lexical error with its location.
#[derive(Debug, Clone, PartialEq)]
pub struct LexError {
    pub kind: LexErrorKind,
    pub span: Span,
}

/// Instruction attributes whose value is one computation, which may be written inline.
pub(crate) const COMPUTATION_ATTRS: &[&str] = &[
    "to_apply",
    "calls",
    "condition",
    "body",
    "true_computation",
    "false_computation",
    "select",
    "scatter",
];

/// The token stream of `src`, with the layout-brace rule, raw attribute values and
/// statement-role tags applied (see the module doc). It continues after a lexical error,
/// yielding the error in place of the bytes it skipped. Tokens are produced on demand, so
/// the grammar can run without materializing the whole token vector.
pub struct Lexer<'a> {
    src: &'a str,
    inner: logos::Lexer<'a, Tok<'a>>,
    /// The last token read, held back until the next one decides its tag.
    pending: Option<Spanned<'a>>,
    /// What precedes `pending`: whether it starts a line, and whether a `,` is before it.
    pending_ctx: Ctx,
    /// End and kind of the token before `pending`.
    prev_end: usize,
    prev_comma: bool,
    prev_entry: bool,
    /// A token read together with the pending one (a raw attribute value), or an error.
    queued: Option<Result<Spanned<'a>, LexError>>,
    depth: i32,
    /// Whether an inline computation body (`to_apply={ ... }`) was read: `resolve` then
    /// works on one thread, as such bodies add computations as they go.
    pub(crate) inline_bodies: bool,
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Lexer<'a> {
        Lexer::starting_at(src, 0)
    }

    /// Lexes `src[start..]` (which must begin at the top level, between computations),
    /// reporting offsets into the whole of `src`.
    pub fn starting_at(src: &'a str, start: usize) -> Lexer<'a> {
        let mut inner = Tok::lexer(src);
        inner.bump(start);
        Lexer {
            src,
            inner,
            pending: None,
            pending_ctx: Ctx::default(),
            prev_end: start,
            prev_comma: false,
            prev_entry: false,
            queued: None,
            depth: 0,
            inline_bodies: false,
        }
    }

    /// Lexes `src[start..]`, which must begin a statement inside a computation body (brace
    /// depth 1), reporting offsets into the whole of `src`.
    pub fn starting_in_body(src: &'a str, start: usize) -> Lexer<'a> {
        let mut l = Lexer::starting_at(src, start);
        l.depth = 1;
        l
    }

    /// When the text after `from` (blanks skipped) opens a group with `open`, queues the
    /// whole balanced group as one raw token. An unclosed one is an error that takes the
    /// rest of the input, unless `as_tokens_if_unclosed` (a group that is also valid as
    /// tokens): then the token rules say what is wrong inside it.
    fn queue_raw_group(&mut self, from: usize, open: u8, close: u8, as_tokens_if_unclosed: bool) {
        let rest = &self.src[from..];
        let ws = rest.len() - rest.trim_start().len();
        if rest.as_bytes().get(ws) != Some(&open) {
            return;
        }
        let at = from + ws;
        self.queued = Some(match balanced(&rest[ws..], open, close) {
            Some(len) => {
                self.inner.bump(ws + len);
                Ok((at, Tok::RawBraced(&self.src[at..at + len]), at + len))
            }
            None if as_tokens_if_unclosed => return,
            None => {
                self.inner.bump(rest.len());
                Err(LexError { kind: LexErrorKind::UnclosedBrace, span: Span::new(at, at + 1) })
            }
        });
    }

    /// Reads the next raw item from logos, applying the context rules.
    fn read(&mut self) -> Option<Result<Spanned<'a>, LexError>> {
        let res = self.inner.next()?;
        let r = self.inner.span();
        Some(match res {
            Ok(Tok::LBrace) if opens_layout(self.pending.as_ref(), &self.src[r.end..]) => {
                Ok((r.start, Tok::LayoutOpen, r.end))
            }
            Ok(t @ Tok::AttrName("frontend_attributes" | "backend_config")) => {
                self.queue_raw_group(r.end, b'{', b'}', false);
                Ok((r.start, t, r.end))
            }
            // An instruction's metadata (not a sharding's, deeper down) is read whole:
            // `resolve` reads its fields without token trees (`attrs::metadata_raw`).
            Ok(t @ Tok::AttrName("metadata")) if self.depth <= 1 => {
                self.queue_raw_group(r.end, b'{', b'}', true);
                Ok((r.start, t, r.end))
            }
            // An inline computation body (`to_apply={ ... }`, as XLA's parser accepts it)
            // is read whole; `resolve` parses it as a computation of its own.
            Ok(t @ Tok::AttrName(name)) if self.depth <= 1 && COMPUTATION_ATTRS.contains(&name) => {
                self.queue_raw_group(r.end, b'{', b'}', true);
                self.inline_bodies |= self.queued.is_some();
                Ok((r.start, t, r.end))
            }
            // A tuple literal (`literal=(f32[] 1, s32[] 2)`) is read whole; `resolve`
            // parses its elements (a tuple shape never follows `literal=` in XLA's syntax).
            Ok(t @ Tok::AttrLiteral) => {
                self.queue_raw_group(r.end, b'(', b')', false);
                Ok((r.start, t, r.end))
            }
            Ok(t) => Ok((r.start, t, r.end)),
            Err(kind) => {
                let end = match kind {
                    // Everything to the end of the input belongs to the unterminated item.
                    LexErrorKind::UnterminatedString | LexErrorKind::UnterminatedComment => {
                        self.inner.bump(self.inner.remainder().len());
                        self.src.len()
                    }
                    _ => r.end,
                };
                Err(LexError { kind, span: Span::new(r.start, end) })
            }
        })
    }
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Result<Spanned<'a>, LexError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let item = match self.queued.take() {
                Some(q) => Some(q),
                None => self.read(),
            };
            match item {
                Some(Ok(t)) => {
                    if let Some(p) = &mut self.pending {
                        retag(p, self.pending_ctx, &t.1, self.depth);
                        self.prev_end = p.2;
                        self.prev_comma = matches!(p.1, Tok::Comma);
                        self.prev_entry = matches!(p.1, Tok::KwEntry);
                    }
                    // Only names can be retagged, so only they need their context.
                    let name = matches!(t.1, Tok::Ident(_) | Tok::PctIdent(_));
                    self.pending_ctx = Ctx {
                        line_start: name
                            && (self.pending.is_none()
                                || self.src.as_bytes()[self.prev_end..t.0].contains(&b'\n')),
                        after_comma: self.pending.is_some() && self.prev_comma,
                        after_entry: self.pending.is_some() && self.prev_entry,
                    };
                    self.depth = (self.depth + t.1.depth_delta()).max(0);
                    match self.pending.replace(t) {
                        Some(p) => return Some(Ok(p)),
                        None => continue,
                    }
                }
                // Errors are reported in place; the pending token goes out first.
                Some(Err(e)) => match self.pending.take() {
                    Some(p) => {
                        self.queued = Some(Err(e));
                        return Some(Ok(p));
                    }
                    None => return Some(Err(e)),
                },
                None => {
                    // The last token: `ENTRY name` at the very end still names a computation.
                    let mut p = self.pending.take()?;
                    if let (true, Tok::Ident(n) | Tok::PctIdent(n)) =
                        (self.pending_ctx.after_entry, p.1)
                    {
                        p.1 = Tok::CompName(n);
                    }
                    return Some(Ok(p));
                }
            }
        }
    }
}

/// Cuts `src` into tokens. Errors do not stop the lexer: the offending bytes are skipped
/// and reported, so one stray character does not hide the rest of the diagnostics.
pub fn lex(src: &str) -> (Vec<Spanned<'_>>, Vec<LexError>) {
    let mut toks: Vec<Spanned<'_>> = Vec::with_capacity(src.len() / 5);
    let mut errs: Vec<LexError> = Vec::new();
    for item in Lexer::new(src) {
        match item {
            Ok(t) => toks.push(t),
            // Merge runs of unexpected characters into one error.
            Err(e) => match errs.last_mut() {
                Some(last)
                    if last.kind == e.kind
                        && e.kind == LexErrorKind::UnexpectedChar
                        && last.span.end == e.span.start =>
                {
                    last.span.end = e.span.end;
                }
                _ => errs.push(e),
            },
        }
    }
    (toks, errs)
}

/// Where a token stands, for [`retag`].
#[derive(Debug, Clone, Copy, Default)]
struct Ctx {
    line_start: bool,
    after_comma: bool,
    after_entry: bool,
}

/// Gives names their statement role from the token that follows them: `name =` starts an
/// instruction (unless a `,` precedes it: that is a mistyped `attr =`), and `name (` or
/// `name {` starts a computation at the top level — as does `name {` at the start of a
/// line, so that a computation whose `}` is missing ends where the next one begins. The grammar is LR(1)
/// thanks to these tags; the driver also uses them to find statement boundaries.
fn retag(last: &mut Spanned<'_>, ctx: Ctx, next: &Tok<'_>, depth: i32) {
    let name = match last.1 {
        Tok::Ident(s) | Tok::PctIdent(s) => s,
        _ => return,
    };
    match next {
        Tok::Eq if !ctx.after_comma => last.1 = Tok::InstrName(name),
        Tok::LParen | Tok::LBrace if depth == 0 => last.1 = Tok::CompName(name),
        // Inside a body only `name {` on a new line: `name (` there is an opcode whose
        // instruction spans several lines.
        Tok::LBrace if ctx.line_start => last.1 = Tok::CompName(name),
        _ if ctx.after_entry => last.1 = Tok::CompName(name),
        _ => {}
    }
}

/// The length of the group `s` starts with, from `open` to its matching `close` (strings
/// skipped).
pub(crate) fn balanced(s: &str, open: u8, close: u8) -> Option<usize> {
    let b = s.as_bytes();
    let (mut depth, mut i, mut in_str) = (0usize, 0usize, false);
    while i < b.len() {
        match (b[i], in_str) {
            (b'\\', true) => i += 1,
            (b'"', _) => in_str = !in_str,
            (c, false) if c == open => depth += 1,
            (c, false) if c == close => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn opens_layout(prev: Option<&Spanned<'_>>, rest: &str) -> bool {
    match prev {
        Some((_, Tok::RBracket, _)) => {}
        Some((_, Tok::ArrayShape(s), _)) if s.ends_with(']') => {}
        _ => return false,
    }
    let rest = rest.trim_start();
    matches!(rest.as_bytes().first(), Some(b'0'..=b'9' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<Tok<'_>> {
        let (t, e) = lex(src);
        assert!(e.is_empty(), "{e:?}");
        t.into_iter().map(|t| t.1).collect()
    }

    #[test]
    fn context_sensitive_tokens() {
        assert_eq!(
            kinds("f32[8]{0} -> f32[8] {"),
            vec![Tok::ArrayShape("f32[8]{0}"), Tok::Arrow, Tok::ArrayShape("f32[8]"), Tok::LBrace]
        );
        assert_eq!(
            kinds("f32[8, 4]{1,0:T(8,128)}"),
            vec![
                Tok::Ident("f32"),
                Tok::LBracket,
                Tok::Int("8"),
                Tok::Comma,
                Tok::Int("4"),
                Tok::RBracket,
                Tok::LayoutOpen,
                Tok::Int("1"),
                Tok::Comma,
                Tok::Int("0"),
                Tok::Colon,
                Tok::Ident("T"),
                Tok::LParen,
                Tok::Int("8"),
                Tok::Comma,
                Tok::Int("128"),
                Tok::RParen,
                Tok::RBrace
            ]
        );
        assert_eq!(
            kinds("f32[8]{1,0:T(8,128)}")[..2],
            [Tok::ArrayShape("f32[8]"), Tok::LayoutOpen]
        );
        assert_eq!(
            kinds("dim_labels=b01f_01io->b01f"),
            vec![Tok::AttrName("dim_labels"), Tok::DimLabels("b01f_01io->b01f")]
        );
        assert_eq!(kinds("b01f_01io"), vec![Tok::Ident("b01f_01io")]);
        assert_eq!(
            kinds("pad=0_0x-1_2_1 3x3 7"),
            vec![Tok::AttrName("pad"), Tok::Pad("0_0x-1_2_1"), Tok::DimsX("3x3"), Tok::Int("7")]
        );
        assert_eq!(
            kinds("%Arg_0.1: f32[]"),
            vec![Tok::NameColon("Arg_0.1"), Tok::ArrayShape("f32[]")]
        );
        assert_eq!(
            kinds("-inf nan(0x1F) 1e-05 -0.5 .5"),
            vec![
                Tok::NonFinite("-inf"),
                Tok::NonFinite("nan(0x1F)"),
                Tok::Float("1e-05"),
                Tok::Float("-0.5"),
                Tok::Float(".5")
            ]
        );
        assert_eq!(kinds("/*index=5*/ x // c\n y"), vec![Tok::Ident("x"), Tok::Ident("y")]);
    }

    #[test]
    fn errors_are_located() {
        let (_, e) = lex("a $$ b");
        assert_eq!(e, vec![LexError { kind: LexErrorKind::UnexpectedChar, span: Span::new(2, 4) }]);
        let (_, e) = lex("a \"abc");
        assert_eq!(e[0].kind, LexErrorKind::UnterminatedString);
        let (_, e) = lex("a /* abc");
        assert_eq!(e[0].kind, LexErrorKind::UnterminatedComment);
    }
}
