//! The HLO text format: lexer (logos), grammar (lalrpop), resolver and printer.

pub mod ast;
mod attrs;
pub mod lexer;
mod parse;
mod printer;
mod resolve;

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, unused_parens, dead_code)]
    grammar,
    "/grammar.rs"
);

pub use parse::parse;
pub use printer::print;
