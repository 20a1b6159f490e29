//! Readers that type attribute values (token trees) into IR values, with located errors.

use super::ast::Tt;
use super::lexer::Tok;
use crate::diag::{Diagnostic, Span};
use crate::instr::{MetaValue, Metadata};
use crate::op::{Alias, ConvDims, PadDim, ReplicaGroups, SliceRange, Window, WindowDim};
use crate::sharding::{
    IotaList, ShardGroup, Sharding, ShardingKind, SingleSharding, SubgroupKind, TileAssignment,
};

pub type R<T> = Result<T, Diagnostic>;

pub fn span_of(tts: &[Tt<'_>]) -> Span {
    match (tts.first(), tts.last()) {
        (Some(a), Some(b)) => a.span().to(b.span()),
        _ => Span::default(),
    }
}

fn bad(span: Span, what: &str) -> Diagnostic {
    Diagnostic::error(span, format!("expected {what}")).with_label(format!("not {what}"))
}

/// The value must be exactly one token tree.
pub fn one<'a, 'b>(tts: &'b [Tt<'a>], what: &str) -> R<&'b Tt<'a>> {
    match tts {
        [t] => Ok(t),
        _ => Err(bad(span_of(tts), what)),
    }
}

pub fn int_tok(s: &str, span: Span) -> R<i64> {
    s.parse::<i64>()
        .map_err(|_| Diagnostic::error(span, format!("integer `{s}` does not fit in 64 bits")))
}

pub fn int(tts: &[Tt<'_>]) -> R<i64> {
    match one(tts, "an integer")? {
        Tt::Tok(Tok::Int(s), sp) => int_tok(s, *sp),
        t => Err(bad(t.span(), "an integer")),
    }
}

pub fn float(tts: &[Tt<'_>]) -> R<f64> {
    match one(tts, "a number")? {
        Tt::Tok(Tok::Int(s) | Tok::Float(s), sp) => {
            s.parse::<f64>().map_err(|_| bad(*sp, "a number"))
        }
        t => Err(bad(t.span(), "a number")),
    }
}

pub fn word<'a>(tts: &[Tt<'a>], what: &str) -> R<(&'a str, Span)> {
    match one(tts, what)? {
        Tt::Tok(Tok::Ident(s), sp) => Ok((s, *sp)),
        t => Err(bad(t.span(), what)),
    }
}

pub fn boolean(tts: &[Tt<'_>]) -> R<bool> {
    match word(tts, "`true` or `false`")? {
        ("true", _) => Ok(true),
        ("false", _) => Ok(false),
        (_, sp) => Err(bad(sp, "`true` or `false`")),
    }
}

/// One of a fixed set of spellings.
pub fn keyword<T: Copy>(tts: &[Tt<'_>], table: &[(T, &str)], what: &str) -> R<T> {
    let (w, sp) = word(tts, what)?;
    table.iter().find(|(_, n)| *n == w).map(|(t, _)| *t).ok_or_else(|| {
        let names: Vec<&str> = table.iter().map(|(_, n)| *n).collect();
        Diagnostic::error(sp, format!("unknown {what} `{w}`"))
            .with_help(format!("expected one of {}", names.join(", ")))
    })
}

/// Removes the quotes and processes C escapes.
pub fn unquote(s: &str) -> String {
    let inner = &s[1..s.len().saturating_sub(1).max(1)];
    if !inner.contains('\\') {
        return inner.to_string();
    }
    let mut out = String::with_capacity(inner.len());
    let mut bytes: Vec<u8> = Vec::with_capacity(inner.len());
    let b = inner.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            i += 1;
            match b[i] {
                b'n' => bytes.push(b'\n'),
                b't' => bytes.push(b'\t'),
                b'r' => bytes.push(b'\r'),
                b'x' => {
                    let hex: String = inner[i + 1..]
                        .chars()
                        .take_while(|c| c.is_ascii_hexdigit())
                        .take(2)
                        .collect();
                    bytes.push(u8::from_str_radix(&hex, 16).unwrap_or(b'?'));
                    i += hex.len();
                }
                c @ b'0'..=b'7' => {
                    let oct: String = inner[i..]
                        .chars()
                        .take_while(|c| ('0'..='7').contains(c))
                        .take(3)
                        .collect();
                    bytes.push(u8::from_str_radix(&oct, 8).unwrap_or(c));
                    i += oct.len() - 1;
                }
                c => bytes.push(c),
            }
        } else {
            bytes.push(b[i]);
        }
        i += 1;
    }
    out.push_str(&String::from_utf8_lossy(&bytes));
    out
}

