//! Syntax tree produced by the grammar: names are still strings, attribute values are
//! still token trees. `resolve` turns it into the IR.

use super::lexer::Tok;
use crate::diag::Span;
use crate::types::Shape;

/// A name as written, without `%`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Name<'a> {
    pub text: &'a str,
    pub span: Span,
}

/// A token tree: one token, or a delimited group of token trees.
#[derive(Debug, Clone, PartialEq)]
pub enum Tt<'a> {
    Tok(Tok<'a>, Span),
    /// `open` is `(`, `[`, `{` or the layout brace; `items` includes separating commas.
    Group {
        open: Tok<'a>,
        items: Vec<Tt<'a>>,
        span: Span,
    },
}

impl<'a> Tt<'a> {
    pub fn span(&self) -> Span {
        match self {
            Tt::Tok(_, s) | Tt::Group { span: s, .. } => *s,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue<'a> {
    /// The generic form: one or more token trees, interpreted per attribute by `resolve`.
    Tts(Vec<Tt<'a>>),
    /// `entry_computation_layout={(params...)->result}`.
    EntryLayout(Box<(Vec<Shape>, Shape)>),
    /// `operand_layout_constraints={shape, ...}`.
    Shapes(Vec<Shape>),
    /// `outfeed_shape=shape`.
    Shape(Box<Shape>),
    /// `literal=shape literal`.
    Literal(Box<(Shape, Tt<'a>)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attr<'a> {
    pub name: &'a str,
    pub name_span: Span,
    pub value: AttrValue<'a>,
    /// From the name to the end of the value.
    pub span: Span,
}

impl Attr<'_> {
    pub fn value_span(&self) -> Span {
        Span { start: self.name_span.end, end: self.span.end }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Arg<'a> {
    /// An operand reference, optionally with its shape written before it and with compact
    /// tuple-element suffixes (`%t#1#0`).
    Ref { shape: Option<Box<(Shape, Span)>>, name: Name<'a>, gte: Vec<(&'a str, Span)> },
    /// A literal (the argument of `constant(...)`).
    Lit(Tt<'a>),
    /// A nested anonymous instruction (`add(x, f32[] multiply(x, y))`), as XLA's parser
    /// accepts it: shape optional, no attributes. Its `name.text` is empty.
    Nested(Box<Instr<'a>>),
    /// After `resolve` hoists nested instructions: the `k`-th instruction of the
    /// computation's flattened list.
    Anon(usize),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Instr<'a> {
    pub root: Option<Span>,
    pub name: Name<'a>,
    pub shape: Option<(Shape, Span)>,
    pub opcode: Name<'a>,
    pub args: Vec<Arg<'a>>,
    /// The parenthesised argument list, parentheses included.
    pub args_span: Span,
    pub attrs: Vec<Attr<'a>>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Param<'a> {
    pub name: Name<'a>,
    pub shape: Shape,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompHeader<'a> {
    pub entry: Option<Span>,
    pub name: Name<'a>,
    /// `(p: shape, ...) -> shape` when the dump style prints it.
    pub signature: Option<Box<(Vec<Param<'a>>, Shape, Span)>>,
}

/// One computation: header, instructions, the closing brace, `execution_thread`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompAst<'a> {
    pub header: Box<CompHeader<'a>>,
    pub instrs: Vec<Box<Instr<'a>>>,
    pub thread: Option<(&'a str, Span)>,
    /// The closing `}`.
    pub close: Span,
}

/// A whole module.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleAst<'a> {
    pub header: Option<Box<ModuleHeader<'a>>>,
    pub frames: Option<Box<FrameTables<'a>>>,
    pub comps: Vec<CompAst<'a>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModuleHeader<'a> {
    pub name: Name<'a>,
    pub attrs: Vec<Attr<'a>>,
}

/// `key=value` pairs of one stack-frame-table row.
pub type Row<'a> = (i64, Vec<(&'a str, &'a str, Span)>, Span);

#[derive(Debug, Clone, PartialEq, Default)]
pub struct FrameTables<'a> {
    pub file_names: Vec<(&'a str, Span)>,
    pub function_names: Vec<(&'a str, Span)>,
    pub file_locations: Vec<Row<'a>>,
    pub stack_frames: Vec<Row<'a>>,
}
