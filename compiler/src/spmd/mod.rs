//! SPMD: from one global program with shardings to the program each of N devices runs
//! ([`partition`]), and the device-side meaning of the collectives it inserts
//! ([`collectives`]): the runtime and the interpreter run a partitioned module on N
//! devices through [`collectives::Fabric`].

pub mod collectives;
pub mod devices;
pub mod geometry;
pub mod inventory;
pub mod partition;

pub use partition::{Partitioned, device_count, partition};
