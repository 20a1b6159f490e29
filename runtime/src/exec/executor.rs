//! The executor: an [`Executable`]'s steps run over its buffers. One arena per run
//! (pooled, so repeated and concurrent runs reuse it), buffer addresses resolved once per
//! run, loop kernels split over the threads of the runtime's pool when they are large
//! ([`crate::pool::in_parts`]), dots,
//! convolutions, sorts and top-k on the library, loops and conditionals as nested step
//! lists, collectives on the device fabric of an SPMD run ([`Device`]). Kernels run with
//! subnormals flushed, as XLA's CPU backend runs them ([`crate::fpenv`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hlo_fabric::FabricError;
use hlo_ir::{Opcode, Shape, Tensor};

use super::Executable;
use super::plan::{Buffer, KernelKind, Place, Slot, Step};
use crate::RunError;
use crate::library::View;

/// The device a program runs as in an SPMD run: its index and the fabric its
/// collectives rendezvous on.
#[derive(Clone, Copy)]
pub struct Device<'f> {
    pub index: usize,
    pub fabric: &'f hlo_fabric::Fabric,
}

/// Per-kernel statistics of a run.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Calls and total time per kernel kind.
    pub by_kind: HashMap<KernelKind, (u64, Duration)>,
    /// Kind, calls and total time per kernel (by its instruction's name).
    pub by_name: HashMap<String, (KernelKind, u64, Duration)>,
    /// The instruction-set paths each kernel kind took ([`crate::cpu`]'s names; a dot's and
    /// a convolution's as their dispatchers decided them, call by call).
    pub paths: HashMap<KernelKind, std::collections::BTreeSet<&'static str>>,
    /// Threads of the pool the last run recorded here ran its parallel work on.
    pub threads: usize,
    /// Per loop kernel and row chain (by name): the most parts it ran in over the pool (1:
    /// on one thread; its work or its split range allowed no more).
    pub parts: HashMap<String, usize>,
}

/// The memory one run works in: the arena, the buffer addresses and a kernel-argument
/// array; pooled so repeated and concurrent runs reuse them.
pub(super) struct Scratch {
    arena: Vec<u64>,
    ptrs: Vec<*mut u8>,
    args: Vec<*mut u8>,
}

// SAFETY: the raw pointers point into this scratch's own arena, the executable's constants
// or the caller's arguments, and are rewritten at the start of every run.
unsafe impl Send for Scratch {}

impl Executable {
    /// Checks arguments (`first` then `rest`) against the entry parameters, naming the
    /// first that differs.
    pub fn check_args(&self, first: &[Tensor], rest: &[Tensor]) -> Result<(), RunError> {
        let given = first.len() + rest.len();
        if given != self.param_slots.len() {
            return Err(RunError::ArgumentCount { expected: self.param_slots.len(), given });
        }
        for (i, (a, &slot)) in first.iter().chain(rest).zip(&self.param_slots).enumerate() {
            let b = &self.bufs[slot];
            let same = a.elem() == b.elem
                && a.dims().len() == b.dims.len()
                && a.dims().iter().zip(&b.dims).all(|(&x, &y)| x == y as u64);
            if !same {
                let dims: Vec<u64> = b.dims.iter().map(|&d| d as u64).collect();
                return Err(RunError::ArgumentShape {
                    index: i,
                    expected: Shape::array(b.elem, &dims),
                    given: a.shape(),
                });
            }
        }
        Ok(())
    }

