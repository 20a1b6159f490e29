//! Literals: constants' values read against their shapes (nesting, element counts, the
//! range of every element type, NaN payloads, XLA's reading of `-0` and of numbers past
//! f64's range), and tuple literals written whole in an attribute.

use crate::diag::{Diagnostic, Span};
use crate::literal::{Literal, LiteralData};
use crate::text::ast::{self, Arg, Tt};
use crate::text::attrs::{self as av, R};
use crate::text::lexer::{self, Tok};
use crate::text::syntax;
use crate::types::{ElemClass, ElemType, Shape};

/// The value of `constant(...)`, read against the instruction's shape.
pub(super) fn constant<'a>(ins: &ast::Instr<'a>, shape: &Shape) -> R<Literal> {
    let tt: Tt<'a> = match ins.args.as_slice() {
        [Arg::Lit(t)] => t.clone(),
        [Arg::Ref { shape: None, name, gte }] if gte.is_empty() => {
            Tt::Tok(Tok::Ident(name.text), name.span)
        }
        _ => {
            return Err(Diagnostic::error(ins.args_span, "`constant` takes one literal")
                .with_help(
                    "write e.g. `c = f32[2] constant({1, 2})` or `c = f32[] constant(0.5)`",
                ));
        }
    };
    literal(&tt, shape)
}

/// The literal of `shape` written as the token tree `t`.
fn literal(t: &Tt<'_>, shape: &Shape) -> R<Literal> {
    match shape {
        Shape::Tuple(elems) => {
            let items = av::group_items(t, Tok::LParen, "a tuple literal like `(1, {2, 3})`")?;
            if items.len() != elems.len() {
                return Err(Diagnostic::error(
                    t.span(),
                    format!(
                        "tuple literal has {} elements, shape {shape} has {}",
                        items.len(),
                        elems.len()
                    ),
                ));
            }
            Ok(Literal::Tuple(
                items.into_iter().zip(elems).map(|(t, s)| literal(t, s)).collect::<R<_>>()?,
            ))
        }
        Shape::Array(arr) => {
            if let Tt::Group { open: Tok::LBrace, items, .. } = t
                && matches!(items.as_slice(), [Tt::Tok(Tok::Ellipsis, _)])
            {
                return Ok(Literal::Elided);
            }
            let dims: Vec<u64> = arr
                .static_dims()
                .ok_or_else(|| Diagnostic::error(t.span(), "constants must have a static shape"))?;
            let count: u64 = dims.iter().product();
            let mut scalars: Vec<&Tt<'_>> = Vec::with_capacity(count as usize);
            collect_scalars(t, &dims, &mut Vec::new(), &mut scalars)?;
            let e = arr.elem;
            let data = match e.class() {
                ElemClass::Pred => {
                    LiteralData::Pred(scalars.iter().map(|s| pred_value(s)).collect::<R<_>>()?)
                }
                ElemClass::Signed | ElemClass::Unsigned => {
                    LiteralData::Int(scalars.iter().map(|s| int_value(s, e)).collect::<R<_>>()?)
                }
                ElemClass::Float => {
                    LiteralData::Float(scalars.iter().map(|s| float_value(s, e)).collect::<R<_>>()?)
                }
                ElemClass::Complex => LiteralData::Complex(
                    scalars
                        .iter()
                        .map(|s| {
                            let parts =
                                av::group_items(s, Tok::LParen, "a complex value like `(1, 0)`")?;
                            let part =
                                if e == ElemType::C128 { ElemType::F64 } else { ElemType::F32 };
                            match parts.as_slice() {
                                [re, im] => Ok((float_value(re, part)?, float_value(im, part)?)),
                                _ => Err(Diagnostic::error(
                                    s.span(),
                                    "expected a complex value like `(1, 0)`",
                                )),
                            }
                        })
                        .collect::<R<_>>()?,
                ),
            };
            Ok(Literal::Array(data))
        }
        _ => Err(Diagnostic::error(t.span(), format!("a constant cannot have shape {shape}"))),
    }
}

