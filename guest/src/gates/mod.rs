//! The ten gates of the SPEC and the optional density gate, one file each, and what they share:
//! the run's context (ctx), restoring and ending copies (copies), the checks of a copy's state
//! (state), the gate builder, and the fidelity options.

pub mod builder;
pub mod copies;
pub mod ctx;
pub mod fidelity;
pub mod state;

pub mod cleanup;
pub mod density;
pub mod dump;
pub mod gui_pixel_review;
pub mod isolation;
pub mod launch;
pub mod live_state_probe;
pub mod prerequisites;
pub mod reset;
pub mod restore_live_process;
pub mod restore_x_state;

pub use builder::GateBuilder;
pub use ctx::{Config, Ctx, MARK, MARK_RGB};
