//! The test-case reducer: shrinks a module while a predicate still holds, the way
//! C-Reduce and XLA's `hlo-bisect` do.
//!
//! Candidates are edits of the current module, each kept only when the edited module
//! still passes the checks and the predicate still holds on it (greedy, to a fixpoint):
//! - the entry's root tuple cut down to one of its elements;
//! - an instruction replaced by a new entry parameter of its shape (which cuts off
//!   everything only it used), or by one of its operands of the same shape (in any
//!   computation);
//! - what no one uses any more removed: instructions, parameters, computations;
//! - header attributes (entry layout, aliasing, propagation flags), shardings and
//!   metadata dropped.
//!
//! The predicate sees the candidate as checked module and as canonical text; the module
//! text returned is canonical (`hloc parse` prints it the same).

use hlo_check::Checked;
use hlo_ir::{Module, NodeIndex, Shape};

/// A predicate on a candidate: the checked module and its canonical text.
pub type Predicate<'a> = dyn FnMut(&Checked<Module>, &str) -> bool + 'a;

/// What [`reduce`] did.
#[derive(Debug)]
pub struct Reduced {
    /// The smallest module found, canonical text.
    pub text: String,
    /// Its instruction count (every computation, parameters included).
    pub instrs: usize,
    /// The original's instruction count.
    pub original_instrs: usize,
    /// How many candidates the predicate was asked about.
    pub tests: usize,
}

/// One edit of a module.
#[derive(Clone, Copy, Debug)]
enum Edit {
    /// Clear header attributes, shardings and metadata.
    Plain,
    /// Make element `k` of the entry's root tuple the root.
    RootElement(usize),
    /// Replace instruction `n` of the entry by a new parameter of its shape.
    ToParam(NodeIndex),
    /// Replace instruction `n` of computation `c` by its operand `o`.
    ToOperand(usize, NodeIndex, NodeIndex),
}

fn candidates(m: &Module) -> Vec<Edit> {
    let mut out = vec![Edit::Plain];
    let entry = m.entry();
    if let Some(root) = entry.root()
        && entry.instr(root).op.opcode() == hlo_ir::Opcode::Tuple
    {
        out.extend((0..entry.operand_count(root)).map(Edit::RootElement));
    }
    // From the root up: cutting near the root removes the most at once.
    let order: Vec<NodeIndex> = entry.post_order().into_iter().rev().collect();
    for &n in &order {
        let ins = entry.instr(n);
        if matches!(ins.op, hlo_ir::Op::Parameter { .. }) || ins.shape.as_array().is_none() {
            continue;
        }
        out.push(Edit::ToParam(n));
    }
    for (ci, comp) in m.comps().iter().enumerate() {
        for n in comp.post_order().into_iter().rev() {
            let shape = &comp.instr(n).shape;
            for o in comp.operands(n) {
                if &comp.instr(o).shape == shape {
                    out.push(Edit::ToOperand(ci, n, o));
                }
            }
        }
    }
    out
}

/// Removes what nothing uses: instructions, entry parameters, computations.
fn sweep(m: &mut Module) {
    let ids: Vec<_> = m.comp_ids().collect();
    for id in ids {
        m.comp_mut(id).remove_dead(|_| true);
    }
    let entry = m.entry;
    let unused: Vec<NodeIndex> =
        m.comp(entry).params().into_iter().filter(|&p| !m.comp(entry).has_users(p)).collect();
    for p in unused {
        if m.comp(entry).root() != Some(p) {
            let _ = m.comp_mut(entry).remove_param(p);
        }
    }
    m.remove_unreachable_computations();
}

fn apply(m: &Module, e: Edit) -> Option<Module> {
    let mut m = m.clone();
    let entry = m.entry;
    match e {
        Edit::Plain => {
            let before = hlo_ir::text::print(&m);
            m.header.entry_layout = None;
            m.header.entry_layout_span = None;
            m.header.input_output_alias = None;
            m.header.buffer_donor = None;
            m.header.allow_spmd_sharding_propagation_to_parameters = None;
            m.header.allow_spmd_sharding_propagation_to_output = None;
            m.frames = None;
            let ids: Vec<_> = m.comp_ids().collect();
            for id in ids {
                let c = m.comp_mut(id);
                for n in c.nodes().collect::<Vec<_>>() {
                    let ins = c.instr_mut(n);
                    ins.sharding = None;
                    ins.metadata = None;
                }
            }
            if hlo_ir::text::print(&m) == before {
                return None;
            }
        }
        Edit::RootElement(k) => {
            let c = m.comp_mut(entry);
            let root = c.root()?;
            let el = c.operand(root, k as hlo_ir::Slot)?;
            c.set_root(el);
        }
        Edit::ToParam(n) => {
            let c = m.comp_mut(entry);
            let shape: Shape = c.get(n)?.shape.clone();
            let p = c.add_param("p", shape);
            c.replace_all_uses(n, p);
        }
        Edit::ToOperand(ci, n, o) => {
            let id = m.comp_ids().nth(ci)?;
            let c = m.comp_mut(id);
            if !c.contains(n) || !c.contains(o) {
                return None;
            }
            c.replace_all_uses(n, o);
        }
    }
    sweep(&mut m);
    Some(m)
}

/// Shrinks `text` while `interesting` holds. Fails when the text does not pass the checks
/// or the predicate does not hold on it to begin with. `progress` hears every accepted
/// step (instruction count after it).
pub fn reduce(
    text: &str,
    interesting: &mut Predicate<'_>,
    progress: &mut dyn FnMut(usize),
) -> Result<Reduced, String> {
    let first = crate::diff::load(text)?;
    let original_instrs = first.instr_count();
    let mut tests = 1;
    if !interesting(&first, text) {
        return Err("the predicate does not hold on the input module".into());
    }
    let mut current: Module = (*first).clone();
    let mut current_text = hlo_ir::text::print(&current);
    loop {
        let mut changed = false;
        let mut k = 0;
        loop {
            let cands = candidates(&current);
            let Some(&e) = cands.get(k) else { break };
            k += 1;
            let Some(m) = apply(&current, e) else { continue };
            let t = hlo_ir::text::print(&m);
            if t == current_text {
                continue;
            }
            let Ok(checked) = crate::diff::load(&t) else { continue };
            tests += 1;
            if interesting(&checked, &t) {
                // The re-parsed module: its text is a fixpoint of print and parse.
                current = (*checked).clone();
                current_text = hlo_ir::text::print(&current);
                changed = true;
                progress(current.instr_count());
                // Candidates are recomputed for the smaller module; start over from the
                // root, where edits remove the most.
                k = 0;
            }
        }
        if !changed {
            break;
        }
    }
    Ok(Reduced { instrs: current.instr_count(), text: current_text, original_instrs, tests })
}
