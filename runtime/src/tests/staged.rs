//! Staged vector math ([`crate::codegen::staged`]) against the inline polynomials: the same
//! modules compiled with staging on and off give the same bits, for rows shorter than a
//! chunk, of one chunk, of several with a partial last one and with a scalar tail, in
//! elementwise loops, row reductions (four accumulators) and column reductions, f32 and
//! bf16, and with a math instruction also reached through a broadcast (not staged there).

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use crate::codegen::staged;
use crate::{CompileOptions, Program};

/// Serializes the tests that flip the process-wide switch.
static SWITCH: Mutex<()> = Mutex::new(());

fn module(n: usize, t: &str) -> String {
    format!(
        "HloModule t\nadd {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT s = {t}[] add(a, b)\n}}\n\
         ENTRY e {{\n  x = {t}[3,{n}] parameter(0)\n  y = {t}[3,{n}] parameter(1)\n  v = {t}[{n}] parameter(2)\n  \
         z = {t}[] constant(0)\n  ax = {t}[3,{n}] abs(x)\n  \
         ex = {t}[3,{n}] exponential(x)\n  lg = {t}[3,{n}] log(ax)\n  th = {t}[3,{n}] tanh(y)\n  \
         lp = {t}[3,{n}] log-plus-one(ax)\n  em = {t}[3,{n}] exponential-minus-one(y)\n  \
         lo = {t}[3,{n}] logistic(x)\n  pw = {t}[3,{n}] power(ax, y)\n  \
         a1 = {t}[3,{n}] add(ex, lg)\n  a2 = {t}[3,{n}] multiply(th, lp)\n  a3 = {t}[3,{n}] subtract(em, lo)\n  \
         a4 = {t}[3,{n}] add(a1, a2)\n  a5 = {t}[3,{n}] add(a3, pw)\n  ew = {t}[3,{n}] add(a4, a5)\n  \
         nested = {t}[3,{n}] exponential(th)\n  \
         ev = {t}[{n}] exponential(v)\n  bv = {t}[3,{n}] broadcast(ev), dimensions={{1}}\n  mixed = {t}[3,{n}] multiply(bv, ex)\n  \
         rows = {t}[3] reduce(ex, z), dimensions={{1}}, to_apply=add\n  \
         cols = {t}[{n}] reduce(th, z), dimensions={{0}}, to_apply=add\n  \
         ROOT r = ({t}[3,{n}], {t}[3,{n}], {t}[3,{n}], {t}[3], {t}[{n}], {t}[{n}]) tuple(ew, nested, mixed, rows, cols, ev)\n}}\n"
    )
}

fn run(src: &str) -> Vec<hlo_ir::Tensor> {
    let m = hlo_driver::parse(src).unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)));
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 7).unwrap();
    let p = Program::compile(&m, &CompileOptions::default()).unwrap();
    p.run(&inputs).unwrap()
}

#[test]
fn staged_math_gives_the_inline_bits() {
    let _g = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    for t in ["f32", "bf16"] {
        for n in [5usize, 16, 127, 128, 131, 300, 516] {
            let src = module(n, t);
            let before = staged::STAGED.load(Ordering::Relaxed);
            staged::set_enabled(true);
            let on = run(&src);
            let staged_now = staged::STAGED.load(Ordering::Relaxed) - before;
            staged::set_enabled(false);
            let off = run(&src);
            staged::set_enabled(true);
            assert!(staged_now >= 8, "{t}[3,{n}]: only {staged_now} instructions staged");
            for (k, (a, b)) in on.iter().zip(&off).enumerate() {
                assert_eq!(a.bytes(), b.bytes(), "{t}[3,{n}]: output {k} differs with staging");
            }
        }
    }
}

/// A loop whose only output is a staged instruction (`exp`, `log` of an elementwise
/// expression) has the host call write it into the output, and a column sum of one has
/// the call add each row into the sums: the same bits as the inline polynomial, for rows
/// of every length around the chunk size and the scalar tail.
#[test]
fn a_staged_root_written_into_the_output_has_the_inline_bits() {
    let _g = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    let sum = "s = f32[] parameter(0)\n  t = f32[] parameter(1)\n  ROOT u = f32[] add(s, t)";
    for (root, reduce) in
        [("exponential(d)", false), ("log(a)", false), ("exponential(d)", true), ("tanh(d)", true)]
    {
        for n in [4usize, 7, 16, 511, 512, 515, 1030] {
            let out = if reduce {
                format!(
                    "f = f32[3,{n}] {root}\n  z = f32[] constant(0)\n  ROOT r = f32[{n}] reduce(f, z), dimensions={{0}}, to_apply=add"
                )
            } else {
                format!("ROOT r = f32[3,{n}] {root}")
            };
            let src = format!(
                "HloModule t\nadd {{\n  {sum}\n}}\nENTRY e {{\n  x = f32[3,{n}] parameter(0)\n  y = f32[3,{n}] parameter(1)\n  \
                 d = f32[3,{n}] subtract(x, y)\n  a = f32[3,{n}] abs(d)\n  {out}\n}}\n"
            );
            let before = staged::STAGED_ROOTS.load(Ordering::Relaxed);
            staged::set_enabled(true);
            let on = run(&src);
            let direct = staged::STAGED_ROOTS.load(Ordering::Relaxed) - before;
            staged::set_enabled(false);
            let off = run(&src);
            staged::set_enabled(true);
            assert!(
                direct >= 1,
                "{root} {reduce}, n = {n}: the loop did not write the output directly"
            );
            assert_eq!(
                on[0].bytes(),
                off[0].bytes(),
                "{root} {reduce}, n = {n}: bits differ with staging"
            );
        }
    }
}
