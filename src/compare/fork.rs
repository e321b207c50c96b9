//! The guest's side of a VM fork, as the commands the host runs over SSH: the run started apart
//! from any SSH session (the saved guest is resumed in copies that have none of the host's
//! connections), the wait for its fork-time state, the go a copy gets, and the copy's run
//! followed to its end. Each is built by one pure function, so a test holds the words.

use crate::run::{GUEST_REPORT_DIR, GUEST_WORK};
use sharedos_report::checkpoint::CarriedState;
use sharedos_report::text::shell_words;
use std::time::Duration;

/// The file each copy is given its label in; the run waits for it after its fork-time state.
pub const GO: &str = "/root/fork-go";
/// The run's output, and its process id.
pub const LOG: &str = "/root/fork.log";
pub const PID: &str = "/root/fork.pid";
/// What the gate binary writes under its work directory once the fork-time state is recorded
/// (`sharedos_gate::vmfork::READY_FILE`).
pub const READY: &str = "fork-ready";

/// The diagnose arguments of a VM fork: wait up to `wait` for the go.
pub fn diagnose_args(wait: Duration) -> Vec<String> {
    vec![
        "--vm-fork-go".into(),
        GO.into(),
        "--vm-fork-wait".into(),
        wait.as_secs().max(1).to_string(),
    ]
}

/// Starts `argv` in a session of its own, its output to [`LOG`], its pid in [`PID`]. `setsid
/// -f` forks, and nothing of the run holds the SSH channel's descriptors, so the SSH command
/// returns at once.
pub fn start_command(argv: &[String]) -> String {
    format!(
        "rm -f {GO} {LOG} {PID} && setsid -f sh -c 'echo $$ >{PID}; exec \"$@\"' sh {} </dev/null >{LOG} 2>&1",
        shell_words(argv)
    )
}

/// Exit code of [`ready_command`] when the run ended before its fork-time state.
pub const ENDED_EARLY: i32 = 3;

/// Waits, in the guest, up to `within` for the fork-time state; exits [`ENDED_EARLY`] as soon as
/// the run is gone without it, and 124 (timeout's) when the time runs out.
pub fn ready_command(within: Duration) -> String {
    format!(
        "timeout {} sh -c 'until [ -e {GUEST_WORK}/{READY} ]; do if [ -s {PID} ]; then kill -0 \"$(cat {PID})\" 2>/dev/null || exit {ENDED_EARLY}; fi; sleep 0.2; done'",
        within.as_secs().max(1)
    )
}

/// The last lines of the run's output, for an error that says why it ended.
pub fn log_tail_command() -> String {
    format!("tail -n 30 {LOG}")
}

/// The guest's one network card, as the image's init names it.
pub const NIC: &str = "eth0";

/// A copy's MAC address: QEMU's own prefix `52:54` (locally administered, unicast), then the
/// first four bytes of sha256 over the comparison's `salt` and the copy's label. Copies of one
/// comparison get different ones, and none gets the saved guest's (QEMU's default
/// 52:54:00:12:34:56) but by a 2^-32 chance, which the copy's own check would catch.
pub fn copy_mac(salt: &str, label: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(format!("{salt}/{label}").as_bytes());
    format!("52:54:{:02x}:{:02x}:{:02x}:{:02x}", h[0], h[1], h[2], h[3])
}

/// Gives a copy its own host name, its own MAC, and its label: the label written aside, then
/// renamed into place, so the run never reads half of it. Every copy of one save comes up with
/// the saved guest's host name and MAC; from its go on, each has its own, as its own SSH key,
/// entropy and generation ID already are. The card announces its new address (`arp_notify`),
/// so QEMU's user network sends to it at once and the SSH session the go runs over goes on.
/// `mac` None keeps the saved guest's (`--lie same-mac`). Labels are the host's own (`copy-N`,
/// `reset`, `template-N`).
pub fn go_command(label: &str, mac: Option<&str>) -> Option<String> {
    let ok = label.starts_with(|c: char| c.is_ascii_alphanumeric())
        && label.len() <= 63
        && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !ok || mac.is_some_and(|m| !sharedos_report::compare::is_mac(m)) {
        return None;
    }
    let nic = mac
        .map(|m| {
            format!(
                "echo 1 >/proc/sys/net/ipv4/conf/{NIC}/arp_notify && ip link set dev {NIC} address {m} && "
            )
        })
        .unwrap_or_default();
    Some(format!(
        "{nic}hostname {label} && printf '%s\\n' {label} >{GO}.new && mv {GO}.new {GO}"
    ))
}

/// Has a copy's guest give the host back what it does not use: its page cache dropped, then the
/// balloon's driver loaded, which reports every free page to QEMU (`vm::qemu::balloon_args`),
/// the ones just freed among them. The tree goes on running; only caches go.
pub fn reclaim_command() -> String {
    "sync && echo 3 >/proc/sys/vm/drop_caches && modprobe virtio_balloon".into()
}

