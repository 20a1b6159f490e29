//! Names: the module's computation table, the resolver state every other part of the
//! resolver works on (the table, the diagnostics, sequence numbers, computations made up
//! on the way), references to computations by name, and the names the resolver makes up
//! (as XLA's parser names them).

use std::collections::HashMap;

use crate::computation::Computation;
use crate::diag::{Diagnostic, Diagnostics};
use crate::module::CompId;
use crate::opcode::edit_distance;
use crate::text::ast::Tt;
use crate::text::attrs::{self as av, R};
use crate::text::lexer::Tok;

/// The module's computation names, known before any instruction is built and read-only
/// from then on (the threads that build a large computation's instructions share it).
pub(super) struct CompTable<'a> {
    pub(super) ids: HashMap<&'a str, CompId>,
    pub(super) names: Vec<&'a str>,
}

/// The state of one resolving thread.
pub(super) struct Resolver<'a, 'd, 't> {
    pub(super) src: &'a str,
    pub(super) diags: &'d mut Diagnostics,
    pub(super) table: &'t CompTable<'a>,
    pub(super) seq: u32,
    /// Computations made explicit while resolving (async shorthand wrapped ops), with
    /// ids after the written ones.
    pub(super) extra: Vec<Computation>,
    pub(super) written_comps: usize,
    /// The computation being resolved: references must point before it.
    pub(super) current: usize,
    /// Inline computation bodies resolved so far, by the offset of their `{` (or the
    /// syntax error in one, repeated to its user and merged with the first by `parse`).
    pub(super) inline: HashMap<u32, Result<CompId, Diagnostic>>,
}

impl<'a, 'd, 't> Resolver<'a, 'd, 't> {
    /// A resolver at the start of computation 0, sequence number 0.
    pub(super) fn new(
        src: &'a str,
        diags: &'d mut Diagnostics,
        table: &'t CompTable<'a>,
        written_comps: usize,
    ) -> Self {
        Resolver {
            src,
            diags,
            table,
            seq: 0,
            extra: Vec::new(),
            written_comps,
            current: 0,
            inline: HashMap::new(),
        }
    }
}

impl<'a> Resolver<'a, '_, '_> {
    pub(super) fn comp_ref(&self, tts: &[Tt<'a>]) -> R<CompId> {
        let t = av::one(tts, "a computation name")?;
        let (name, sp) = match t {
            Tt::Tok(Tok::Ident(s) | Tok::PctIdent(s), sp) => (*s, *sp),
            Tt::Tok(Tok::RawBraced(_), sp) => {
                // Resolved before the instruction (`inline_bodies`).
                return self.inline.get(&sp.start).cloned().unwrap_or_else(|| {
                    Err(Diagnostic::error(*sp, "malformed inline computation"))
                });
            }
            Tt::Group { open: Tok::LBrace, span, .. } => {
                return Err(Diagnostic::error(
                    *span,
                    "a computation cannot be written inline here",
                )
                .with_help("define the computation separately and refer to it by name"));
            }
            t => return Err(Diagnostic::error(t.span(), "expected a computation name")),
        };
        if let Some(&id) = self.table.ids.get(name)
            && id.index() >= self.current
        {
            let what = if id.index() == self.current {
                "calls itself"
            } else {
                "is defined after its use"
            };
            return Err(Diagnostic::error(sp, format!("computation `{name}` {what}"))
                .with_label("not defined yet")
                .with_help("XLA's parser needs every computation defined before the computations that call it (callees first, as XLA prints them)"));
        }
        self.table.ids.get(name).copied().ok_or_else(|| {
            let d = Diagnostic::error(sp, format!("unknown computation `{name}`"))
                .with_label("no computation has this name");
            match closest(name, self.table.names.iter().copied()) {
                Some(best) => d.with_help(format!("did you mean `{best}`?")),
                None => d,
            }
        })
    }

    pub(super) fn comp_list(&self, tts: &[Tt<'a>]) -> R<Vec<CompId>> {
        av::group_items(
            av::one(tts, "a list of computations")?,
            Tok::LBrace,
            "a list like `{%a, %b}`",
        )?
        .into_iter()
        .map(|t| self.comp_ref(std::slice::from_ref(t)))
        .collect()
    }

    pub(super) fn next_seq(&mut self) -> u32 {
        self.seq += 1;
        self.seq - 1
    }
}

/// The candidate closest to `name` in spelling, if one is close enough to suggest.
pub(super) fn closest<'n>(
    name: &str,
    candidates: impl Iterator<Item = &'n str>,
) -> Option<&'n str> {
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|&(d, c)| d <= 2.max(c.len() / 4) && d > 0)
        .min()
        .map(|(_, c)| c)
}

/// Whether `name` is a type keyword (`s2`, `f32`, `pred`, `token`, ...): XLA's lexer reads
/// it as a type, so it can never name an instruction.
pub(super) fn spells_a_type(name: &str) -> bool {
    crate::types::ElemType::from_name(name).is_some() || matches!(name, "token" | "opaque")
}

/// `stem`, or `stem.1`, `stem.2`, ... : the first that `taken` does not hold (how XLA
/// names what its parser creates: `multiply.anon`, `multiply.anon.1`).
pub(super) fn unused_name(stem: &str, taken: impl Fn(&str) -> bool) -> String {
    let mut name = stem.to_string();
    let mut k = 0;
    while taken(&name) {
        k += 1;
        name = format!("{stem}.{k}");
    }
    name
}