    /// Runs the program as device `device` of an SPMD run (`None`: the only device) on
    /// the parameters `first` followed by `rest`, writing the outputs into `outs` (reused
    /// when it already holds tensors of the output shapes, so a loop allocates nothing
    /// after its first run); `stats` collects per-kernel time when given. Parallel work
    /// runs on the runtime's pool of `threads` threads (`None`: the default pool).
    pub fn run_on(
        &self,
        device: Option<Device<'_>>,
        first: &[Tensor],
        rest: &[Tensor],
        outs: &mut Vec<Tensor>,
        mut stats: Option<&mut Stats>,
        threads: Option<usize>,
    ) -> Result<(), RunError> {
        self.check_args(first, rest)?;
        let pooled = self.arenas.lock().map_err(|_| RunError::ArenaPoisoned)?.pop();
        let mut sc = match pooled {
            Some(sc) => sc,
            None => Scratch {
                arena: zeroed_words(self.arena_bytes.div_ceil(8).max(1))
                    .ok_or(RunError::Arena { bytes: self.arena_bytes })?,
                ptrs: Vec::with_capacity(self.bufs.len()),
                args: Vec::with_capacity(64),
            },
        };
        let base = sc.arena.as_mut_ptr() as *mut u8;
        let arg = |i: usize| if i < first.len() { &first[i] } else { &rest[i - first.len()] };
        // Output tensors: reused when they already have the result shapes (every run of a
        // loop after the first), else made once.
        let reuse = outs.len() == self.outputs.len()
            && outs.iter().zip(&self.outputs).all(|(t, &o)| {
                t.elem() == self.bufs[o].elem
                    && t.bytes().len() == self.bufs[o].bytes
                    && t.dims().iter().zip(&self.bufs[o].dims).all(|(&x, &y)| x == y as u64)
            });
        if !reuse {
            outs.clear();
            for &o in &self.outputs {
                let b = &self.bufs[o];
                let dims: Vec<u64> = b.dims.iter().map(|&d| d as u64).collect();
                outs.push(Tensor::zeros(b.elem, &dims).map_err(RunError::Output)?);
            }
        }
        sc.ptrs.clear();
        sc.ptrs.extend(self.bufs.iter().map(|b| match b.place {
            Some(Place::Arena(o)) => base.wrapping_add(o),
            Some(Place::Output(k)) => outs[k].bytes_mut().as_mut_ptr(),
            Some(Place::Param(i)) => arg(i).bytes().as_ptr() as *mut u8,
            Some(Place::Const(i)) => self.consts[i].as_ptr() as *mut u8,
            None => std::ptr::null_mut(),
        }));
        // Aliases come after their sources.
        for (i, b) in self.bufs.iter().enumerate() {
            if let Some(a) = b.alias {
                sc.ptrs[i] = sc.ptrs[a];
            }
        }
        let Scratch { ptrs, args, .. } = &mut sc;
        // Kernels run with subnormals flushed, as XLA's CPU backend runs them (see fpenv).
        let result = crate::pool::with_threads(threads, || {
            let pool = crate::pool::current();
            if let Some(st) = stats.as_mut() {
                st.threads = pool.map_or(1, |p| p.current_num_threads());
            }
            match pool {
                // One device, several threads and enough parallel steps: the whole run on
                // a pool thread (`plan::IN_POOL_STEPS`). Never an SPMD device's: devices
                // wait for each other at collectives, and on the pool they could hold
                // every thread while they wait.
                Some(pool)
                    if self.in_pool && device.is_none() && pool.current_num_threads() > 1 =>
                {
                    let job = InPool { ptrs, args, stats: &mut stats };
                    pool.install(move || {
                        let job = job;
                        crate::pool::with_threads(threads, || {
                            crate::pool::keeping_awake(|| {
                                self.exec(&self.steps, job.ptrs, job.args, job.stats, None)
                            })
                        })
                    })
                }
                _ => crate::fpenv::with_host_fp_mode(|| {
                    self.exec(&self.steps, ptrs, args, &mut stats, device)
                }),
            }
        });
        if result.is_ok() {
            for (k, (t, &o)) in outs.iter_mut().zip(&self.outputs).enumerate() {
                if matches!(self.bufs[o].place, Some(Place::Output(j)) if j == k) {
                    continue; // already written in place
                }
                let n = self.bufs[o].bytes;
                // SAFETY: the buffer holds `n` bytes written by the program; `t` has `n` bytes.
                unsafe { std::ptr::copy_nonoverlapping(sc.ptrs[o], t.bytes_mut().as_mut_ptr(), n) };
            }
        }
        if let Ok(mut pool) = self.arenas.lock() {
            pool.push(sc);
        }
        result
    }

