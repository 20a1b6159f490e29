//! XLA TPU's compiled per-chip programs simulated as scheduled: a module printed after
//! XLA's TPU compilation (`is_scheduled=true`, tiled layouts, memory spaces, mixed
//! precision, asynchronous copies and collectives, asynchronous collective fusions) is
//! checked, lowered without re-optimizing and timed in its own order: what lies between
//! a start and its done overlaps it, a synchronous collective holds the program, and a
//! buffer XLA placed in on-chip memory (`S(1)`) costs no HBM traffic.

use hlo_chip::config::TpuConfig;
use hlo_ir::Module;
use hlo_tpu::engine::{Options, simulate};
use hlo_tpu::lower::{Passes, lower};

/// A small program in the form XLA TPU prints: a prefetch of `x` into VMEM, an
/// asynchronous all-gather fusion (start, done) around a large matmul, a loop fusion that
/// reads both (a bf16 and an f32 operand: mixed precision, as XLA TPU's fusions have),
/// and a synchronous all-reduce. `{START}` and `{PROD}` are where the
/// collective's start and the matmul go, so two schedules of the same work can be built.
const PROGRAM: &str = r#"
HloModule sched, is_scheduled=true, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%ag_start (p0: bf16[256,1024]) -> (bf16[256,1024], bf16[1024,1024], u32[]) {
  %p0 = bf16[256,1024]{1,0:T(8,128)(2,1)} parameter(0)
  %ag = bf16[1024,1024]{1,0:T(8,128)(2,1)} all-gather(%p0), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, use_global_device_ids=true
  ROOT %cc = (bf16[256,1024]{1,0:T(8,128)(2,1)}, bf16[1024,1024]{1,0:T(8,128)(2,1)}, u32[]{:S(2)}) custom-call(%ag), custom_call_target="AsyncCollectiveStart"
}

%ag_done (q0: bf16[256,1024], q1: bf16[1024,1024], q2: u32[]) -> bf16[1024,1024] {
  %q0 = bf16[256,1024]{1,0:T(8,128)(2,1)} parameter(0)
  %q1 = bf16[1024,1024]{1,0:T(8,128)(2,1)} parameter(1)
  %q2 = u32[]{:S(2)} parameter(2)
  ROOT %cd = bf16[1024,1024]{1,0:T(8,128)(2,1)} custom-call(%q0, %q1, %q2), custom_call_target="AsyncCollectiveDone"
}

%mm (m0: f32[4096,4096], m1: f32[4096,4096]) -> f32[4096,4096] {
  %m0 = f32[4096,4096]{1,0:T(8,128)} parameter(0)
  %m1 = f32[4096,4096]{1,0:T(8,128)} parameter(1)
  ROOT %d = f32[4096,4096]{1,0:T(8,128)} dot(%m0, %m1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%use (v0: bf16[1024,1024], v1: f32[1024,1024]) -> f32[1024,1024] {
  %v0 = bf16[1024,1024]{1,0:T(8,128)(2,1)} parameter(0)
  %v1 = f32[1024,1024]{1,0:T(8,128)S(1)} parameter(1)
  ROOT %r = f32[1024,1024]{1,0:T(8,128)} add(%v0, %v1)
}

ENTRY %main (x: f32[1024,1024], w: bf16[256,1024], a: f32[4096,4096], b: f32[4096,4096]) -> (f32[1024,1024], f32[4096,4096], f32[4096,4096]) {
  %x = f32[1024,1024]{1,0:T(8,128)} parameter(0)
  %w = bf16[256,1024]{1,0:T(8,128)(2,1)} parameter(1)
  %a = f32[4096,4096]{1,0:T(8,128)} parameter(2)
  %b = f32[4096,4096]{1,0:T(8,128)} parameter(3)
  %copy-start = (f32[1024,1024]{1,0:T(8,128)S(1)}, f32[1024,1024]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%x)
  {FIRST}
  {SECOND}
  %g0 = bf16[256,1024]{1,0:T(8,128)(2,1)} get-tuple-element(%start), index=0
  %g1 = bf16[1024,1024]{1,0:T(8,128)(2,1)} get-tuple-element(%start), index=1
  %g2 = u32[]{:S(2)} get-tuple-element(%start), index=2
  %done = bf16[1024,1024]{1,0:T(8,128)(2,1)} fusion(%g0, %g1, %g2), kind=kCustom, calls=%ag_done, output_to_operand_aliasing={{}: (1, {})}
  %copy-done = f32[1024,1024]{1,0:T(8,128)S(1)} copy-done(%copy-start)
  %out = f32[1024,1024]{1,0:T(8,128)} fusion(%done, %copy-done), kind=kLoop, calls=%use
  %sum = f32[4096,4096]{1,0:T(8,128)} all-reduce(%prod), channel_id=2, replica_groups=[1,4]<=[4], use_global_device_ids=true, to_apply=%add
  ROOT %t = (f32[1024,1024]{1,0:T(8,128)}, f32[4096,4096]{1,0:T(8,128)}, f32[4096,4096]{1,0:T(8,128)}) tuple(%out, %prod, %sum)
}
"#;

const START: &str = "%start = (bf16[256,1024]{1,0:T(8,128)(2,1)}, bf16[1024,1024]{1,0:T(8,128)(2,1)}, u32[]{:S(2)}) fusion(%w), kind=kCustom, calls=%ag_start, output_to_operand_aliasing={{0}: (0, {})}";
const PROD: &str = "%prod = f32[4096,4096]{1,0:T(8,128)} fusion(%a, %b), kind=kOutput, calls=%mm";

fn module(first: &str, second: &str, scheduled: bool) -> Module {
    let mut text = PROGRAM.replace("{FIRST}", first).replace("{SECOND}", second);
    if !scheduled {
        // Not a backend's program: no mixed precision either.
        text = text.replace("is_scheduled=true, ", "").replace(
            "ROOT %r = f32[1024,1024]{1,0:T(8,128)} add(%v0, %v1)",
            "%c = f32[1024,1024]{1,0:T(8,128)} convert(%v0)\n  ROOT %r = f32[1024,1024]{1,0:T(8,128)} add(%c, %v1)",
        );
    }
    match hlo_check::parse(&text) {
        Ok(m) => m.into_inner(),
        Err(d) => panic!("the program does not check:\n{}", d.render(&text, "sched.hlo", false)),
    }
}

/// Step cycles, and the lowered kernels by name.
fn time(m: &Module) -> (u64, hlo_tpu::lower::Lowered) {
    let lowered = lower(m, Passes::AsWritten).expect("lowers");
    let run = simulate(m, &lowered, None, &Options::new(TpuConfig::v4(), Passes::AsWritten))
        .expect("simulates");
    (run.sim.step_cycles(), lowered)
}

fn kernel<'a>(l: &'a hlo_tpu::lower::Lowered, name: &str) -> &'a hlo_chip::program::Kernel {
    l.program.kernels().find(|k| k.name == name).unwrap_or_else(|| panic!("no kernel {name}"))
}

