//! sharedos-gate: the diagnostic that runs inside the guest (or on any Linux as root), and the
//! report schema both sides share.

pub mod criu;
pub mod diagnose;
pub mod exec;
pub mod gates;
pub mod lies;
pub mod probe;
pub mod pstree;
pub mod stateapp;
pub mod tree;
pub mod x11;