    fn exec(
        &self,
        steps: &[Step],
        ptrs: &[*mut u8],
        scratch: &mut Vec<*mut u8>,
        stats: &mut Option<&mut Stats>,
        device: Option<Device<'_>>,
    ) -> Result<(), RunError> {
        for step in steps {
            let t0 = stats.is_some().then(Instant::now);
            let mut path = None;
            let mut parts = None;
            let (kind, name): (KernelKind, &str) = match step {
                Step::Kernel { f, args, kind, name, split, work, .. } => {
                    scratch.clear();
                    scratch.extend(args.iter().map(|&s| ptrs[s]));
                    let kf = self.code.fns[*f];
                    let a = SendPtr(scratch.as_ptr());
                    // SAFETY: the kernel reads and writes exactly the buffers in `args`, whose
                    // sizes the planner derived from the same shapes the kernel was built
                    // for; split ranges are disjoint.
                    parts = Some(crate::pool::in_parts(*split, *work, |lo, hi| {
                        let a = &a; // the whole wrapper, not its raw field
                        unsafe { kf(a.0, lo, hi) }
                    }));
                    (*kind, name)
                }
                Step::Chain { kernels, args, rows, block, work, name } => {
                    scratch.clear();
                    scratch.extend(args.iter().map(|&s| ptrs[s]));
                    let a = SendPtr(scratch.as_ptr());
                    let block = *block;
                    parts = Some(crate::pool::in_parts(*rows, *work, |lo, hi| {
                        let a = &a; // the whole wrapper, not its raw field
                        let mut b = lo;
                        while b < hi {
                            let e = (b + block).min(hi);
                            for k in kernels {
                                // SAFETY: as a kernel step's, each kernel's arguments
                                // starting at `at`; the chain's kernels read what the others
                                // write only in the rows `b..e` they have computed.
                                unsafe { self.code.fns[k.f](a.0.add(k.at), b, e) }
                            }
                            b = e;
                        }
                    }));
                    (kernels[0].kind, name.as_str())
                }
                Step::Dot { lhs, rhs, out, round, dims, name } => {
                    path = Some(
                        crate::library::dot(
                            &self.bufs[*lhs].view(ptrs[*lhs]),
                            &self.bufs[*rhs].view(ptrs[*rhs]),
                            &self.bufs[*out].view(ptrs[*out]),
                            *round,
                            dims,
                        )
                        .map_err(|reason| kernel(name, reason))?,
                    );
                    (KernelKind::Dot, name)
                }
                Step::Conv { lhs, rhs, out, conv, name } => {
                    path = Some(
                        crate::library::conv(
                            &self.bufs[*lhs].view(ptrs[*lhs]),
                            &self.bufs[*rhs].view(ptrs[*rhs]),
                            &self.bufs[*out].view(ptrs[*out]),
                            conv,
                        )
                        .map_err(|reason| kernel(name, reason))?,
                    );
                    (KernelKind::Convolution, name)
                }
                Step::Sort { cmp, operands, outs, dim, name } => {
                    crate::library::sort(
                        self.code.fns[*cmp],
                        &operands.iter().map(|&s| self.bufs[s].view(ptrs[s])).collect::<Vec<_>>(),
                        &outs.iter().map(|&s| self.bufs[s].view(ptrs[s])).collect::<Vec<_>>(),
                        *dim,
                    );
                    (KernelKind::Sort, name)
                }
                Step::TopK { operand, values, indices, k, largest, name } => {
                    crate::library::topk(
                        &self.bufs[*operand].view(ptrs[*operand]),
                        &self.bufs[*values].view(ptrs[*values]),
                        &self.bufs[*indices].view(ptrs[*indices]),
                        *k,
                        *largest,
                    )
                    .map_err(|reason| kernel(name, reason))?;
                    (KernelKind::Sort, name)
                }
                Step::DeviceId { out } => {
                    let d = device.map_or(0, |d| d.index) as u32;
                    // SAFETY: `out` is a u32 scalar buffer.
                    unsafe { std::ptr::write_unaligned(ptrs[*out] as *mut u32, d) };
                    (KernelKind::Copy, "partition-id")
                }
                Step::RngState { out, counter, delta } => {
                    let now = {
                        let mut map = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                        let c = map
                            .entry((device.map_or(0, |d| d.index), *counter))
                            .or_insert(hlo_interp::rng::INITIAL_STATE);
                        let now = *c;
                        *c = c.wrapping_add(*delta as i128 as u128);
                        now
                    };
                    // SAFETY: `out` is a u64[2] buffer (16 bytes).
                    unsafe {
                        std::ptr::write_unaligned(ptrs[*out] as *mut u64, now as u64);
                        std::ptr::write_unaligned(
                            (ptrs[*out] as *mut u64).add(1),
                            (now >> 64) as u64,
                        );
                    }
                    (KernelKind::Copy, "rng-get-and-update-state")
                }
                Step::Collective { opcode, attrs, reducer, operands, outs, alone, name } => {
                    self.collective(device, *opcode, attrs, *reducer, operands, outs, alone, ptrs)
                        .map_err(|error| RunError::Collective {
                            instruction: name.clone(),
                            error,
                        })?;
                    (KernelKind::Collective, name)
                }
                Step::Copy { moves } => {
                    self.copy(moves, ptrs);
                    (KernelKind::Copy, "copy")
                }
                Step::While { cond, pred, body, write_back } => {
                    loop {
                        self.exec(cond, ptrs, scratch, stats, device)?;
                        // SAFETY: `pred` is a one-byte pred buffer the condition wrote.
                        if unsafe { *ptrs[*pred] } == 0 {
                            break;
                        }
                        self.exec(body, ptrs, scratch, stats, device)?;
                        self.copy(write_back, ptrs);
                    }
                    continue;
                }
                Step::Conditional { selector, is_pred, branches } => {
                    // SAFETY: the selector is a scalar pred or s32 buffer.
                    let k = unsafe {
                        if *is_pred {
                            if *ptrs[*selector] != 0 { 0 } else { 1 }
                        } else {
                            let v = std::ptr::read_unaligned(ptrs[*selector] as *const i32) as i64;
                            let n = branches.len() as i64;
                            (if v < 0 || v >= n { n - 1 } else { v }) as usize
                        }
                    };
                    let (bs, moves) = &branches[k];
                    self.exec(bs, ptrs, scratch, stats, device)?;
                    self.copy(moves, ptrs);
                    continue;
                }
            };
            if let (Some(t0), Some(st)) = (t0, stats.as_mut()) {
                let d = t0.elapsed();
                let e = st.by_kind.entry(kind).or_default();
                e.0 += 1;
                e.1 += d;
                let e = st.by_name.entry(name.to_string()).or_insert((kind, 0, Duration::ZERO));
                e.1 += 1;
                e.2 += d;
                if let Some(n) = parts {
                    let p = st.parts.entry(name.to_string()).or_insert(n);
                    *p = (*p).max(n);
                }
                let path = path.unwrap_or_else(|| kind.path());
                st.paths.entry(kind).or_default().insert(path);
            }
        }
        Ok(())
    }

