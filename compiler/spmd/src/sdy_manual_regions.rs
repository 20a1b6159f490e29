//! `sdy-manual-regions`: a `shard_map` exported by JAX with Shardy (its default) becomes
//! the GSPMD manual region the partitioner reads (`crate::partition`).
//!
//! Shardy writes a manual computation's borders as `xla.sdy.GlobalToLocalShape` and
//! `xla.sdy.LocalToGlobalShape` custom-calls over all the region's operands (results),
//! with their shardings in Shardy's syntax in frontend attributes
//! (`xla.sdy.in_shardings="#sdy.sharding_per_value<[<@mesh, [{\"x\"}, {}]>, ...]>"`,
//! `xla.sdy.out_shardings`, `xla.sdy.manual_axes="#sdy<manual_axes{\"x\"}>"`) on the
//! meshes of the module's `xla.sdy.meshes` (`mesh = #sdy.mesh<["x"=4, "y"=2]>`). Each
//! operand becomes `Sharding` (its sharding as GSPMD writes it: `Mesh::sharding`) then
//! `SPMDFullToShardShape` (manual); each result `Sharding` (manual) then
//! `SPMDShardToFullShape`, as JAX writes a shard_map with GSPMD shardings. The body (a
//! call) is left to `inline-calls`. Supported: regions manual over every mesh axis, on
//! meshes of devices `0..N` in order, dimensions split by whole axes; anything else is a
//! located error naming what is not.

use hlo_ir::{Diagnostic, Instr, Module, NodeIndex, Op, Shape};

use crate::sharding::{Mesh, Spec};
use hlo_pipeline::{Pass, PassContext};

pub struct SdyManualRegions;

const INTO: &str = "xla.sdy.GlobalToLocalShape";
const OUT_OF: &str = "xla.sdy.LocalToGlobalShape";

impl Pass for SdyManualRegions {
    fn name(&self) -> &'static str {
        "sdy-manual-regions"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let mut changed = false;
        let meshes = m.header.frontend_attributes.as_deref().map(meshes).unwrap_or_default();
        for id in m.comp_ids().collect::<Vec<_>>() {
            let targets: Vec<NodeIndex> = {
                let c = m.comp(id);
                c.post_order()
                    .into_iter()
                    .filter(|&n| {
                        matches!(&c.instr(n).op, Op::CustomCall(cc) if cc.target == INTO || cc.target == OUT_OF)
                    })
                    .collect()
            };
            for n in targets {
                let c = m.comp_mut(id);
                rewrite(c, n, &meshes)?;
                changed = true;
            }
        }
        Ok(changed)
    }
}

/// `xla.sdy.meshes` of a module's frontend attributes: each `name = #sdy.mesh<[...]>`.
fn meshes(attrs: &str) -> Vec<(String, Result<Mesh, String>)> {
    let text = unescape(attrs);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("#sdy.mesh<") {
        let before = rest[..at].trim_end().trim_end_matches('=').trim_end();
        let name: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let body_start = at + "#sdy.mesh<".len();
        let Some(len) = rest[body_start..].find('>') else { break };
        let body = &rest[body_start..body_start + len];
        out.push((name, mesh(body)));
        rest = &rest[body_start + len..];
    }
    out
}

/// `["x"=4, "y"=2]` (devices 0..N in order); a `device_ids=` list is refused.
fn mesh(body: &str) -> Result<Mesh, String> {
    if body.contains("device_ids") {
        return Err(format!("a mesh with its own device order (`{body}`)"));
    }
    let inner = body.trim().trim_start_matches('[').trim_end_matches(']');
    let mut axes = Vec::new();
    for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, size) = part
            .split_once('=')
            .ok_or_else(|| format!("mesh axis `{part}` is not \"NAME\"=SIZE"))?;
        let size: i64 =
            size.trim().parse().map_err(|_| format!("mesh axis `{part}`: size is not a number"))?;
        axes.push((name.trim().trim_matches('"').to_string(), size));
    }
    if axes.is_empty() {
        return Err("a mesh without axes".into());
    }
    Ok(Mesh { axes })
}

/// `\"` as `"` and `\\` as `\` (frontend attribute values are escaped strings).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\'
            && let Some(n) = chars.next()
        {
            out.push(n);
            continue;
        }
        out.push(c);
    }
    out
}

/// The value of frontend attribute `key` (unescaped), from the verbatim `{...}`.
fn attribute(attrs: &str, key: &str) -> Option<String> {
    let at = attrs.find(&format!("{key}=\""))? + key.len() + 2;
    let bytes = attrs.as_bytes();
    let mut end = at;
    while end < bytes.len() && bytes[end] != b'"' {
        end += if bytes[end] == b'\\' { 2 } else { 1 };
    }
    Some(unescape(&attrs[at..end.min(attrs.len())]))
}

