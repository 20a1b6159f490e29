//! The HLO text format: lexer (logos), grammar (lalrpop), resolver and printer.
//!
//! Text to module, each module using only those listed before it:
//! - `lexer` (tokens, with the context rules of HLO's lexical oddities) and `ast` (the
//!   syntax trees);
//! - `shapes` (shape tokens to shapes, XLA's context-free shape rules) and `attrs`
//!   (attribute token trees to typed values);
//! - `grammar` (generated from `grammar.lalrpop`) and `syntax` (the grammar run over
//!   tokens, syntax errors as diagnostics);
//! - `resolve` (syntax trees to the IR: `names`, `literals`, `ops`, `assembly`);
//! - `parse` (the driver: the whole module at once, on two threads when large, or
//!   statement by statement to report every error).
//!
//! `printer` prints a module back in XLA's dump style, as the oracle's XLA reads it.

pub mod ast;
mod attrs;
pub mod lexer;
mod parse;
mod printer;
mod resolve;
mod shapes;
mod syntax;

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, unused_parens, dead_code)]
    grammar,
    "/grammar.rs"
);

pub use parse::parse;
pub use printer::print;

/// The modules of a file: lit tests run with `-split-input-file` (a `// RUN:` line in the
/// file's leading comments says so) hold several modules separated by `// -----` lines;
/// any other text is one module.
pub fn split_modules(src: &str) -> Vec<String> {
    let split = src
        .lines()
        .take_while(|l| l.starts_with("//") || l.trim().is_empty())
        .any(|l| l.contains("-split-input-file"));
    if !split {
        return vec![src.to_string()];
    }
    let mut out = vec![String::new()];
    for line in src.split_inclusive('\n') {
        if line.starts_with("// -----") {
            out.push(String::new());
        } else if let Some(last) = out.last_mut() {
            last.push_str(line);
        }
    }
    out
}