    /// Runs one collective: the operands' bytes go to the device fabric as they lie in
    /// the arena, meet the other devices' there, and the results are copied back. On one
    /// device (no fabric) each result is its operand, when `alone` (the planner's verdict)
    /// allows it.
    #[allow(clippy::too_many_arguments)]
    fn collective(
        &self,
        device: Option<Device<'_>>,
        opcode: Opcode,
        attrs: &hlo_ir::op::CollectiveAttrs,
        reducer: Option<Opcode>,
        operands: &[Slot],
        outs: &[Slot],
        alone: &Result<(), FabricError>,
        ptrs: &[*mut u8],
    ) -> Result<(), FabricError> {
        let Some(dev) = device else {
            // One device: a collective over groups of one is the identity (the results are
            // buffers of their own).
            alone.clone()?;
            for (&f, &t) in operands.iter().zip(outs) {
                // SAFETY: the planner checked that both buffers have the same element type
                // and dims (`alone`), so both hold `bytes` bytes; they are distinct.
                unsafe { std::ptr::copy_nonoverlapping(ptrs[f], ptrs[t], self.bufs[t].bytes) };
            }
            return Ok(());
        };
        let tensors: Vec<Tensor> = operands
            .iter()
            .map(|&s| {
                let b = &self.bufs[s];
                // SAFETY: buffer `s` holds `b.bytes` bytes of its shape.
                let bytes = unsafe { std::slice::from_raw_parts(ptrs[s], b.bytes) }.to_vec();
                Tensor::from_bytes(b.elem, b.dims.iter().map(|&d| d as u64).collect(), bytes)
                    .map_err(|e| FabricError::Malformed(e.to_string()))
            })
            .collect::<Result<_, FabricError>>()?;
        let results = hlo_fabric::execute(dev.fabric, dev.index, opcode, attrs, reducer, tensors)?;
        if results.len() != outs.len() {
            return Err(FabricError::Malformed(format!(
                "{} results for {} outputs",
                results.len(),
                outs.len()
            )));
        }
        for (t, &o) in results.iter().zip(outs) {
            if t.bytes().len() != self.bufs[o].bytes {
                return Err(FabricError::Malformed(format!(
                    "a result of {} bytes for a buffer of {}",
                    t.bytes().len(),
                    self.bufs[o].bytes
                )));
            }
            // SAFETY: buffer `o` holds exactly this many bytes.
            unsafe { std::ptr::copy_nonoverlapping(t.bytes().as_ptr(), ptrs[o], t.bytes().len()) };
        }
        Ok(())
    }

