//! The embedding API: argument checks, thread safety, resident training state with no
//! per-step allocation.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use hlo_runtime::{CompileOptions, Program, RunError, RunOptions, TrainStep};

/// Counts allocations, to show a training loop allocates nothing after its first step.
struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);
thread_local! {
    /// Only the thread that set this counts (other tests run on other threads).
    static COUNTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
fn count() {
    if COUNTING.with(|c| c.get()) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(p, l, n) }
    }
}
#[global_allocator]
static GLOBAL: Counting = Counting;

fn mlp() -> (Program, Vec<hlo_ir::Tensor>) {
    let m = hlo_driver::parse(hlo_examples_model()).expect("model parses");
    let inputs = hlo_io::npz::read_inputs(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/models/mlp_train.inputs.npz"),
        &m.entry_param_shapes(),
    )
    .expect("inputs");
    (Program::compile(&m, &CompileOptions::default()).expect("compiles"), inputs)
}

fn hlo_examples_model() -> &'static str {
    include_str!("../../examples/models/mlp_train.hlo")
}

#[test]
fn programs_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Program>();
}

#[test]
fn bad_arguments_name_the_parameter() {
    let (p, inputs) = mlp();
    let e = p.run(&inputs[..5]).unwrap_err();
    assert!(
        matches!(e.run_error(), Some(RunError::ArgumentCount { expected: 6, given: 5 })),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "the program takes 6 arguments, 5 given");
    let f32s = |dims: &[u64]| hlo_ir::Shape::array(hlo_ir::ElemType::F32, dims);
    let mut bad = inputs.clone();
    bad[4] = hlo_ir::Tensor::zeros(hlo_ir::ElemType::F32, &[8, 24]).unwrap();
    let e = p.run(&bad).unwrap_err();
    match e.run_error() {
        Some(RunError::ArgumentShape { index: 4, expected, given }) => {
            assert_eq!((expected, given), (&f32s(&[16, 24]), &f32s(&[8, 24])));
        }
        _ => panic!("{e:?}"),
    }
    bad[4] = hlo_ir::Tensor::zeros(hlo_ir::ElemType::BF16, &[16, 24]).unwrap();
    assert_eq!(
        p.run(&bad).unwrap_err().to_string(),
        "parameter 4: expected f32[16,24], given bf16[16,24]"
    );
}

#[test]
fn concurrent_runs_are_bit_identical() {
    let (p, inputs) = mlp();
    let want = p.run(&inputs).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (p, inputs) = (p.clone(), inputs.clone());
                s.spawn(move || (0..10).map(|_| p.run(&inputs).unwrap()).collect::<Vec<_>>())
            })
            .collect();
        for h in handles {
            for got in h.join().unwrap() {
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(g.bytes(), w.bytes());
                }
            }
        }
    });
}

/// Allocations made by this thread while running `f`.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.load(Ordering::Relaxed) - before
}

#[test]
fn repeated_runs_allocate_nothing_in_the_runtime() {
    // Every kernel here is generated code (no GEMM): after the first run, outputs are
    // written into the previous run's tensors and the arena is reused.
    let path = hlo_tests::shared_dir().join("corpus/layernorm.hlo");
    let m = hlo_driver::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 1).unwrap();
    let p = Program::compile(&m, &CompileOptions::default()).unwrap();
    let mut outs = Vec::new();
    p.run_with(&inputs, &mut outs, RunOptions::default()).unwrap();
    let n = allocations(|| {
        for _ in 0..10 {
            p.run_with(&inputs, &mut outs, RunOptions::default()).unwrap();
        }
    });
    assert_eq!(n, 0, "allocations in 10 runs after the first");
}

#[test]
fn train_step_keeps_state_resident_and_its_allocations_do_not_grow() {
    let (p, inputs) = mlp();
    let (state, batch) = inputs.split_at(4);
    let mut t = TrainStep::new(p, state.to_vec()).unwrap();
    let mut losses = vec![t.step(batch).unwrap()];
    // The only allocations left are the GEMM library's packing buffers (the `gemm` crate
    // allocates them per product): the same number every step.
    let per_step: Vec<u64> =
        (0..10).map(|_| allocations(|| losses.push(t.step(batch).unwrap()))).collect();
    assert!(
        losses.windows(2).all(|w| w[1] < w[0]),
        "SGD on a fixed batch lowers the loss every step: {losses:?}"
    );
    // (±1: the thread pool's own bookkeeping when a product is split across threads.)
    let (lo, hi) = (per_step.iter().min().unwrap(), per_step.iter().max().unwrap());
    assert!(hi - lo <= 2, "allocations per step: {per_step:?}");
    assert_eq!(t.steps(), 11);
}

