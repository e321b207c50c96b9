//! sharedos-rig: the host side. Builds the pinned guest image, boots it in QEMU, runs the gate
//! binary over SSH and archives, renders, reviews and verifies the reports it brings back.

pub mod builder_vm;
pub mod cache_inventory;
pub mod cmd;
pub mod compare;
pub mod escape;
pub mod gate_binary;
pub mod image;
pub mod judge;
pub mod matrix;
pub mod migrate;
pub mod progress;
pub mod render;
pub mod run;
pub mod vm;