    /// Runs the copies of a `Planner::parallel_copy` in order.
    fn copy(&self, moves: &[(Slot, Slot)], ptrs: &[*mut u8]) {
        for &(f, t) in moves {
            // SAFETY: both buffers hold values of the same byte size; the planner ordered
            // the copies so that no source is overwritten before it is read, and views of
            // one buffer are never copied onto each other (`ptr::copy` allows overlap).
            unsafe { std::ptr::copy(ptrs[f], ptrs[t], self.bufs[t].bytes) };
        }
    }
}

/// A library kernel's refusal of instruction `name`'s operands.
fn kernel(name: &str, reason: String) -> RunError {
    RunError::Kernel { instruction: name.to_string(), reason }
}

/// A kernel-argument array shared by the parts of a split kernel.
/// A run's buffer addresses, kernel-argument array and statistics, handed to a pool thread
/// that runs the whole run ([`Executable::run`] on one device).
struct InPool<'a, 's> {
    ptrs: &'a [*mut u8],
    args: &'a mut Vec<*mut u8>,
    stats: &'a mut Option<&'s mut Stats>,
}
// SAFETY: the run's thread waits for the pool thread that uses them (`install`), so the
// buffers and arrays outlive it and no one else touches them meanwhile.
unsafe impl Send for InPool<'_, '_> {}

struct SendPtr(*const *mut u8);
// SAFETY: the array and the buffers it points to outlive the `in_parts` call that uses it;
// the parts only read the array and write disjoint elements.
unsafe impl Sync for SendPtr {}

impl Buffer {
    fn view(&self, ptr: *mut u8) -> View {
        View { ptr, elem: self.elem, dims: self.dims.iter().map(|&d| d as usize).collect() }
    }
}

/// `n` zeroed words, or `None` when the allocator cannot give them (an arena too large for
/// the memory left: an error for the run, not an abort of the process). Zeroed by the
/// allocator, so fresh pages are not written here.
fn zeroed_words(n: usize) -> Option<Vec<u64>> {
    let layout = std::alloc::Layout::array::<u64>(n).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of `n` u64s, all of
    // them initialized (zero bits are a valid u64).
    Some(unsafe { Vec::from_raw_parts(p, n, n) })
}
