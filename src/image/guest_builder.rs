//! Guest mode's seam. image/ boots nothing, so a build in guest mode runs mmdebstrap through a
//! [`GuestBuilder`] that its caller injects with [`BuildOptions::guest_builder`]; the front ends
//! that may build images pass the builder VM (`builder_vm`, in a layer above), a client of the
//! session layer.
//!
//! [`BuildOptions::guest_builder`]: super::BuildOptions::guest_builder

use super::builder::BuildPlan;
use super::exec::Progress;
use anyhow::Result;
use std::sync::Arc;

/// Runs a build's mmdebstrap in a guest.
pub trait GuestBuilder: Send + Sync + std::fmt::Debug {
    /// Writes the root tarball to `plan.work.tarball` and the hook outputs where the host build
    /// reads them; `message` shows how far it got.
    fn mmdebstrap(
        &self,
        plan: &BuildPlan,
        progress: &Progress,
        message: &dyn Fn(&str),
    ) -> Result<GuestBuild>;

    /// What `--plan` prints in place of the host's mmdebstrap line.
    fn plan_lines(&self, plan: &BuildPlan) -> Vec<String>;
}

/// A guest builder, shared by the options that carry it.
pub type SharedGuestBuilder = Arc<dyn GuestBuilder>;

/// What the manifest records about the guest that ran mmdebstrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestBuild {
    /// E.g. `bookworm <image sha256> under tcg`.
    pub builder: String,
}

/// The error of a guest-mode build that was given no guest builder.
pub fn unavailable(image: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "guest mode runs mmdebstrap in a VM, and this command cannot start one: build the image with \
         `cargo xtask image --image {image}`, which can"
    )
}
