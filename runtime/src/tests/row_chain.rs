//! Row chains ([`crate::row_chain`]): programs run with chains on have the bits they have
//! with chains off and the interpreter's; the kernels that may share blocks of rows form
//! one chain, and the ones that may not (a transposed read, a column reduction) stay out.

use std::sync::Mutex;

use crate::row_chain;
use crate::{Program, RunOptions, Stats};

/// Serializes the tests that flip the process-wide switch.
static SWITCH: Mutex<()> = Mutex::new(());

/// Runs `src` (as written) with chains on and off: the two give the same bits, close to
/// the interpreter's values (the JIT's `exp` and `tanh` and its row sums' order are not
/// the interpreter's). Returns the kernel names of the run with chains.
fn check(src: &str) -> Vec<String> {
    let _g = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    let m = hlo_driver::parse(src).unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)));
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 3).unwrap();
    let want = hlo_interp::run(&m, &inputs).unwrap();
    let mut runs = Vec::new();
    let mut names = Vec::new();
    for on in [true, false] {
        row_chain::set_enabled(on);
        let p = Program::from_optimized(&m).unwrap();
        let mut stats = Stats::default();
        let mut outs = Vec::new();
        p.run_with(&inputs, &mut outs, RunOptions::default().with_stats(&mut stats)).unwrap();
        runs.push(outs);
        if on {
            names = stats.by_name.keys().cloned().collect();
            names.sort();
        }
    }
    row_chain::set_enabled(true);
    for (k, ((a, b), w)) in runs[0].iter().zip(&runs[1]).zip(&want).enumerate() {
        let f = |t: &hlo_ir::Tensor| t.to_vec::<f32>().expect("f32 outputs");
        let (a, b, w) = (f(a), f(b), f(w));
        let first = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits());
        assert_eq!(first, None, "output {k}: chains change element {first:?}");
        let far = a.iter().zip(&w).position(|(x, y)| (x - y).abs() > 1e-4 * (1.0 + y.abs()));
        assert_eq!(far, None, "output {k}: element {far:?} is far from the interpreter's");
    }
    names
}

const REDUCERS: &str = "HloModule t\n\
    add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n\
    max { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] maximum(a, b) }\n";

/// A softmax over rows beside a column reduction of the same input: the row max, the
/// exponentials, their sum and the division form one chain that skips the column
/// reduction, for row counts that split into blocks unevenly and across both threads.
#[test]
fn a_row_softmax_is_one_chain_with_the_interpreters_bits() {
    for (r, c) in [(3, 5), (37, 1000), (300, 1000)] {
        let a = format!("f32[{r},{c}]");
        let src = format!(
            "{REDUCERS}ENTRY e {{\n  x = {a} parameter(0)\n  ninf = f32[] constant(-inf)\n  z = f32[] constant(0)\n  \
             mx = f32[{r}] reduce(x, ninf), dimensions={{1}}, to_apply=max\n  \
             cm = f32[{c}] reduce(x, ninf), dimensions={{0}}, to_apply=max\n  \
             bm = {a} broadcast(mx), dimensions={{0}}\n  d = {a} subtract(x, bm)\n  e = {a} exponential(d)\n  \
             s = f32[{r}] reduce(e, z), dimensions={{1}}, to_apply=add\n  \
             bs = {a} broadcast(s), dimensions={{0}}\n  q = {a} divide(e, bs)\n  \
             ROOT t = ({a}, f32[{c}]) tuple(q, cm)\n}}\n"
        );
        let names = check(&src);
        assert!(names.contains(&"mx » bm » d » e » s » bs » q".to_string()), "{r}x{c}: {names:?}");
        assert!(names.contains(&"cm".to_string()), "{r}x{c}: {names:?}");
    }
}

/// A kernel that reads an earlier one's result transposed (other rows than its own) does
/// not join its chain.
#[test]
fn a_kernel_reading_other_rows_stays_out_of_the_chain() {
    let src = format!(
        "{REDUCERS}ENTRY e {{\n  x = f32[64,64] parameter(0)\n  z = f32[] constant(0)\n  \
         e = f32[64,64] exponential(x)\n  s = f32[64] reduce(e, z), dimensions={{1}}, to_apply=add\n  \
         t = f32[64,64] transpose(e), dimensions={{1,0}}\n  u = f32[64,64] add(t, x)\n  \
         ROOT r = (f32[64], f32[64,64]) tuple(s, u)\n}}\n"
    );
    let names = check(&src);
    // The transpose starts a chain of its own, which its reader joins.
    assert_eq!(names, ["e » s", "t » u"]);
}

/// Buffers the chain's kernels use are not shared with one another: `p` (a column
/// reduction's result, outside the chain) dies at the first chain kernel, which reads it
/// transposed, and the later ones' results have its size. Were one of them given its
/// bytes, it would overwrite the parts of `p` the first kernel's later blocks still read.
#[test]
fn a_chain_keeps_its_buffers_apart() {
    let src = format!(
        "{REDUCERS}ENTRY e {{\n  x = f32[256,512] parameter(0)\n  w = f32[4,512,256] parameter(1)\n  z = f32[] constant(0)\n  \
         p = f32[512,256] reduce(w, z), dimensions={{0}}, to_apply=add\n  pt = f32[256,512] transpose(p), dimensions={{1,0}}\n  \
         pe = f32[256,512] tanh(pt)\n  \
         a = f32[256,512] multiply(x, pe)\n  s = f32[256] reduce(a, z), dimensions={{1}}, to_apply=add\n  \
         bs = f32[256,512] broadcast(s), dimensions={{0}}\n  c = f32[256,512] subtract(a, bs)\n  \
         ROOT r = f32[256,512] multiply(c, x)\n}}\n"
    );
    let names = check(&src);
    assert_eq!(names, ["p", "pt » pe » a » s » bs » c » r"]);
}