/// The shardings of `#sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>, ...]>` (or one
/// `#sdy.sharding<...>`), as GSPMD specs, each with the mesh it names.
fn shardings<'m>(
    text: &str,
    meshes: &'m [(String, Result<Mesh, String>)],
) -> Result<Vec<(Spec, &'m Mesh)>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("<@") {
        let after = &rest[at + 2..];
        let name_end = after.find(',').ok_or("a sharding without dimensions")?;
        let name = after[..name_end].trim();
        let mesh = match meshes.iter().find(|(n, _)| n == name) {
            Some((_, Ok(m))) => m,
            Some((_, Err(e))) => return Err(format!("mesh `{name}`: {e}")),
            None => return Err(format!("no mesh `{name}` in the module's `xla.sdy.meshes`")),
        };
        let dims_start = after.find('[').ok_or("a sharding without dimensions")?;
        let dims_end = after[dims_start..].find(']').ok_or("unclosed dimensions")? + dims_start;
        let mut dims = Vec::new();
        let mut d = &after[dims_start + 1..dims_end];
        while let Some(open) = d.find('{') {
            let close = d[open..].find('}').ok_or("unclosed dimension")? + open;
            let mut axes = Vec::new();
            for a in d[open + 1..close].split(',').map(str::trim).filter(|a| !a.is_empty()) {
                if a == "?" {
                    continue;
                }
                if a.contains(':') {
                    return Err(format!("a sub-axis `{a}`"));
                }
                let a = a.trim_matches('"');
                let k = mesh
                    .axes
                    .iter()
                    .position(|(n, _)| n == a)
                    .ok_or_else(|| format!("no axis `{a}` in mesh `{name}`"))?;
                axes.push(k);
            }
            dims.push(axes);
            d = &d[close + 1..];
        }
        out.push((mesh.sharding(&dims), mesh));
        let close = after.find('>').ok_or("unclosed sharding")?;
        rest = &after[close + 1..];
    }
    Ok(out)
}

fn custom_call(target: &str, shape: Shape, spec: &Spec) -> Instr {
    let mut i = Instr::new(
        format!("{}.sdy", target.rsplit('.').next().unwrap_or(target)),
        Op::CustomCall(Box::new(hlo_ir::op::CustomCall {
            target: target.to_string(),
            ..Default::default()
        })),
        shape,
    );
    i.sharding = Some(Box::new(spec.to_ir()));
    i
}

fn rewrite(
    c: &mut hlo_ir::Computation,
    n: NodeIndex,
    meshes: &[(String, Result<Mesh, String>)],
) -> Result<(), Diagnostic> {
    let ins = c.instr(n).clone();
    let at = |msg: String| Diagnostic::error(ins.span, msg);
    let Op::CustomCall(cc) = &ins.op else { return Ok(()) };
    let into = cc.target == INTO;
    let attrs = ins.extras.as_ref().and_then(|e| e.frontend_attributes.clone()).unwrap_or_default();
    let key = if into { "xla.sdy.in_shardings" } else { "xla.sdy.out_shardings" };
    let text = attribute(&attrs, key)
        .ok_or_else(|| at(format!("`{}` without its `{key}` frontend attribute", cc.target)))?;
    let specs = shardings(&text, meshes).map_err(|e| at(format!("`{key}`: {e}")))?;
    // Manual over every axis of the mesh: partially manual regions are not supported.
    let manual = attribute(&attrs, "xla.sdy.manual_axes").unwrap_or_default();
    let named: Vec<&str> = manual
        .split(['{', '}', ','])
        .map(|s| s.trim().trim_matches('"'))
        .filter(|s| !s.is_empty() && !s.contains('<') && !s.contains('>'))
        .collect();
    if specs.iter().any(|(_, mesh)| mesh.axes.iter().any(|(a, _)| !named.contains(&a.as_str()))) {
        return Err(at(format!(
            "a shard_map manual over only some mesh axes ({manual}) is not supported: write it manual over all of them"
        )));
    }
    let operands = c.operands(n);
    let leaves: Vec<Shape> = match &ins.shape {
        Shape::Tuple(items) => items.clone(),
        other => vec![other.clone()],
    };
    if specs.len() != operands.len() || leaves.len() != operands.len() {
        return Err(at(format!(
            "{} operands, {} results and {} shardings",
            operands.len(),
            leaves.len(),
            specs.len()
        )));
    }
    let mut nodes = Vec::with_capacity(operands.len());
    for ((&o, leaf), (spec, _)) in operands.iter().zip(&leaves).zip(&specs) {
        let oshape = c.instr(o).shape.clone();
        let node = if into {
            let s = c.add(custom_call("Sharding", oshape, spec), &[o]);
            c.add(custom_call("SPMDFullToShardShape", leaf.clone(), &Spec::Manual), &[s])
        } else {
            let s = c.add(custom_call("Sharding", oshape, &Spec::Manual), &[o]);
            c.add(custom_call("SPMDShardToFullShape", leaf.clone(), spec), &[s])
        };
        nodes.push(node);
    }
    let new = if ins.shape.is_tuple() {
        c.add(
            Instr::new(ins.name.clone(), Op::Plain(hlo_ir::Opcode::Tuple), ins.shape.clone()),
            &nodes,
        )
    } else {
        nodes[0]
    };
    c.replace_all_uses(n, new);
    if c.root() == Some(n) {
        c.set_root(new);
    }
    c.remove(n).map_err(|e| at(format!("cannot remove `{}`: {e:?}", ins.name)))?;
    Ok(())
}
