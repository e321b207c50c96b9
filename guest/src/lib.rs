//! sharedos-gate: the diagnostic that runs inside the guest (or on any Linux as root). The
//! report schema and the comparisons the host runs again are in sharedos-report (guest/report).
//!
//! Its modules are layered (a module imports only from layers below its own): the layers are
//! ARCHITECTURE.md's `layers guest` table, which `tests/layers.rs` holds against this crate.

pub mod criu;
pub mod diagnose;
pub mod exec;
pub mod gates;
pub mod lies;
pub mod migrate;
pub mod netns;
pub mod output;
pub mod probe;
pub mod pstree;
pub mod stateapp;
pub mod tree;
pub mod vmfork;
pub mod x11;
