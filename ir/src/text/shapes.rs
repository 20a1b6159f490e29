//! Shapes as the grammar reads them: array shape tokens (`f32[2,3]{1,0}`, bounded and
//! unbounded dimensions, layouts and their extensions) and the validity rules XLA's parser
//! applies to them without context. Grammar helpers: `grammar.lalrpop` calls these.

use lalrpop_util::ParseError;

use super::lexer::Tok;
use crate::diag::{Diagnostic, Span};
use crate::opcode::edit_distance;
use crate::types::ElemType;

/// Checks the parts of a layout extension (after `:`) that XLA's parser checks: the dim
/// level types of `D(...)` are `D`, `C`, `S` or `H` (dense, compressed, singleton, loose
/// compressed), each optionally followed by `+` (not unique) and `~` (not ordered); and a
/// physical shape `P(...)` belongs to sparse layouts only. The rest (tiles, memory
/// space, element sizes, ...) is kept verbatim (grammar helper).
pub(super) fn check_layout_ext(ext: &str, span: Span, rank: usize) -> Result<(), Diagnostic> {
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
pub(super) fn parse_u64(s: &str, span: Span, what: &str) -> Result<u64, Diagnostic> {
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
pub(super) fn array_shape(
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
pub(super) fn check_array_shape(
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
pub(super) fn unknown_elem_type(name: &str, span: Span) -> Diagnostic {
    let d = Diagnostic::error(span, format!("unknown element type `{name}`"))
        .with_label("not an XLA primitive type");
    let best = ElemType::ALL.iter().map(|t| (edit_distance(name, t.name()), t.name())).min();
    match best {
        Some((dist, best)) if dist <= 2 => d.with_help(format!("did you mean `{best}`?")),
        _ => d.with_help("element types are pred, s8/s16/s32/s64, u8/u16/u32/u64, f16, bf16, f32, f64, c64, c128, f8*/f4* and token"),
    }
}
