//! The engine without complex numbers (the Cranelift JIT) refuses modules with
//! `c64`/`c128` values or `fft` up front, at the first such instruction, with a located
//! error, instead of failing somewhere inside code generation. The reference interpreter
//! evaluates them (`interp::complex`, `interp::fft`), and so does the TPU model (through
//! the interpreter, with c64 products as the MXU computes them).

use hlo_ir::{Diagnostic, Module, Op, Shape};

/// The refusal for the first instruction (by computation, then `seq`) that is an `fft` or
/// has a complex value, or `None` when the module has neither. `engine` names the engine
/// in the message (`the JIT`, `the TPU model`).
pub fn refuse_complex(m: &Module, engine: &str) -> Option<Diagnostic> {
    let mut first: Option<(u32, Diagnostic)> = None;
    for comp in m.comps() {
        for instr in comp.instrs() {
            let why = if matches!(instr.op, Op::Fft { .. }) {
                "fft".to_string()
            } else if instr.shape.has_complex() {
                let e = if let Shape::Array(a) = &instr.shape {
                    a.elem.to_string()
                } else {
                    "complex".to_string()
                };
                format!("{e} values")
            } else {
                continue;
            };
            if first.as_ref().is_some_and(|(s, _)| *s <= instr.seq) {
                continue;
            }
            let d = Diagnostic::error(instr.span, format!("`{}` ({}): {why} not supported by this engine ({engine} has no complex numbers)", instr.name, instr.op.opcode().name()))
                .with_label(format!("{why} here"))
                .with_help("complex values and fft run on the reference interpreter: `hloc run --engine interp`");
            first = Some((instr.seq, d));
        }
    }
    first.map(|(_, d)| d)
}
