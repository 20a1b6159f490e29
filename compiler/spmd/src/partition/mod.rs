//! GSPMD's SPMD partitioner: a module whose instructions carry shardings (after
//! `sharding-propagation`) becomes the one program every device runs, parameterized by
//! `partition-id`, with per-device shapes and the collectives between devices.
//!
//! Each instruction is lowered by a rule that states which sharding it needs its operands
//! in; `Builder::reshard` moves a value from the sharding it has to the one needed:
//! - a tiling moved from one dim to another among the same devices: one `all-to-all`;
//! - along every dimension where some device's target region is not inside the region it
//!   holds, an `all-gather` within the devices that differ only along that dimension;
//! - then a `dynamic-slice` at per-device offsets (a constant table indexed by
//!   `partition-id`; no communication), padding first where a slice would be clamped.
//!
//! Rules: elementwise ops (`map` among them), broadcast, transpose and reshape run
//! locally on operands resharded to match the result; `dot` runs locally when its
//! operands agree on the contracting-dim tiling and sums the partial products with an
//! `all-reduce` (or one `reduce-scatter` when the result is needed split among the
//! summing devices), else gathers the operand tiles the output does not share; `reduce`
//! over a tiled dimension reduces locally, masking the padding of uneven shards with the
//! init value, then `all-reduce`s with its own reducer. Every other op is computed on
//! replicated operands and sliced to its sharding (GSPMD's "involuntary full
//! rematerialization"; [`Partitioned::rematerialized`] lists them).
//!
//! Uneven shards are padded chunks of `ceil(n / tiles)`: padding holds unspecified values
//! and is masked wherever it could reach a valid element (reductions, dot contraction) and
//! sliced off where arrays are gathered. Collectives get fresh `channel_id`s,
//! `use_global_device_ids=true` and replica groups in iota form where one exists.
//!
//! `tuple` and `get-tuple-element` forward their operands' values, resharded to their own
//! sharding when they carry one (as GSPMD does); the entry root ends in its sharding
//! (replicated where it has none), which is what the outputs are assembled by.
//! `while` and `conditional` bodies are partitioned as computations of their own, their
//! parameters and roots in the loop's (branch's) sharding; a tuple-shaped entry parameter
//! is one parameter of its leaves' local shapes. Manual regions (`shard_map`: between
//! `SPMDFullToShardShape` and `SPMDShardToFullShape`) are kept as written, their borders
//! the local shards of the sharded arrays. Not done: halo exchange beyond stride-1 "same"
//! convolutions (reduce-window, pad, slice, concatenate and dynamic-update-slice across
//! shard boundaries are rematerialized), windowed einsum.
//!
//! The files follow the seams of XLA's `spmd_partitioner`. The core:
//! - `builder.rs`: the state (`Builder`), the values (`PV`: a local array with its
//!   sharding, a tuple, a token, a manual region's value) and the instructions every
//!   handler emits (`SpmdBuilder`, `PartitionedHlo`);
//! - `reshard.rs`: a value moved between shardings, partial sums summed, and the
//!   collectives that do it (`PartitionedHlo::Reshard`, `spmd_partitioner_util`);
//! - `space.rs`: tilings in an op's iteration space, for the handlers that choose one;
//! - `visitor.rs`: [`partition`] and the visitor that hands each instruction to its
//!   handler (`SpmdPartitioner::Run`, `SpmdPartitioningVisitor`), with parameters, tuples
//!   and the default action (computed replicated).
//!
//! The handlers, one file per op family: `elementwise.rs` (elementwise, broadcast,
//! transpose, reshape, iota, constants, copies), `dot.rs` (`dot_handler`),
//! `convolution.rs` (`convolution_handler`: as a contraction, or by halo exchange),
//! `reduce.rs`, `data_movement.rs` (slice, dynamic (update) slice, pad, concatenate,
//! reverse, reduce-window, select-and-scatter, sort), `gather_scatter.rs`
//! (`gather_scatter_handler`), `manual.rs` (`custom_call_handler`'s manual-region
//! borders and the regions kept as written), `control_flow.rs` (while, conditional).
//! Each file's doc says what it handles and how.

mod builder;
mod control_flow;
mod convolution;
mod data_movement;
mod dot;
mod elementwise;
mod gather_scatter;
mod manual;
mod reduce;
mod reshard;
mod space;
mod visitor;

pub(crate) use builder::as_tiling;
pub use builder::{PartialSums, Partitioned};
pub use reshard::replica_groups;
pub use visitor::{device_count, partition, partition_with};
