//! The collectives a (partitioned) module executes per step: kind, count and bytes per
//! device, to set beside XLA's own partitioned program. Bytes are each device's buffer:
//! the operands of an all-reduce, reduce-scatter, all-to-all or collective-permute and
//! the result of an all-gather (the data a ring moves is proportional to it). A variadic
//! (combined) collective counts once with all its operands. Collectives inside loop
//! bodies count once per occurrence in the text.

use hlo_ir::{Module, Op, Opcode, Shape};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub kind: &'static str,
    pub count: usize,
    pub bytes: u64,
}

/// Bytes of every array in `s` at its element width.
pub fn array_bytes(s: &Shape) -> u64 {
    let mut total = 0u64;
    s.for_each_array(&mut |a| {
        let n: u64 = a.dims.iter().map(|d| d.bound().unwrap_or(0)).product();
        total += n * (a.elem.bits() as u64).div_ceil(8);
    });
    total
}

/// The collective kind of `op` (`-start` forms count as their collective; `-done` does
/// not count).
pub fn kind(op: &Op) -> Option<&'static str> {
    let Op::Collective { opcode, .. } = op else { return None };
    Some(match opcode {
        Opcode::AllReduce | Opcode::AllReduceStart => "all-reduce",
        Opcode::AllGather | Opcode::AllGatherStart => "all-gather",
        Opcode::ReduceScatter => "reduce-scatter",
        Opcode::AllToAll => "all-to-all",
        Opcode::CollectivePermute | Opcode::CollectivePermuteStart => "collective-permute",
        Opcode::CollectiveBroadcast => "collective-broadcast",
        _ => return None,
    })
}

/// Every kind of collective in `m` with its count and bytes per device, sorted by kind.
pub fn inventory(m: &Module) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::new();
    for c in m.comps() {
        for n in c.nodes() {
            let ins = c.instr(n);
            let Some(k) = kind(&ins.op) else { continue };
            let b = if k == "all-gather" {
                array_bytes(&ins.shape)
            } else {
                c.operands(n).iter().map(|&o| array_bytes(&c.instr(o).shape)).sum()
            };
            match out.iter_mut().find(|i| i.kind == k) {
                Some(i) => {
                    i.count += 1;
                    i.bytes += b;
                }
                None => out.push(Item { kind: k, count: 1, bytes: b }),
            }
        }
    }
    out.sort_by_key(|i| i.kind);
    out
}

/// `3 all-reduce (1.2 KiB), 1 all-gather (256 B)`.
pub fn describe(items: &[Item]) -> String {
    if items.is_empty() {
        return "no collectives".into();
    }
    items
        .iter()
        .map(|i| format!("{} {} ({} B)", i.count, i.kind, i.bytes))
        .collect::<Vec<_>>()
        .join(", ")
}