/// A shape-polymorphic module specialized to `args` (the driver checks the result), then
/// compiled; the error rendered as text.
fn compile_for(m: &hlo_ir::Module, args: &[hlo_ir::Shape]) -> Result<Program, String> {
    let s = hlo_driver::specialize(m, args).map_err(|d| d.to_string())?;
    Program::compile(&s, &CompileOptions::default()).map_err(|e| e.to_string())
}

#[test]
fn polymorphic_entries_are_specialized_per_shape_and_assertions_checked() {
    let path = hlo_tests::shared_dir().join("corpus/dyn_unbounded_export.hlo");
    // Shape-polymorphic: parsed and verified; the checks run once it is specialized.
    let m = hlo_tests::parse_verified(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(hlo_driver::is_polymorphic(&m));
    for rows in [1u64, 5, 9] {
        let x: Vec<f32> = (0..rows * 4).map(|i| i as f32 * 0.25).collect();
        let t = hlo_ir::Tensor::from_f32(&[rows, 4], &x).unwrap();
        let p = compile_for(&m, &[t.shape()]).unwrap();
        let out = p.run(std::slice::from_ref(&t)).unwrap();
        assert_eq!(out[0].dims(), &[rows, 4]);
        let got: Vec<f32> = out[0].values::<f32>().unwrap().collect();
        let want: Vec<f32> = x.iter().map(|v| v.sin() * v).collect();
        // The JIT's sine is a polynomial within 1.6 ulp.
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 4.0 * f32::EPSILON * w.abs().max(f32::MIN_POSITIVE),
                "{g} vs {w}"
            );
        }
    }
    // The export asserts the batch is at least 1.
    let empty = hlo_ir::Shape::array(hlo_ir::ElemType::F32, &[0, 4]);
    let e = compile_for(&m, &[empty]).err().expect("a failing assertion is refused");
    assert!(e.contains("shape assertion `shape_assertion.1` fails for arguments (f32[0,4]"), "{e}");
    let wrong = hlo_ir::Shape::array(hlo_ir::ElemType::F32, &[3, 5]);
    let e = compile_for(&m, &[wrong]).err().expect("a wrong static dim is refused");
    assert!(e.contains("parameter 0: expected f32[?,4]"), "{e}");
}

#[test]
fn a_single_symbolic_batch_dimension_specializes_a_training_step() {
    let src = include_str!("../../examples/models/mlp_train_masked.hlo");
    let m = hlo_tests::parse_verified(src).unwrap(); // polymorphic: checked once specialized
    assert!(hlo_driver::is_polymorphic(&m));
    for batch in [8u64, 16] {
        let mut shapes: Vec<hlo_ir::Shape> = m.entry_param_shapes()[..4].to_vec();
        shapes.push(hlo_ir::Shape::array(hlo_ir::ElemType::F32, &[batch, 24]));
        shapes.push(hlo_ir::Shape::array(hlo_ir::ElemType::S32, &[batch]));
        shapes.push(hlo_ir::Shape::array(hlo_ir::ElemType::F32, &[batch]));
        // The driver's specialize phase checks its result: a `Checked` module.
        let s = hlo_driver::specialize(&m, &shapes).expect("specializes and passes the checks");
        let inputs = hlo_interp::seeded::seeded_inputs(&shapes, batch).unwrap();
        let want = hlo_interp::run(&s, &inputs).unwrap();
        let p = Program::compile(&s, &CompileOptions::default()).unwrap();
        let got = p.run(&inputs).unwrap();
        for (g, w) in got.iter().zip(&want) {
            hlo_io::compare::compare(g, w, hlo_io::compare::Tolerance { rtol: 1e-5, atol: 1e-6 })
                .unwrap();
        }
    }
}

fn masked_mlp_args(batch: u64) -> Vec<hlo_ir::Tensor> {
    let m = hlo_tests::parse_verified(include_str!("../../examples/models/mlp_train_masked.hlo"))
        .unwrap();
    let mut shapes: Vec<hlo_ir::Shape> = m.entry_param_shapes()[..4].to_vec();
    shapes.push(hlo_ir::Shape::array(hlo_ir::ElemType::F32, &[batch, 24]));
    shapes.push(hlo_ir::Shape::array(hlo_ir::ElemType::S32, &[batch]));
    shapes.push(hlo_ir::Shape::array(hlo_ir::ElemType::F32, &[batch]));
    hlo_interp::seeded::seeded_inputs(&shapes, batch).unwrap()
}

