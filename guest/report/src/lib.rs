//! sharedos-report: what the gate inside the guest and the rig on the host both use. The guest
//! writes reports and the host reads, rechecks and extends them, so the schema, the comparisons
//! and the helpers both sides run live here once, apart from either side's own code.

pub mod cause;
pub mod checkpoint;
pub mod clock;
pub mod compare;
pub mod digest;
pub mod environment;
pub mod fidelity;
pub mod ksm;
pub mod model;
pub mod procfs;
pub mod random;
pub mod report;
pub mod signals;
pub mod text;
pub mod wait;
pub mod which;
