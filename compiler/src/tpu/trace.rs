//! Chrome-trace (Perfetto) timelines of a simulation.