/// The fork-time state the guest's run recorded (`sharedos_gate::vmfork::FORK_STATE` in its
/// report directory), at most 1 MiB of it.
pub fn state_command() -> String {
    format!("head -c 1048576 {GUEST_REPORT_DIR}/fork/state.json")
}

/// The app's token in the fork-time state.
pub fn token_of_state(text: &str) -> anyhow::Result<String> {
    let state: CarriedState = serde_json::from_str(text)
        .map_err(|e| anyhow::anyhow!("the guest's fork/state.json does not read: {e}"))?;
    if state.app.token.is_empty() {
        anyhow::bail!("the guest's fork/state.json holds no token");
    }
    Ok(state.app.token)
}

/// The fault `--lie restarted-app` puts into a copy before its go: its state app killed and
/// started again with the same command line, in the tree's namespaces (entered through the
/// app's parent, the tree's PID 1, which then reaps it). A copy that restarted its app holds a
/// new token and a counter from zero.
pub fn restart_app_command() -> String {
    "set -e; p=$(pgrep -o -f '^[^ ]* stateapp '); \
     init=$(ps -o ppid= -p \"$p\" | tr -d ' '); \
     args=$(tr '\\0' ' ' </proc/\"$p\"/cmdline); \
     kill \"$p\"; while kill -0 \"$p\" 2>/dev/null; do sleep 0.1; done; \
     nsenter -t \"$init\" -a setsid -f $args </dev/null >/dev/null 2>&1"
        .into()
}

/// Follows the copy's run from the start of its output until it ends.
pub fn follow_command() -> String {
    format!("tail -n +1 --pid=\"$(cat {PID})\" -f {LOG}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_starts_apart_and_its_words_are_quoted() {
        let c = start_command(&[
            "/usr/local/bin/sharedos-gate".into(),
            "diagnose".into(),
            "a b".into(),
        ]);
        assert_eq!(
            c,
            "rm -f /root/fork-go /root/fork.log /root/fork.pid && setsid -f sh -c 'echo $$ >/root/fork.pid; exec \"$@\"' sh /usr/local/bin/sharedos-gate diagnose 'a b' </dev/null >/root/fork.log 2>&1"
        );
        assert_eq!(
            diagnose_args(Duration::from_secs(1800)),
            ["--vm-fork-go", "/root/fork-go", "--vm-fork-wait", "1800"]
        );
    }

    #[test]
    fn the_wait_ends_early_when_the_run_is_gone() {
        let c = ready_command(Duration::from_secs(600));
        assert!(c.starts_with("timeout 600 "), "{c}");
        assert!(
            c.contains("/root/work/fork-ready") && c.contains("exit 3"),
            "{c}"
        );
    }

    #[test]
    fn the_restarted_app_lie_restarts_it_inside_the_tree() {
        let c = restart_app_command();
        assert!(c.contains("pgrep -o -f '^[^ ]* stateapp '"), "{c}");
        assert!(c.contains("nsenter -t \"$init\" -a setsid -f $args"), "{c}");
        assert!(c.contains("tr '\\0' ' '"), "{c}");
    }

    #[test]
    fn only_the_hosts_labels_and_macs_go_in() {
        assert_eq!(
            go_command("copy-2", None).unwrap(),
            "hostname copy-2 && printf '%s\\n' copy-2 >/root/fork-go.new && mv /root/fork-go.new /root/fork-go"
        );
        assert_eq!(
            go_command("copy-2", Some("52:54:0a:1b:2c:3d")).unwrap(),
            "echo 1 >/proc/sys/net/ipv4/conf/eth0/arp_notify && ip link set dev eth0 address 52:54:0a:1b:2c:3d && hostname copy-2 && printf '%s\\n' copy-2 >/root/fork-go.new && mv /root/fork-go.new /root/fork-go"
        );
        assert!(go_command("-v", None).is_none());
        assert!(go_command(&"a".repeat(64), None).is_none());
        assert!(go_command("x; rm -rf /", None).is_none());
        assert!(go_command("", None).is_none());
        assert!(go_command("copy-2", Some("52:54:0a:1b:2c:3d; reboot")).is_none());
    }

    #[test]
    fn each_copy_gets_a_mac_of_its_own() {
        let a = copy_mac("salt", "copy-1");
        assert!(sharedos_report::compare::is_mac(&a), "{a}");
        assert!(a.starts_with("52:54:"));
        assert_eq!(a, copy_mac("salt", "copy-1"));
        assert_ne!(a, copy_mac("salt", "copy-2"));
        assert_ne!(a, copy_mac("other", "copy-1"));
    }
}