fn collect_scalars<'b, 'a>(
    t: &'b Tt<'a>,
    dims: &[u64],
    path: &mut Vec<usize>,
    out: &mut Vec<&'b Tt<'a>>,
) -> R<()> {
    let Some((&n, rest)) = dims.split_first() else {
        out.push(t);
        return Ok(());
    };
    let items = match t {
        Tt::Group { open: Tok::LBrace, items, .. } => items,
        t => {
            return Err(Diagnostic::error(
                t.span(),
                format!("expected a `{{...}}` list of {n} elements{}", at_index(path)),
            )
            .with_label("literal nesting does not match the shape's rank"));
        }
    };
    let items: Vec<&Tt<'a>> =
        items.iter().filter(|t| !matches!(t, Tt::Tok(Tok::Comma, _))).collect();
    if items.len() as u64 != n {
        return Err(Diagnostic::error(
            t.span(),
            format!(
                "literal has {} elements{} where the shape needs {n}",
                items.len(),
                at_index(path)
            ),
        )
        .with_label("wrong number of elements"));
    }
    for (i, it) in items.into_iter().enumerate() {
        path.push(i);
        collect_scalars(it, rest, path, out)?;
        path.pop();
    }
    Ok(())
}

/// ` at index [0, 2]` for nested literal positions; nothing at the top level.
fn at_index(path: &[usize]) -> String {
    if path.is_empty() { String::new() } else { format!(" at index {path:?}") }
}

fn pred_value(t: &Tt<'_>) -> R<bool> {
    match t {
        Tt::Tok(Tok::Ident("true"), _) | Tt::Tok(Tok::Int("1"), _) => Ok(true),
        Tt::Tok(Tok::Ident("false"), _) | Tt::Tok(Tok::Int("0"), _) => Ok(false),
        t => {
            Err(Diagnostic::error(t.span(), "expected a pred value (`true`, `false`, `1` or `0`)"))
        }
    }
}

fn int_value(t: &Tt<'_>, e: ElemType) -> R<i64> {
    let Tt::Tok(Tok::Int(s), sp) = t else {
        return Err(Diagnostic::error(
            t.span(),
            format!("expected an integer for a constant of type {e}"),
        ));
    };
    let v: i128 =
        s.parse().map_err(|_| Diagnostic::error(*sp, format!("integer `{s}` is too large")))?;
    let bits = e.bits();
    let (lo, hi): (i128, i128) = if e.class() == ElemClass::Signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    if v < lo || v > hi {
        return Err(Diagnostic::error(*sp, format!("constant {v} is out of range for {e}"))
            .with_label(format!("{e} holds {lo}..={hi}")));
    }
    Ok(v as u64 as i64)
}