pub fn string(tts: &[Tt<'_>]) -> R<String> {
    match one(tts, "a string")? {
        Tt::Tok(Tok::Str(s), _) => Ok(unquote(s)),
        t => Err(bad(t.span(), "a string")),
    }
}

/// Items of a group with the given opener, commas removed.
pub fn group_items<'b, 'a>(t: &'b Tt<'a>, open: Tok<'static>, what: &str) -> R<Vec<&'b Tt<'a>>> {
    match t {
        Tt::Group { open: o, items, .. }
            if *o == open || (open == Tok::LBrace && *o == Tok::LayoutOpen) =>
        {
            Ok(items.iter().filter(|t| !matches!(t, Tt::Tok(Tok::Comma, _))).collect())
        }
        t => Err(bad(t.span(), what)),
    }
}

fn int_item(t: &Tt<'_>) -> R<i64> {
    int(std::slice::from_ref(t))
}

/// `{1,2,3}`.
pub fn int_list(tts: &[Tt<'_>]) -> R<Vec<i64>> {
    group_items(one(tts, "a list like `{0,1}`")?, Tok::LBrace, "a list like `{0,1}`")?
        .into_iter()
        .map(int_item)
        .collect()
}

/// `[1,2,3]`.
fn bracket_ints(t: &Tt<'_>) -> R<Vec<i64>> {
    group_items(t, Tok::LBracket, "a list like `[2,4]`")?.into_iter().map(int_item).collect()
}

/// `{{0,1},{2,3}}`.
pub fn int_list_list(tts: &[Tt<'_>]) -> R<Vec<Vec<i64>>> {
    group_items(
        one(tts, "a list of lists like `{{0,1},{2,3}}`")?,
        Tok::LBrace,
        "a list of lists like `{{0,1},{2,3}}`",
    )?
    .into_iter()
    .map(|g| {
        group_items(g, Tok::LBrace, "a list like `{0,1}`")?.into_iter().map(int_item).collect()
    })
    .collect()
}

pub fn bool_list(tts: &[Tt<'_>]) -> R<Vec<bool>> {
    if let [Tt::Tok(Tok::Ident(_), _)] = tts {
        return Ok(vec![boolean(tts)?]);
    }
    group_items(one(tts, "a list like `{true,false}`")?, Tok::LBrace, "a list like `{true,false}`")?
        .into_iter()
        .map(|t| boolean(std::slice::from_ref(t)))
        .collect()
}

/// `[d..]<=[r..]` optionally followed by `T(p..)`, starting at `tts[0]`; returns the list
/// and how many token trees it used.
pub fn iota_list(tts: &[Tt<'_>]) -> R<(IotaList, usize)> {
    let sp = span_of(tts);
    let (Some(d), Some(Tt::Tok(Tok::Le, _)), Some(r)) = (tts.first(), tts.get(1), tts.get(2))
    else {
        return Err(bad(sp, "an iota device list like `[4,2]<=[8]`"));
    };
    let dims = bracket_ints(d)?;
    let reshape = bracket_ints(r)?;
    let mut used = 3;
    let mut transpose = Vec::new();
    if let (Some(Tt::Tok(Tok::Ident("T"), _)), Some(p)) = (tts.get(3), tts.get(4)) {
        transpose = group_items(p, Tok::LParen, "a permutation like `(1,0)`")?
            .into_iter()
            .map(int_item)
            .collect::<R<_>>()?;
        used = 5;
    }
    let list = IotaList { dims, reshape, transpose };
    check_iota(&list, span_of(&tts[..used]))?;
    Ok((list, used))
}

fn check_iota(l: &IotaList, span: Span) -> R<()> {
    let prod =
        |v: &[i64]| v.iter().try_fold(1i64, |a, &x| if x < 0 { None } else { a.checked_mul(x) });
    let (Some(pd), Some(pr)) = (prod(&l.dims), prod(&l.reshape)) else {
        return Err(Diagnostic::error(span, "invalid iota device list")
            .with_label("sizes must be non-negative and small"));
    };
    if pd != pr {
        return Err(Diagnostic::error(
            span,
            format!("iota device list has {pr} devices but its shape needs {pd}"),
        )
        .with_label(format!(
            "[{}] holds {pd} devices, [{}] makes {pr}",
            crate::sharding::join(&l.dims),
            crate::sharding::join(&l.reshape)
        ))
        .with_help("the products of the two bracketed lists must be equal"));
    }
    if !l.transpose.is_empty() {
        let mut seen = vec![false; l.reshape.len()];
        let ok = l.transpose.len() == l.reshape.len()
            && l.transpose.iter().all(|&p| {
                p >= 0
                    && (p as usize) < seen.len()
                    && !std::mem::replace(&mut seen[p as usize], true)
            });
        if !ok {
            return Err(Diagnostic::error(
                span,
                "iota transpose is not a permutation of the reshape dimensions",
            )
            .with_help(format!("T(...) must list each of 0..{} exactly once", l.reshape.len())));
        }
    }
    Ok(())
}

/// `mesh['a'=4,'b'=2] {'a'}`: the mesh's axes and the axes each group runs along.
pub fn mesh_groups(axes: &Tt<'_>, selection: &Tt<'_>, src: &str) -> R<ReplicaGroups> {
    let what = "mesh axes like `['a'=4,'b'=2]`";
    let items = group_items(axes, Tok::LBracket, what)?;
    let mut out = Vec::new();
    for chunk in items.chunks(3) {
        match chunk {
            [Tt::Tok(Tok::SqStr(n), _), Tt::Tok(Tok::Eq, _), size] => {
                out.push((n[1..n.len() - 1].to_string(), int_item(size)?))
            }
            _ => return Err(bad(axes.span(), what)),
        }
    }
    let selection = mesh_selection(&out, selection, src)?;
    Ok(ReplicaGroups::Mesh { axes: out, selection, device_ids: None })
}

/// The axis selection `{'a', 'b':(2)2}` of a mesh with `axes`, as XLA's parser reads it:
/// each axis named, or given by its index (`'0'`); a sub-axis `:(pre)size` takes `size`
/// devices `pre` apart, within the axis. Returned as written, but with the axes given by
/// index named (as XLA prints them).
fn mesh_selection(axes: &[(String, i64)], sel: &Tt<'_>, src: &str) -> R<String> {
    let what = "an axis selection like `{'a'}`";
    let Tt::Group { open: Tok::LBrace | Tok::LayoutOpen, items, span } = sel else {
        return Err(bad(sel.span(), what));
    };
    let mesh = || {
        let a: Vec<String> = axes.iter().map(|(n, s)| format!("'{n}'={s}")).collect();
        format!("mesh[{}]", a.join(","))
    };
    let names = || {
        let n: Vec<String> = axes.iter().map(|(n, _)| format!("'{n}'")).collect();
        n.join(", ")
    };
    let mut text = String::new();
    let mut from = span.start as usize;
    for item in comma_items(items) {
        let (Some(Tt::Tok(Tok::SqStr(quoted), sp)), rest) = (item.first(), item.get(1..)) else {
            let sp = if item.is_empty() { *span } else { span_of(item) };
            return Err(bad(sp, "a mesh axis like `'a'`"));
        };
        let name = &quoted[1..quoted.len() - 1];
        let index = match axes.iter().position(|(n, _)| n == name) {
            Some(k) => k,
            None => {
                let Ok(k) = name.parse::<i64>() else {
                    return Err(Diagnostic::error(
                        *sp,
                        format!("axis '{name}' is not a valid axis name or index in {}", mesh()),
                    )
                    .with_label("no axis of the mesh has this name")
                    .with_help(format!("the mesh's axes are {}", names())));
                };
                if k < 0 || k as usize >= axes.len() {
                    return Err(Diagnostic::error(
                        *sp,
                        format!(
                            "axis index {k} is out of bounds for {} which has {} axes",
                            mesh(),
                            axes.len()
                        ),
                    )
                    .with_label(format!("an index in 0..{}", axes.len()))
                    .with_help(format!("the mesh's axes are {}", names())));
                }
                // Named, as XLA prints it.
                text.push_str(&src[from..sp.start as usize]);
                text.push_str(&format!("'{}'", axes[k as usize].0));
                from = sp.end as usize;
                k as usize
            }
        };
        match rest.unwrap_or_default() {
            [] => {}
            [Tt::Tok(Tok::Colon, _), Tt::Group { open: Tok::LParen, items: pre, .. }, size] => {
                let sub = span_of(&item[1..]);
                let (pre, size) = (int_item(one(pre, "a pre-size")?)?, int_item(size)?);
                let full = axes[index].1;
                if pre < 1 || size < 1 || full % (pre * size) != 0 {
                    return Err(Diagnostic::error(
                        sub,
                        format!(
                            "sub-axis :({pre}){size} does not divide axis '{}' of size {full}",
                            axes[index].0
                        ),
                    )
                    .with_help(
                        "a sub-axis `:(pre)size` needs pre-size times size to divide the axis size",
                    ));
                }
                if size >= full {
                    return Err(Diagnostic::error(
                        sub,
                        format!(
                            "sub-axis size {size} is not less than the size {full} of axis '{}'",
                            axes[index].0
                        ),
                    )
                    .with_help("name the whole axis instead"));
                }
            }
            _ => return Err(bad(span_of(item), "a mesh axis like `'a'` or `'a':(2)2`")),
        }
    }
    text.push_str(&src[from..span.end as usize]);
    Ok(text)
}

pub fn replica_groups(tts: &[Tt<'_>], src: &str) -> R<ReplicaGroups> {
    if let [Tt::Tok(Tok::Ident("mesh"), _), axes, sel] = tts {
        return mesh_groups(axes, sel, src);
    }
    if matches!(tts.first(), Some(Tt::Group { open: Tok::LBracket, .. })) {
        let (l, used) = iota_list(tts)?;
        if used != tts.len() {
            return Err(bad(span_of(&tts[used..]), "the end of the replica groups"));
        }
        if l.dims.len() != 2 {
            return Err(Diagnostic::error(
                span_of(tts),
                "iota replica groups must be 2-D `[groups,size]<=[...]`",
            ));
        }
        return Ok(ReplicaGroups::Iota(l));
    }
    Ok(ReplicaGroups::Explicit(int_list_list(tts)?))
}

/// A mesh's device list: the dims an iota is reshaped to, and its transpose.
pub type MeshDeviceIds = (Vec<i64>, Vec<i64>);

/// The `device_ids=([4,2]T(1,0)) {'a'}` that follows a `replica_groups=mesh[...]` (XLA
/// prints it as an attribute of its own): the device list (reshape dims, transpose) and
/// the axis selection.
pub fn mesh_device_ids<'a>(tts: &[Tt<'a>]) -> R<(MeshDeviceIds, Tt<'a>)> {
    let what = "mesh device ids like `([4,2]T(1,0)) {'a'}`";
    let [Tt::Group { open: Tok::LParen, items, .. }, sel] = tts else {
        return Err(bad(span_of(tts), what));
    };
    let (dims, perm) = match items.as_slice() {
        [d] => (d, None),
        [d, Tt::Tok(Tok::Ident("T"), _), p] => (d, Some(p)),
        _ => return Err(bad(span_of(tts), what)),
    };
    let dims: Vec<i64> =
        group_items(dims, Tok::LBracket, what)?.into_iter().map(int_item).collect::<R<_>>()?;
    let perm: Vec<i64> = match perm {
        Some(p) => {
            group_items(p, Tok::LParen, what)?.into_iter().map(int_item).collect::<R<_>>()?
        }
        None => vec![],
    };
    let ok_perm = perm.is_empty() || {
        let mut seen = vec![false; dims.len()];
        perm.len() == dims.len()
            && perm.iter().all(|&p| {
                p >= 0
                    && (p as usize) < seen.len()
                    && !std::mem::replace(&mut seen[p as usize], true)
            })
    };
    if dims.is_empty() || dims.iter().any(|&d| d <= 0) || !ok_perm {
        return Err(bad(span_of(tts), what));
    }
    Ok(((dims, perm), sel.clone()))
}

pub fn source_target_pairs(tts: &[Tt<'_>]) -> R<Vec<(i64, i64)>> {
    int_list_list(tts)?
        .into_iter()
        .map(|p| match p.as_slice() {
            [a, b] => Ok((*a, *b)),
            _ => Err(bad(span_of(tts), "pairs like `{{0,1},{1,0}}`")),
        })
        .collect()
}

/// `{[0:4], [2:8:2]}`.
pub fn slice_ranges(tts: &[Tt<'_>]) -> R<Vec<SliceRange>> {
    let what = "slice ranges like `{[0:4], [0:8:2]}`";
    group_items(one(tts, what)?, Tok::LBrace, what)?
        .into_iter()
        .map(|g| {
            let items = group_items(g, Tok::LBracket, "a range like `[0:4]`")?;
            let nums: Vec<&Tt<'_>> =
                items.iter().copied().filter(|t| !matches!(t, Tt::Tok(Tok::Colon, _))).collect();
            let colons = items.len() - nums.len();
            let v: Vec<i64> = nums.into_iter().map(int_item).collect::<R<_>>()?;
            match (v.as_slice(), colons) {
                ([s, l], 1) => Ok(SliceRange { start: *s, limit: *l, stride: 1 }),
                ([s, l, st], 2) => Ok(SliceRange { start: *s, limit: *l, stride: *st }),
                _ => Err(bad(g.span(), "a range like `[start:limit]` or `[start:limit:stride]`")),
            }
        })
        .collect()
}

/// `0_1x2_3_1`.
pub fn padding(tts: &[Tt<'_>]) -> R<Vec<PadDim>> {
    let t = one(tts, "a padding like `0_1x2_3`")?;
    let Tt::Tok(Tok::Pad(s), sp) = t else { return Err(bad(t.span(), "a padding like `0_1x2_3`")) };
    s.split('x')
        .map(|d| {
            let v: Vec<i64> = d.split('_').map(|x| int_tok(x, *sp)).collect::<R<_>>()?;
            match v.as_slice() {
                [lo, hi] => Ok(PadDim { lo: *lo, hi: *hi, interior: 0 }),
                [lo, hi, int] => Ok(PadDim { lo: *lo, hi: *hi, interior: *int }),
                _ => Err(bad(*sp, "`lo_hi` or `lo_hi_interior` per dimension")),
            }
        })
        .collect()
}

/// `3x3`, or a plain integer for one dimension.
fn dims_x(t: &Tt<'_>) -> R<Vec<i64>> {
    match t {
        Tt::Tok(Tok::DimsX(s), sp) => s.split('x').map(|x| int_tok(x, *sp)).collect(),
        Tt::Tok(Tok::Int(s), sp) => Ok(vec![int_tok(s, *sp)?]),
        t => Err(bad(t.span(), "sizes like `3x3`")),
    }
}

/// `{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 rhs_dilate=1x1 rhs_reversal=0x1}`.
pub fn window(tts: &[Tt<'_>]) -> R<Window> {
    let what = "a window like `{size=3x3 stride=2x2}`";
    let items = group_items(one(tts, what)?, Tok::LBrace, what)?;
    let mut dims: Vec<WindowDim> = Vec::new();
    let mut fields: Vec<(&str, Span, &Tt<'_>)> = Vec::new();
    let mut it = items.iter();
    while let Some(t) = it.next() {
        match t {
            Tt::Tok(Tok::AttrName(k), sp) => match it.next() {
                Some(v) => fields.push((k, *sp, v)),
                None => return Err(bad(*sp, "a value after the window field")),
            },
            t => return Err(bad(t.span(), "a window field like `size=3x3`")),
        }
    }
    let Some((_, _, size)) = fields.iter().find(|f| f.0 == "size") else {
        return Err(Diagnostic::error(span_of(tts), "window has no `size=`"));
    };
    for s in dims_x(size)? {
        dims.push(WindowDim { size: s, ..WindowDim::default() });
    }
    for (k, sp, v) in &fields {
        let n = dims.len();
        let vals: Vec<i64> = match *k {
            "size" => continue,
            "pad" => {
                let p = padding(std::slice::from_ref(*v))
                    .map_err(|_| bad(v.span(), "a padding like `1_1x1_1`"))?;
                // A window pads each side only: `lo_hi` (XLA's parser refuses an
                // interior part here).
                if let Tt::Tok(Tok::Pad(text), _) = v
                    && text.split('x').any(|d| d.split('_').count() != 2)
                {
                    return Err(Diagnostic::error(
                        v.span(),
                        "a window's `pad` takes `lo_hi` per dimension (no interior padding)",
                    )
                    .with_help("interior padding belongs to `pad` or to `lhs_dilate`"));
                }
                if p.len() != n {
                    return Err(Diagnostic::error(
                        v.span(),
                        format!("window pad has {} dimensions, size has {n}", p.len()),
                    ));
                }
                for (d, p) in dims.iter_mut().zip(p) {
                    d.pad_lo = p.lo;
                    d.pad_hi = p.hi;
                }
                continue;
            }
            "stride" | "lhs_dilate" | "rhs_dilate" | "rhs_reversal" => dims_x(v)?,
            other => {
                return Err(Diagnostic::error(*sp, format!("unknown window field `{other}`"))
                    .with_help(
                        "window fields are size, stride, pad, lhs_dilate, rhs_dilate, rhs_reversal",
                    ));
            }
        };
        if vals.len() != n {
            return Err(Diagnostic::error(
                v.span(),
                format!("window `{k}` has {} dimensions, size has {n}", vals.len()),
            ));
        }
        for (d, x) in dims.iter_mut().zip(vals) {
            match *k {
                "stride" => d.stride = x,
                "lhs_dilate" => d.lhs_dilate = x,
                "rhs_dilate" => d.rhs_dilate = x,
                _ => d.reversal = x != 0,
            }
        }
    }
    Ok(Window { dims })
}

/// `b01f_01io->b01f`.
pub fn dim_labels(tts: &[Tt<'_>]) -> R<ConvDims> {
    let t = one(tts, "dimension labels like `b01f_01io->b01f`")?;
    let Tt::Tok(Tok::DimLabels(s), sp) = t else {
        return Err(bad(t.span(), "dimension labels like `b01f_01io->b01f`"));
    };
    let err = |msg: String| {
        Diagnostic::error(*sp, msg).with_help("labels are `<input>_<kernel>-><output>`, e.g. `b01f_01io->b01f`: b batch, f feature, i/o kernel input/output feature, digits spatial dims")
    };
    let (lhs, out) = s.split_once("->").ok_or_else(|| err("missing `->`".into()))?;
    let (inp, ker) = lhs.split_once('_').ok_or_else(|| err("missing `_`".into()))?;
    let parse = |part: &str, a: char, b: char| -> R<(i64, i64, Vec<i64>)> {
        let (mut pa, mut pb) = (None, None);
        let mut spatial: Vec<Option<i64>> = vec![None; part.len().saturating_sub(2)];
        for (i, c) in part.chars().enumerate() {
            let i = i as i64;
            match c {
                c if c == a && pa.is_none() => pa = Some(i),
                c if c == b && pb.is_none() => pb = Some(i),
                '0'..='9' => {
                    let k = c as usize - '0' as usize;
                    match spatial.get_mut(k) {
                        Some(slot @ None) => *slot = Some(i),
                        _ => {
                            return Err(err(format!(
                                "spatial label `{c}` in `{part}` is repeated or out of range"
                            )));
                        }
                    }
                }
                _ => return Err(err(format!("unexpected label `{c}` in `{part}`"))),
            }
        }
        let (Some(pa), Some(pb)) = (pa, pb) else {
            return Err(err(format!("`{part}` must contain `{a}` and `{b}` once each")));
        };
        let spatial = spatial
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| err(format!("`{part}` skips a spatial dimension")))?;
        Ok((pa, pb, spatial))
    };
    let (ib, ifeat, is) = parse(inp, 'b', 'f')?;
    let (ki, ko, ks) = parse(ker, 'i', 'o')?;
    let (ob, of, os) = parse(out, 'b', 'f')?;
    if is.len() != ks.len() || is.len() != os.len() {
        return Err(err(
            "input, kernel and output have different numbers of spatial dimensions".into()
        ));
    }
    Ok(ConvDims {
        input_batch: ib,
        input_feature: ifeat,
        input_spatial: is,
        kernel_input_feature: ki,
        kernel_output_feature: ko,
        kernel_spatial: ks,
        output_batch: ob,
        output_feature: of,
        output_spatial: os,
    })
}

/// `{ {0}: (1, {}, may-alias), ... }`.
pub fn aliasing(tts: &[Tt<'_>]) -> R<Vec<Alias>> {
    let what = "aliases like `{ {0}: (1, {}) }`";
    let items = group_items(one(tts, what)?, Tok::LBrace, what)?;
    let mut out = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let (Some(idx), Some(Tt::Tok(Tok::Colon, _)), Some(tuple)) =
            (items.get(i), items.get(i + 1), items.get(i + 2))
        else {
            return Err(bad(items[i].span(), "`{output_index}: (operand, {operand_index})`"));
        };
        let output_index = int_list(std::slice::from_ref(*idx))?;
        let parts = group_items(tuple, Tok::LParen, "`(operand, {index})`")?;
        let (operand, operand_index, kind) = match parts.as_slice() {
            [p, ix] => (int_item(p)?, int_list(std::slice::from_ref(*ix))?, None),
            [p, ix, k] => (
                int_item(p)?,
                int_list(std::slice::from_ref(*ix))?,
                Some(word(std::slice::from_ref(*k), "`may-alias` or `must-alias`")?.0.to_string()),
            ),
            _ => {
                return Err(bad(
                    tuple.span(),
                    "`(operand, {index})` or `(operand, {index}, may-alias)`",
                ));
            }
        };
        out.push(Alias { output_index, operand, operand_index, kind });
        i += 3;
    }
    Ok(out)
}

/// `{ (0, {}), (1, {0}) }`.
pub fn buffer_donors(tts: &[Tt<'_>]) -> R<Vec<(i64, Vec<i64>)>> {
    let what = "buffer donors like `{ (0, {}) }`";
    group_items(one(tts, what)?, Tok::LBrace, what)?
        .into_iter()
        .map(|t| match group_items(t, Tok::LParen, "`(param, {index})`")?.as_slice() {
            [p, ix] => Ok((int_item(p)?, int_list(std::slice::from_ref(*ix))?)),
            _ => Err(bad(t.span(), "`(param, {index})`")),
        })
        .collect()
}

/// The items of a group's token trees between commas (none for an empty group).
fn comma_items<'b, 'a>(items: &'b [Tt<'a>]) -> Vec<&'b [Tt<'a>]> {
    if items.is_empty() {
        return Vec::new();
    }
    items.split(|t| matches!(t, Tt::Tok(Tok::Comma, _))).collect()
}

/// Checks the module attribute `debug_attributes={ {"name" {index}}:({log_mode=default,
/// callback_id=1}), ... }` as XLA's parser reads it (newer XLA; the oracle's knows none):
/// entries of an original array, `:`, then one set of debug attributes in braces or a
/// parenthesized list of them. A set names at least one of `log_mode` (`default` or
/// `fusion_debugger`), `callback_id`, `op_id` (integers) and `partitioned` (a boolean).
pub fn debug_attributes(tts: &[Tt<'_>]) -> R<()> {
    let what = "a table like `{ {\"name\"}:({log_mode=default}) }`";
    let table = one(tts, what)?;
    let Tt::Group { open: Tok::LBrace, items, .. } = table else {
        return Err(bad(table.span(), what));
    };
    for entry in comma_items(items) {
        let [array, Tt::Tok(Tok::Colon, _), sets] = entry else {
            let sp = if entry.is_empty() { table.span() } else { span_of(entry) };
            return Err(bad(sp, "an entry like `{\"name\"}:({log_mode=default})`"));
        };
        original_array(array)?;
        match sets {
            Tt::Group { open: Tok::LParen, items, .. } => {
                for set in comma_items(items) {
                    debug_attribute_set(one(set, "debug attributes like `{log_mode=default}`")?)?;
                }
            }
            set => debug_attribute_set(set)?,
        }
    }
    Ok(())
}

/// `{"name"}`, `{"name" {0,1}}` or `{}`: an array of the original program.
fn original_array(t: &Tt<'_>) -> R<()> {
    let what = "an original array like `{\"name\"}` or `{\"name\" {0}}`";
    match group_items(t, Tok::LBrace, what)?.as_slice() {
        [] | [Tt::Tok(Tok::Str(_), _)] => Ok(()),
        [Tt::Tok(Tok::Str(_), _), index] => int_list(std::slice::from_ref(*index)).map(|_| ()),
        _ => Err(bad(t.span(), what)),
    }
}

/// `{log_mode=default,callback_id=123,partitioned=true,op_id=7}`: at least one.
fn debug_attribute_set(t: &Tt<'_>) -> R<()> {
    let what = "debug attributes like `{log_mode=default}`";
    let Tt::Group { open: Tok::LBrace, items, .. } = t else {
        return Err(bad(t.span(), what));
    };
    let attrs = comma_items(items);
    if attrs.is_empty() {
        return Err(Diagnostic::error(t.span(), "empty debug attributes")
            .with_label("expected at least one attribute")
            .with_help("debug attributes are log_mode, callback_id, partitioned and op_id"));
    }
    for a in attrs {
        let [Tt::Tok(Tok::AttrName(name), name_span), value] = a else {
            let sp = if a.is_empty() { t.span() } else { span_of(a) };
            return Err(bad(sp, "an attribute like `log_mode=default`"));
        };
        let value = std::slice::from_ref(value);
        match *name {
            "log_mode" => {
                let (mode, sp) = word(value, "a debug log mode")?;
                if !matches!(mode, "default" | "fusion_debugger") {
                    return Err(Diagnostic::error(sp, format!("invalid debug log mode `{mode}`"))
                        .with_label("not a log mode")
                        .with_help("log_mode is `default` or `fusion_debugger`"));
                }
            }
            "callback_id" | "op_id" => {
                int(value)?;
            }
            "partitioned" => {
                boolean(value)?;
            }
            other => {
                return Err(Diagnostic::error(
                    *name_span,
                    format!("unknown debug attribute `{other}`"),
                )
                .with_help("debug attributes are log_mode, callback_id, partitioned and op_id"));
            }
        }
    }
    Ok(())
}

/// `metadata={k="v" k2=3 ...}`.
pub fn metadata(t: &Tt<'_>, src: &str) -> R<Metadata> {
    let items = group_items(t, Tok::LBrace, "metadata like `{op_name=\"f\"}`")?;
    let mut fields = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let Tt::Tok(Tok::AttrName(k), sp) = items[i] else {
            return Err(bad(items[i].span(), "a metadata field like `op_name=\"...\"`"));
        };
        let Some(v) = items.get(i + 1) else {
            return Err(bad(*sp, "a value after the metadata field"));
        };
        let value = match v {
            Tt::Tok(Tok::Str(s), _) => MetaValue::Str(unquote(s)),
            Tt::Tok(Tok::Int(s), sp) => MetaValue::Int(int_tok(s, *sp)?),
            other => MetaValue::Raw(src[other.span().range()].to_string()),
        };
        let key = match crate::instr::META_KEYS.iter().find(|s| **s == *k) {
            Some(s) => std::borrow::Cow::Borrowed(*s),
            None => std::borrow::Cow::Owned(k.to_string()),
        };
        fields.push((key, value));
        i += 2;
    }
    Ok(Metadata { fields })
}

/// An instruction's `metadata={...}`, which the lexer reads whole (one raw token at
/// `start` in `src`, braces included): its tokens are read here straight into fields,
/// with no token trees, the same fields [`metadata`] gives for the same text.
pub fn metadata_raw(raw: &str, start: usize, src: &str) -> R<Metadata> {
    use super::lexer::Lexer;
    let end = start + raw.len();
    let whole = Span::new(start, end);
    let mut toks = Lexer::starting_in_body(&src[..end], start);
    let mut next = || -> R<Option<(usize, Tok<'_>, usize)>> {
        match toks.next() {
            None => Ok(None),
            Some(Ok(t)) => Ok(Some(t)),
            Some(Err(e)) => {
                Err(Diagnostic::error(e.span, "malformed metadata").with_label("not an HLO token"))
            }
        }
    };
    match next()? {
        Some((_, Tok::LBrace, _)) => {}
        _ => return Err(bad(whole, "metadata like `{op_name=\"f\"}`")),
    }
    let mut fields = Vec::new();
    loop {
        let (l, k, r) = match next()? {
            Some((_, Tok::RBrace, _)) => return Ok(Metadata { fields }),
            Some((l, Tok::AttrName(k), r)) => (l, k, r),
            Some((l, t, r)) if t != Tok::Comma => {
                return Err(bad(Span::new(l, r), "a metadata field like `op_name=\"...\"`"));
            }
            Some(_) => continue,
            None => return Err(bad(whole, "metadata like `{op_name=\"f\"}`")),
        };
        let value = match next()? {
            Some((_, Tok::Str(s), _)) => MetaValue::Str(unquote(s)),
            Some((vl, Tok::Int(s), vr)) => MetaValue::Int(int_tok(s, Span::new(vl, vr))?),
            Some((vl, t, vr)) if t.depth_delta() > 0 => {
                // A group value (`profile_type={...}`), kept as written.
                let mut depth = 1;
                let mut vend = vr;
                while depth > 0 {
                    let Some((_, t, r)) = next()? else {
                        return Err(bad(whole, "a closed metadata value"));
                    };
                    depth += t.depth_delta();
                    vend = r;
                }
                MetaValue::Raw(src[vl..vend].to_string())
            }
            Some((vl, t, vr)) if t.depth_delta() == 0 && t != Tok::Comma => {
                MetaValue::Raw(src[vl..vr].to_string())
            }
            _ => return Err(bad(Span::new(l, r), "a value after the metadata field")),
        };
        let key = match crate::instr::META_KEYS.iter().find(|s| **s == k) {
            Some(s) => std::borrow::Cow::Borrowed(*s),
            None => std::borrow::Cow::Owned(k.to_string()),
        };
        fields.push((key, value));
    }
}

/// `sharding={...}`.
pub fn sharding(tts: &[Tt<'_>], src: &str) -> R<Sharding> {
    let t = one(tts, "a sharding like `{replicated}`")?;
    let items = match t {
        Tt::Group { open: Tok::LBrace, items, .. } => items,
        t => return Err(bad(t.span(), "a sharding like `{replicated}`")),
    };
    let first = items.iter().find(|t| !matches!(t, Tt::Tok(Tok::Comma, _)));
    if first.is_none() || matches!(first, Some(Tt::Group { open: Tok::LBrace, .. })) {
        let leaves = group_items(t, Tok::LBrace, "a tuple sharding")?
            .into_iter()
            .map(|g| match g {
                Tt::Group { open: Tok::LBrace, items, span } => single_sharding(items, *span, src),
                g => Err(bad(g.span(), "a sharding like `{replicated}`")),
            })
            .collect::<R<_>>()?;
        return Ok(Sharding::Tuple(leaves));
    }
    Ok(Sharding::Single(single_sharding(items, t.span(), src)?))
}

fn single_sharding(items: &[Tt<'_>], span: Span, src: &str) -> R<SingleSharding> {
    let mut kind: Option<ShardingKind> = None;
    let mut ltdr = false;
    let mut last_tile_dims = Vec::new();
    let mut shard_group = None;
    let mut meta = Vec::new();
    let mut i = 0;
    let set = |kind: &mut Option<ShardingKind>, k: ShardingKind, sp: Span| {
        if kind.is_some() {
            Err(Diagnostic::error(sp, "sharding has two kinds")
                .with_help("use one of replicated, manual, maximal, devices=..."))
        } else {
            *kind = Some(k);
            Ok(())
        }
    };
    while i < items.len() {
        let t = &items[i];
        match t {
            Tt::Tok(Tok::Comma, _) => i += 1,
            Tt::Tok(Tok::Ident(w), sp) => {
                match *w {
                    "replicated" => set(&mut kind, ShardingKind::Replicated, *sp)?,
                    "manual" => set(&mut kind, ShardingKind::Manual, *sp)?,
                    "unknown" => set(&mut kind, ShardingKind::Unknown, *sp)?,
                    "unreduced" => set(&mut kind, ShardingKind::Unreduced, *sp)?,
                    "maximal" => {}
                    "last_tile_dim_replicate" => ltdr = true,
                    "shard_as" | "shard_like" => {
                        let n = items
                            .get(i + 1)
                            .map(int_item)
                            .transpose()?
                            .ok_or_else(|| bad(*sp, "a group number"))?;
                        shard_group = Some((
                            if *w == "shard_as" { ShardGroup::As } else { ShardGroup::Like },
                            n,
                        ));
                        i += 1;
                    }
                    other => {
                        return Err(Diagnostic::error(*sp, format!("unknown sharding keyword `{other}`")).with_help(
                            "shardings are {replicated}, {manual}, {maximal device=N}, {devices=[...]...} with optional last_tile_dim_replicate, last_tile_dims={...}, shard_as/shard_like N, metadata={...}",
                        ));
                    }
                }
                i += 1;
            }
            Tt::Tok(Tok::AttrName("device"), sp) => {
                let d = items
                    .get(i + 1)
                    .map(int_item)
                    .transpose()?
                    .ok_or_else(|| bad(*sp, "a device number"))?;
                set(&mut kind, ShardingKind::Maximal { device: d }, *sp)?;
                i += 2;
            }
            Tt::Tok(Tok::AttrName("devices"), sp) => {
                let rest = &items[i + 1..];
                let (tiles, used) = if matches!(rest.get(1), Some(Tt::Tok(Tok::Le, _))) {
                    let (l, used) = iota_list(rest)?;
                    (TileAssignment::Iota(l), used)
                } else {
                    let dims_t =
                        rest.first().ok_or_else(|| bad(*sp, "tile dimensions like `[2,1]`"))?;
                    let dims = bracket_ints(dims_t)?;
                    let mut devices = Vec::new();
                    let mut used = 1;
                    let mut expect_num = true;
                    while let Some(t) = rest.get(used) {
                        match (t, expect_num) {
                            (Tt::Tok(Tok::Int(_), _), true) => devices.push(int_item(t)?),
                            (Tt::Tok(Tok::Comma, _), false) => {
                                if !matches!(rest.get(used + 1), Some(Tt::Tok(Tok::Int(_), _))) {
                                    break;
                                }
                            }
                            _ => break,
                        }
                        expect_num = !expect_num;
                        used += 1;
                    }
                    let need: i64 = dims.iter().product();
                    let dspan = span_of(&rest[..used]);
                    if need != devices.len() as i64 {
                        return Err(Diagnostic::error(dspan, format!("sharding lists {} devices but its tile shape [{}] needs {need}", devices.len(), crate::sharding::join(&dims)))
                            .with_label("device count does not match the tile shape")
                            .with_help("list one device per tile (the product of the bracketed dims), e.g. `devices=[2,2]0,1,2,3`"));
                    }
                    // Each device at most once (XLA's parser: any distinct ids; whether
                    // they are the module's devices 0..N-1 is checked against
                    // `num_partitions`, or by the partitioner); point at the first offender.
                    let mut seen = std::collections::HashSet::new();
                    let items: Vec<&Tt<'_>> = rest[1..used]
                        .iter()
                        .filter(|t| !matches!(t, Tt::Tok(Tok::Comma, _)))
                        .collect();
                    for (k, &d) in devices.iter().enumerate() {
                        let at = items.get(k).map_or(dspan, |t| t.span());
                        if d < 0 {
                            return Err(Diagnostic::error(at, format!("device {d} is negative"))
                                .with_label("device ids count from 0"));
                        }
                        if !seen.insert(d) {
                            return Err(Diagnostic::error(
                                at,
                                format!("device {d} appears twice in the sharding"),
                            )
                            .with_label("each device holds exactly one tile"));
                        }
                    }
                    (TileAssignment::Explicit { dims, devices }, used)
                };
                set(
                    &mut kind,
                    ShardingKind::Tiled {
                        tiles,
                        last_tile_dim_replicate: false,
                        last_tile_dims: Vec::new(),
                    },
                    *sp,
                )?;
                i += 1 + used;
            }
            Tt::Tok(Tok::AttrName("last_tile_dims"), sp) => {
                let g =
                    items.get(i + 1).ok_or_else(|| bad(*sp, "`{manual}`-style subgroup kinds"))?;
                for k in group_items(g, Tok::LBrace, "subgroup kinds like `{manual}`")? {
                    last_tile_dims.push(keyword(
                        std::slice::from_ref(k),
                        &SubgroupKind::ALL,
                        "subgroup kind",
                    )?);
                }
                i += 2;
            }
            Tt::Tok(Tok::AttrName("metadata"), sp) => {
                let g = items.get(i + 1).ok_or_else(|| bad(*sp, "metadata"))?;
                let inner = group_items(g, Tok::LBrace, "metadata")?;
                if inner.first().is_some_and(|t| matches!(t, Tt::Group { .. })) {
                    for m in inner {
                        meta.push(metadata(m, src)?);
                    }
                } else {
                    meta.push(metadata(g, src)?);
                }
                i += 2;
            }
            t => {
                return Err(Diagnostic::error(t.span(), "unexpected item in sharding").with_help(
                    "shardings are {replicated}, {manual}, {maximal device=N}, {devices=[...]...} with optional last_tile_dim_replicate, last_tile_dims={...}, shard_as/shard_like N, metadata={...}",
                ));
            }
        }
    }
    let mut kind = kind.ok_or_else(|| {
        Diagnostic::error(span, "sharding has no kind")
            .with_help("write e.g. {replicated} or {devices=[2,1]0,1}")
    })?;
    if let ShardingKind::Tiled { tiles, last_tile_dim_replicate, last_tile_dims: ltd } = &mut kind {
        *last_tile_dim_replicate = ltdr;
        let extra = usize::from(ltdr) + last_tile_dims.len();
        if tiles.dims().len() < extra {
            return Err(Diagnostic::error(
                span,
                "sharding has more subgroup dimensions than tile dimensions",
            ));
        }
        *ltd = last_tile_dims;
    } else if ltdr || !last_tile_dims.is_empty() {
        return Err(Diagnostic::error(
            span,
            "`last_tile_dim_replicate`/`last_tile_dims` need a tiled sharding (`devices=...`)",
        ));
    }
    Ok(SingleSharding { kind, shard_group, metadata: meta })
}
