//! The plain data the checks compare and the host reads back from a report: what the app
//! answered, what the X server showed, the trees and processes a run saw, and the density
//! gate's figures. Gathering them (sockets, the X wire, /proc) is the guest's business.

pub mod app;
pub mod density;
pub mod screen;
pub mod tree;