#[test]
fn an_xla_tpu_program_lowers_as_printed() {
    let m = module(START, PROD, true);
    let (_, l) = time(&m);
    assert!(l.program.scheduled);
    // No kernel for the done, the copy-done, the get-tuple-elements.
    let names: Vec<&str> = l.program.kernels().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["copy-start", "start", "prod", "out", "sum"]);
    // The prefetch is a DMA of x; the start fusion is the all-gather inside it, issued
    // asynchronously; the all-reduce is synchronous.
    assert_eq!(kernel(&l, "copy-start").dma, Some(4 << 20));
    let start = kernel(&l, "start");
    let c = start.collective.as_ref().expect("the start carries the all-gather");
    assert_eq!((c.kind, c.bytes, c.group), ("all-gather", 2 << 20, 4));
    assert!(start.asynchronous && !kernel(&l, "sum").asynchronous);
    // `out` reads the gathered buffer from HBM and the prefetched one from VMEM.
    let out = kernel(&l, "out");
    let buf = |i: usize| &l.program.buffers[i];
    let from_vmem: Vec<u64> = out.reads.iter().filter(|r| buf(r.0).on_chip).map(|r| r.1).collect();
    let from_hbm: Vec<u64> = out.reads.iter().filter(|r| !buf(r.0).on_chip).map(|r| r.1).collect();
    assert_eq!((from_vmem, from_hbm), (vec![0], vec![2 << 20]));
    // The gathered buffer `out` reads is the one the start's collective writes.
    assert!(start.writes.iter().any(|w| out.reads.iter().any(|r| r.0 == w.0)));
}

#[test]
fn the_schedule_decides_what_overlaps() {
    // The all-gather issued before the matmul hides behind it; issued after it, the loop
    // fusion that needs its result waits for the whole collective.
    let (early, l) = time(&module(START, PROD, true));
    let (late, _) = time(&module(PROD, START, true));
    let plan = |name: &str| hlo_chip::chip::plan(kernel(&l, name), &TpuConfig::v4()).cycles;
    let gather = plan("start");
    assert!(gather > 1000, "{gather}");
    assert!(late >= early + gather * 9 / 10, "early {early}, late {late}, gather {gather}");
    // A synchronous collective holds the program: the step is at least the matmul, then
    // the all-reduce of its result.
    assert!(early >= plan("prod") + plan("sum"), "{early}");
    // Not scheduled (our own pipeline's programs), collectives start as soon as their
    // operands exist and only their users wait: nothing waits for the all-reduce's result,
    // which ends the step either way, and the late all-gather is hoisted before the matmul.
    let (late_free, _) = time(&module(PROD, START, false));
    assert!(late_free < late, "{late_free} {late}");
}

#[test]
fn mixed_precision_only_in_a_backends_program() {
    // The same bf16 + f32 add outside a compiled (scheduled, tiled) program is an error.
    let text = PROGRAM
        .replace("{FIRST}", START)
        .replace("{SECOND}", PROD)
        .replace("is_scheduled=true, ", "");
    let Err(err) = hlo_check::parse(&text) else { panic!("mixed precision accepted") };
    let all: Vec<String> = err.iter().map(|d| d.message.clone()).collect();
    assert!(all.iter().any(|m| m.contains("same element type")), "{all:?}");
}
