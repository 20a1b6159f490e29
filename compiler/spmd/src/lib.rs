//! `hlo-spmd`: sharding (GSPMD) and SPMD partitioning: from one global program with
//! shardings to the program each of N devices runs.
//!
//! - [`sharding`]: sharding semantics (the semantic [`sharding::Spec`], named meshes,
//!   per-op propagation rules, the reshard report, comparison of sharded modules).
//! - [`sharding_propagation`]: the `sharding-propagation` pass; [`sdy_manual_regions`]:
//!   Shardy's shard_maps as GSPMD manual regions, before it.
//! - [`partition`](mod@partition): the SPMD partitioner; [`spmd_partition`]: the `spmd-partition` pass
//!   that runs it; [`geometry`]: each device's place in a tiling.
//! - [`annotate`]: shardings written onto a module exported without any, from a choice
//!   of parallelism (data parallel).
//! - [`devices`]: a partition plan (the per-device module and the global inputs' and
//!   outputs' shardings), input sharding and output assembly.
//! - [`inventory`]: the collectives a partitioned module performs and the bytes they move.
//!
//! The collectives' meaning on N devices (the fabric every engine's devices meet on) is
//! `hlo_fabric`, and a plan runs on N interpreter devices in `hlo_devices`; this crate
//! only decides where the collectives go, and runs nothing.

pub mod annotate;
pub mod devices;
pub mod geometry;
pub mod inventory;
pub mod partition;
pub mod sdy_manual_regions;
pub mod sharding;
pub mod sharding_propagation;
pub mod spmd_partition;

pub use partition::{PartialSums, Partitioned, device_count, partition, partition_with};

use hlo_pipeline::PassInfo;

/// The passes of this crate that `hloc opt --passes` can name (not in the default
/// pipeline: the compile driver runs them as the propagate and partition phases).
pub fn registry() -> Vec<PassInfo> {
    vec![
        PassInfo {
            name: "sdy-manual-regions",
            about: "Shardy's shard_map borders (xla.sdy.GlobalToLocalShape, LocalToGlobalShape) as GSPMD manual regions (not in the default pipeline)",
            make: || Box::new(sdy_manual_regions::SdyManualRegions),
        },
        PassInfo {
            name: "sharding-propagation",
            about: "GSPMD sharding propagation from the user's annotations (not in the default pipeline)",
            make: || Box::new(sharding_propagation::ShardingPropagation),
        },
        PassInfo {
            name: "spmd-partition",
            about: "the per-device SPMD program with collectives, from the shardings (after sharding-propagation; not in the default pipeline)",
            make: || Box::new(spmd_partition::SpmdPartition),
        },
    ]
}