#[test]
fn the_runtime_compiles_once_per_shape_and_explains_misses() {
    let m = hlo_tests::parse_verified(include_str!("../../examples/models/mlp_train_masked.hlo"))
        .unwrap();
    let rt = hlo_runtime::Runtime::new();
    let shapes = |b: u64| masked_mlp_args(b).iter().map(|t| t.shape()).collect::<Vec<_>>();
    let first = rt.compile("mlp", &m, &shapes(8)).unwrap();
    assert_eq!(first.outcome.miss().unwrap().explanation(), "first compile of this program");
    assert!(rt.compile("mlp", &m, &shapes(8)).unwrap().outcome.is_hit());
    let again = rt.compile("mlp", &m, &shapes(16)).unwrap();
    assert_eq!(
        again.outcome.miss().unwrap().explanation(),
        "param 4: f32[16,24] now, f32[8,24] before\nparam 5: s32[16] now, s32[8] before\nparam 6: f32[16] now, f32[8] before"
    );
    let s = rt.stats();
    assert_eq!((s.hits, s.misses), (1, 2));
}

#[test]
fn the_persistent_cache_survives_a_restart_and_a_corrupt_entry() {
    let dir_guard = tempfile::Builder::new()
        .prefix("hlo-runtime-cache-test-")
        .tempdir()
        .expect("a temporary directory");
    let dir = dir_guard.path().join("cache");
    let m = hlo_driver::parse(hlo_examples_model()).unwrap();
    let (_, inputs) = mlp();
    let shapes: Vec<hlo_ir::Shape> = inputs.iter().map(|t| t.shape()).collect();
    let cold = hlo_runtime::Runtime::new().with_cache_dir(&dir);
    let c = cold.compile("mlp", &m, &shapes).unwrap();
    assert_eq!(c.disk, Some(hlo_runtime::DiskEvent::Stored));
    let want = c.program.run(&inputs).unwrap();
    // A new runtime (as a new process would) loads the optimized module.
    let warm = hlo_runtime::Runtime::new().with_cache_dir(&dir);
    let w = warm.compile("mlp", &m, &shapes).unwrap();
    assert_eq!(w.disk, Some(hlo_runtime::DiskEvent::Loaded));
    assert_eq!(
        w.program.run(&inputs).unwrap().iter().map(|t| t.bytes().to_vec()).collect::<Vec<_>>(),
        want.iter().map(|t| t.bytes().to_vec()).collect::<Vec<_>>()
    );
    // Truncate the entry: detected, reported, recompiled and rewritten.
    let entry = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "hlocache"))
        .expect("one entry");
    let bytes = std::fs::read(&entry).unwrap();
    std::fs::write(&entry, &bytes[..bytes.len() / 2]).unwrap();
    let third = hlo_runtime::Runtime::new().with_cache_dir(&dir);
    let t = third.compile("mlp", &m, &shapes).unwrap();
    assert!(
        matches!(&t.disk, Some(hlo_runtime::DiskEvent::Replaced(why)) if why.contains("hlocache")),
        "{:?}",
        t.disk
    );
    assert_eq!(t.program.run(&inputs).unwrap()[0].bytes(), want[0].bytes());
    let fourth = hlo_runtime::Runtime::new().with_cache_dir(&dir);
    assert_eq!(
        fourth.compile("mlp", &m, &shapes).unwrap().disk,
        Some(hlo_runtime::DiskEvent::Loaded)
    );
}

/// The README's embedding example is the crate example of `hlo-runtime` (run as a
/// doctest): the same visible lines, in the same order.
#[test]
fn the_readme_embedding_example_is_the_crate_doctest() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("../README.md")).expect("README.md");
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let at = readme.find("Embedding it").expect("the README's embedding section");
    let start = readme[at..].find("```rust\n").expect("a rust block") + at + "```rust\n".len();
    let end = start + readme[start..].find("```").expect("its closing fence");
    let in_readme: Vec<&str> =
        readme[start..end].lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let at = lib.find("Embedding it (the README's example):").expect("the crate example");
    let start = lib[at..].find("//! ```\n").expect("a code block") + at + "//! ```\n".len();
    let end = start + lib[start..].find("//! ```").expect("its closing fence");
    let in_doc: Vec<&str> = lib[start..end]
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(in_doc.len() >= 5, "the doctest lost its lines: {in_doc:?}");
    assert_eq!(in_readme, in_doc, "README.md and runtime/src/lib.rs differ");
}

#[test]
fn refusals_say_what_the_jit_refused_and_where() {
    let src = "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT c = f32[4] custom-call(p), custom_call_target=\"my_kernel\"\n}\n";
    let m = hlo_driver::parse(src).unwrap();
    let e = Program::compile(&m, &CompileOptions::default()).err().expect("refused");
    match e.kind() {
        hlo_runtime::RuntimeError::Unsupported {
            instruction: Some(i),
            what: hlo_runtime::Unsupported::CustomCall(target),
        } => assert_eq!((i.as_str(), target.as_str()), ("c", "my_kernel")),
        _ => panic!("{e:?}"),
    }
    assert!(e.is_unsupported() && e.span().is_some(), "{e:?}");
    assert_eq!(
        e.to_string(),
        "not supported by the JIT: `c`: custom-call target `my_kernel` is not supported by the JIT runtime"
    );
}
