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
