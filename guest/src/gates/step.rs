//! A command a gate runs, as the one pure function that builds it returns it. The gate runs what
//! the function returns; `diagnose --plan` prints what the same function returns for the run's
//! configuration, with a placeholder for what only the run knows (a pid). Steps carried out
//! in-process (mount(2), kill(2), cgroup2 files) or by the tree's PID 1 carry the equivalent
//! command line, for readers of the plan.

/// What kind of command a step is. While a gate runs it may execute only the kinds its plan
/// lists (`Ctx::run` refuses the others), so the plan cannot leave out a kind of command a gate
/// runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A tool's version from its Debian package.
    PackageVersion,
    /// A tool's version from the tool itself.
    ProgramVersion,
    CriuVersion,
    CriuCheck,
    /// The read-only bind of / (mount(2)).
    RootBind,
    /// With `--cow-root`: the tmpfs of the upper layers (mount(2)).
    CowTmpfs,
    /// With `--cow-root`: a tree's overlay root (mount(2)).
    CowOverlay,
    /// With `--cow-root`: a copy's upper layer starts as the original's (`cp -a`).
    CarryLayer,
    /// With `--cgroup`: a tree's group and its limits (cgroup2 files).
    Cgroup,
    /// `sharedos-gate tree-spawn` after unshare(2).
    SpawnTree,
    /// The util-linux command equivalent to the spawn, for readers only.
    UnshareEquivalent,
    /// What the tree's PID 1 execs, and what it starts inside the tree.
    InTree,
    CriuDump,
    CriuRestore,
    /// A copy's firewall rules, listed from inside its network namespace.
    FirewallList,
    /// SIGKILL to a tree's PID 1 (kill(2)), then the wait until its pid namespace is empty.
    KillTree,
    /// SIGTERM, then SIGKILL, to other marked processes (kill(2)).
    KillMarked,
}

/// A pid the plan cannot know: the run fills it in.
pub const PID: &str = "PID";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub kind: Kind,
    /// The step's name in the gate's evidence.
    pub label: String,
    /// What the plan says of it.
    pub what: String,
    pub argv: Vec<String>,
}

impl Step {
    pub fn new(kind: Kind, label: &str, what: &str, argv: Vec<String>) -> Step {
        Step {
            kind,
            label: label.to_string(),
            what: what.to_string(),
            argv,
        }
    }

    /// A step that is not executed as a command (made in-process or by the tree itself): its
    /// plan text is all there is to name it.
    pub fn described(kind: Kind, what: &str, argv: Vec<String>) -> Step {
        Step::new(kind, what, what, argv)
    }
}

/// Owned strings from string slices, for argv literals.
pub fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}