fn float_value(t: &Tt<'_>, e: ElemType) -> R<f64> {
    let (text, sp) = match t {
        Tt::Tok(Tok::Int(s) | Tok::Float(s) | Tok::NonFinite(s) | Tok::Ident(s), sp) => (*s, *sp),
        t => {
            return Err(Diagnostic::error(
                t.span(),
                format!("expected a number for a constant of type {e}"),
            ));
        }
    };
    let neg = text.starts_with('-');
    let body = text.trim_start_matches('-');
    let v = match body {
        "inf" => f64::INFINITY,
        "nan" => f64::NAN,
        b if b.starts_with("nan(0x") => {
            let written = u64::from_str_radix(&b[6..b.len() - 1], 16).unwrap_or(u64::MAX);
            // The payload must fit the type's mantissa; the f8/f4 types without an
            // infinity (`fn`, `fnuz`, `fnu`) have one NaN and no payload (as XLA says).
            let mantissa: u32 = match e {
                ElemType::F64 => 52,
                ElemType::F32 => 23,
                ElemType::F16 => 10,
                ElemType::BF16 => 7,
                ElemType::F8E5M2 => 2,
                ElemType::F8E4M3 => 3,
                ElemType::F8E3M4 => 4,
                _ => 0,
            };
            if mantissa == 0 {
                return Err(Diagnostic::error(sp, format!("{e} has no NaN payloads"))
                    .with_label("write `nan`"));
            }
            if written >= 1u64 << mantissa {
                return Err(Diagnostic::error(
                    sp,
                    format!(
                        "NaN payload `{}` does not fit {e} ({mantissa} mantissa bits)",
                        &b[4..b.len() - 1]
                    ),
                )
                .with_label("payload out of range"));
            }
            // Kept in the low bits of an f64 NaN, so that it prints back as written.
            let payload = written;
            if payload == 0 {
                return Err(Diagnostic::error(sp, "NaN payload must be non-zero"));
            }
            f64::from_bits(0x7ff0_0000_0000_0000 | payload)
        }
        // An integer token is an integer converted to the type, as XLA reads it: `-0` is +0.
        _ if matches!(t, Tt::Tok(Tok::Int(_), _)) && body.bytes().all(|b| b == b'0') => 0.0,
        _ => text.parse::<f64>().map_err(|_| {
            Diagnostic::error(
                sp,
                format!("expected a number for a constant of type {e}, found `{text}`"),
            )
        })?,
    };
    if v.is_infinite() && body != "inf" {
        // A written number past f64's range (`1e999`): XLA refuses it for every type.
        return Err(Diagnostic::error(sp, format!("constant `{text}` is out of range for {e}"))
            .with_label("beyond the largest finite f64 (1.79769e+308): write `inf` for infinity"));
    }
    let v = if neg && (v.is_nan() || v.is_infinite()) { -v } else { v };
    if v.is_nan() {
        return Ok(v);
    }
    let narrowed = match e {
        ElemType::F32 => v as f32 as f64,
        ElemType::BF16 => half::bf16::from_f64(v).to_f64(),
        ElemType::F16 => half::f16::from_f64(v).to_f64(),
        _ => v,
    };
    if v.is_finite() && narrowed.is_infinite() {
        return Err(Diagnostic::error(sp, format!("constant `{text}` is out of range for {e}"))
            .with_label("larger than the type's largest finite value"));
    }
    Ok(narrowed)
}

/// Checks a tuple literal written whole (`literal=(f32[] 1, (s32[2]{0} {3, 4}))`): every
/// element a shape and a literal of that shape, or a nested tuple. `span` covers the
/// parentheses (leading blanks allowed).
pub(super) fn check_tuple_literal(src: &str, span: Span) -> R<()> {
    let text = &src[span.range()];
    let open = span.start as usize + (text.len() - text.trim_start().len());
    let close = span.end as usize - 1;
    // Top-level elements, cut at commas outside brackets and strings.
    let b = src.as_bytes();
    let (mut depth, mut in_str, mut from) = (0i32, false, open + 1);
    let mut elems: Vec<(usize, usize)> = Vec::new();
    let mut i = open + 1;
    while i < close {
        match (b[i], in_str) {
            (b'\\', true) => i += 1,
            (b'"', _) => in_str = !in_str,
            (b'(' | b'[' | b'{', false) => depth += 1,
            (b')' | b']' | b'}', false) => depth -= 1,
            (b',', false) if depth == 0 => {
                elems.push((from, i));
                from = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if !src[from..close].trim().is_empty() || !elems.is_empty() {
        elems.push((from, close));
    }
    for (s, e) in elems {
        let lead = src[s..e].len() - src[s..e].trim_start().len();
        let s = s + lead;
        if s >= e {
            return Err(Diagnostic::error(
                Span::new(s.min(close), e.max(s.min(close) + 1)),
                "empty element in a tuple literal",
            ));
        }
        if b[s] == b'(' {
            let end = s + lexer::balanced(&src[s..e], b'(', b')').ok_or_else(|| {
                Diagnostic::error(Span::new(s, s + 1), "unclosed `(` in a tuple literal")
            })?;
            check_tuple_literal(src, Span::new(s, end))?;
            if !src[end..e].trim().is_empty() {
                return Err(Diagnostic::error(
                    Span::new(end, e),
                    "unexpected text after a nested tuple literal",
                ));
            }
            continue;
        }
        let (shape, tt) = syntax::literal_elem(src, s, e)?;
        literal(&tt, &shape)?;
    }
    Ok(())
}
