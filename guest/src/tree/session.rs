//! The `session` workload: a full XFCE session. PID 1 starts the session bus, then
//! `xfce4-session`, which starts its failsafe session's clients (the window manager xfwm4, the
//! settings daemon xfsettingsd, the panel); the bus starts xfconfd when the first of them asks
//! for a setting. Every setting they read is written here into the tree's private HOME
//! (`/tmp`): the system's XDG config dirs are replaced by an empty one, so neither its
//! autostart entries (a screensaver, a power manager, a polkit agent) nor its failsafe
//! session's optional parts (xfdesktop, Thunar, not installed) are started.

use super::workload::{After, Program, TreeFile};
use super::{dbus_argv, BUS_SOCKET};

/// The window manager's name as it announces itself (`_NET_SUPPORTING_WM_CHECK`).
pub const SESSION_WM_NAME: &str = "Xfwm4";
/// The WM_CLASS class of the panel's window.
pub const PANEL_CLASS: &str = "Xfce4-panel";
/// The GTK theme the session's settings store gives the settings daemon to publish: seen in
/// the published XSETTINGS, it shows the daemon serves this session's settings (GTK's own
/// default is another).
pub const SETTINGS_NEEDLE: &str = "Adwaita-dark";
/// The XSETTINGS selection of screen 0, which the settings daemon owns while it runs.
pub const XSETTINGS_SELECTION: &str = "_XSETTINGS_S0";
/// How many workspaces the window manager keeps: the live probe switches to one other than
/// the first.
pub const WORKSPACES: u32 = 4;
/// The empty directory that stands for the system's XDG config dirs.
const XDG_CONFIG_DIRS: &str = "/tmp/sharedos-xdg";

/// The environment of every process of the session's tree (the bus starts xfconfd with its
/// own): the bus, the private XDG config, and no accessibility bridge (GTK would have the bus
/// start at-spi's own bus and registry, two more processes no part of the session needs).
pub fn session_env() -> Vec<(String, String)> {
    [
        (
            "DBUS_SESSION_BUS_ADDRESS",
            format!("unix:path={BUS_SOCKET}"),
        ),
        ("XDG_CONFIG_HOME", "/tmp/.config".to_string()),
        ("XDG_CONFIG_DIRS", XDG_CONFIG_DIRS.to_string()),
        ("XDG_CACHE_HOME", "/tmp/.cache".to_string()),
        ("XDG_DATA_HOME", "/tmp/.local/share".to_string()),
        ("NO_AT_BRIDGE", "1".to_string()),
        ("GTK_A11Y", "none".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The failsafe session: exactly the installed clients, no agents (ssh-agent and gpg-agent
/// would leave the tree's process group as daemons), nothing saved at logout.
const SESSION_XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfce4-session" version="1.0">
  <property name="general" type="empty">
    <property name="FailsafeSessionName" type="string" value="Failsafe"/>
    <property name="LockCommand" type="string" value=""/>
    <property name="SaveOnExit" type="bool" value="false"/>
    <property name="AutoSave" type="bool" value="false"/>
    <property name="PromptOnLogout" type="bool" value="false"/>
  </property>
  <property name="startup" type="empty">
    <property name="ssh-agent" type="empty"><property name="enabled" type="bool" value="false"/></property>
    <property name="gpg-agent" type="empty"><property name="enabled" type="bool" value="false"/></property>
  </property>
  <property name="compat" type="empty">
    <property name="LaunchGNOME" type="bool" value="false"/>
    <property name="LaunchKDE" type="bool" value="false"/>
  </property>
  <property name="sessions" type="empty">
    <property name="Failsafe" type="empty">
      <property name="IsFailsafe" type="bool" value="true"/>
      <property name="Count" type="int" value="3"/>
      <property name="Client0_Command" type="array"><value type="string" value="xfwm4"/></property>
      <property name="Client0_Priority" type="int" value="15"/>
      <property name="Client0_PerScreen" type="bool" value="false"/>
      <property name="Client1_Command" type="array"><value type="string" value="xfsettingsd"/></property>
      <property name="Client1_Priority" type="int" value="20"/>
      <property name="Client1_PerScreen" type="bool" value="false"/>
      <property name="Client2_Command" type="array"><value type="string" value="xfce4-panel"/></property>
      <property name="Client2_Priority" type="int" value="25"/>
      <property name="Client2_PerScreen" type="bool" value="false"/>
    </property>
  </property>
</channel>
"#;

/// One panel along the top with only a pager (in the panel's own process): no clock, whose
/// ticking would change the framebuffer between two grabs, and the pager shows which workspace
/// is current. At the top it stays clear of the mark the gates draw at the bottom right, which
/// a repaint of the panel would cover.
const PANEL_XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfce4-panel" version="1.0">
  <property name="configver" type="int" value="2"/>
  <property name="panels" type="array">
    <value type="int" value="1"/>
    <property name="panel-1" type="empty">
      <property name="position" type="string" value="p=6;x=320;y=15"/>
      <property name="length" type="uint" value="100"/>
      <property name="position-locked" type="bool" value="true"/>
      <property name="size" type="uint" value="30"/>
      <property name="plugin-ids" type="array"><value type="int" value="1"/></property>
    </property>
  </property>
  <property name="plugins" type="empty">
    <property name="plugin-1" type="string" value="pager"/>
  </property>
</channel>
"#;

/// Four workspaces, the theme xfwm4 ships, and no compositor (under Xvfb it would only redraw).
fn wm_xml() -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfwm4" version="1.0">
  <property name="general" type="empty">
    <property name="workspace_count" type="int" value="{WORKSPACES}"/>
    <property name="theme" type="string" value="Default"/>
    <property name="use_compositing" type="bool" value="false"/>
    <property name="sync_to_vblank" type="bool" value="false"/>
  </property>
</channel>
"#
    )
}

/// What the settings daemon publishes over XSETTINGS, which GTK prefers to its settings.ini: no
/// blinking cursor and no animations, so an idle screen stays still between grabs.
const XSETTINGS_XML: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<channel name="xsettings" version="1.0">
  <property name="Net" type="empty">
    <property name="ThemeName" type="string" value="Adwaita-dark"/>
    <property name="CursorBlink" type="bool" value="false"/>
    <property name="EnableEventSounds" type="bool" value="false"/>
  </property>
  <property name="Gtk" type="empty">
    <property name="EnableAnimations" type="bool" value="false"/>
  </property>
</channel>
"#;

/// The session's files in the tree's /tmp: GTK's settings (`gtk_settings`) and one xfconf
/// channel per program, where xfconfd looks first.
pub fn session_files(gtk_settings: &str) -> Vec<TreeFile> {
    vec![
        TreeFile {
            path: "/tmp/.config/gtk-3.0/settings.ini",
            text: gtk_settings.into(),
        },
        TreeFile {
            path: "/tmp/.config/xfce4/xfconf/xfce-perchannel-xml/xfce4-session.xml",
            text: SESSION_XML.into(),
        },
        TreeFile {
            path: "/tmp/.config/xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml",
            text: PANEL_XML.into(),
        },
        TreeFile {
            path: "/tmp/.config/xfce4/xfconf/xfce-perchannel-xml/xfwm4.xml",
            text: wm_xml(),
        },
        TreeFile {
            path: "/tmp/.config/xfce4/xfconf/xfce-perchannel-xml/xsettings.xml",
            text: XSETTINGS_XML.into(),
        },
    ]
}

/// The session's programs after the state app: the bus, then the session manager once the
/// bus's socket is there, with `pidfd_open(2)` refused to it and its clients.
pub fn session_programs() -> Vec<Program> {
    let mut session = Program::new("xfce4-session", vec!["xfce4-session".into()]);
    session.after = vec![After::Path(BUS_SOCKET)];
    session.refuse_pidfd_open = true;
    vec![Program::new("dbus", dbus_argv()), session]
}

/// The session's processes a probe expects, beside Xvfb and the state app.
pub fn session_processes() -> [(&'static str, &'static str, &'static str); 6] {
    [
        (
            "dbus-daemon",
            "dbus_process",
            "the session bus (dbus-daemon)",
        ),
        (
            "xfce4-session",
            "session_process",
            "the session manager (xfce4-session)",
        ),
        ("xfwm4", "wm_process", "the window manager (xfwm4)"),
        ("xfce4-panel", "panel_process", "the panel (xfce4-panel)"),
        (
            "xfsettingsd",
            "settings_process",
            "the settings daemon (xfsettingsd)",
        ),
        (
            "xfconfd",
            "xfconf_process",
            "the settings store (xfconfd, started by the bus)",
        ),
    ]
}

/// The system call number of `pidfd_open(2)` on x86-64, and the audit arch the filter holds it
/// to (on another arch the filter lets everything through).
const SYS_PIDFD_OPEN: u32 = 434;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const ENOSYS: u32 = 38;

/// A seccomp filter on the command's process, kept across its exec and by everything it
/// starts: `pidfd_open(2)` fails with ENOSYS, as on a kernel before 5.3; every other call is
/// let through. GLib 2.74 watches each child it spawns through a pidfd when it can, and falls
/// back to SIGCHLD when `pidfd_open` fails; xfce4-session spawns its clients, so it held one
/// pidfd per client, and criu 3.17.1 cannot dump a pidfd (`Can't dump file ... of that type
/// [600] (anon anon_inode:[pidfd])`): the session's dump failed on it.
pub fn refuse_pidfd_open(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    #[repr(C)]
    struct SockFilter {
        code: u16,
        jt: u8,
        jf: u8,
        k: u32,
    }
    #[repr(C)]
    struct SockFprog {
        len: u16,
        filter: *const SockFilter,
    }
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    // seccomp_data: nr at offset 0, arch at 4.
    const FILTER: [SockFilter; 6] = [
        SockFilter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 4,
        },
        SockFilter {
            code: JEQ_K,
            jt: 0,
            jf: 3,
            k: AUDIT_ARCH_X86_64,
        },
        SockFilter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        SockFilter {
            code: JEQ_K,
            jt: 0,
            jf: 1,
            k: SYS_PIDFD_OPEN,
        },
        SockFilter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: RET_ERRNO | ENOSYS,
        },
        SockFilter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        },
    ];
    // SAFETY: the hook runs in the child between fork and exec and only makes two prctl calls
    // on memory that lives for the whole program (a const), allocating nothing.
    unsafe {
        cmd.pre_exec(|| {
            let prog = SockFprog {
                len: FILTER.len() as u16,
                filter: FILTER.as_ptr(),
            };
            if nix::libc::prctl(nix::libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mode_filter: nix::libc::c_ulong = 2;
            if nix::libc::prctl(
                nix::libc::PR_SET_SECCOMP,
                mode_filter,
                &prog as *const SockFprog,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_starts_exactly_the_installed_clients_and_no_clock() {
        let files = session_files("[Settings]\n");
        let session = files
            .iter()
            .find(|f| f.path.ends_with("xfce4-session.xml"))
            .unwrap();
        for client in ["xfwm4", "xfsettingsd", "xfce4-panel"] {
            assert!(
                session.text.contains(&format!("value=\"{client}\"")),
                "{client}"
            );
        }
        for absent in ["xfdesktop", "Thunar", "light-locker", "xfce4-power-manager"] {
            assert!(!files.iter().any(|f| f.text.contains(absent)), "{absent}");
        }
        assert!(session
            .text
            .contains("<property name=\"Count\" type=\"int\" value=\"3\"/>"));
        let panel = files
            .iter()
            .find(|f| f.path.ends_with("xfce4-panel.xml"))
            .unwrap();
        assert!(!panel.text.contains("clock"));
        assert!(files.iter().all(|f| f.path.starts_with("/tmp/.config/")));
        assert!(wm_xml().contains("value=\"4\""));
        let env = session_env();
        assert!(env.contains(&("XDG_CONFIG_DIRS".into(), XDG_CONFIG_DIRS.into())));
        let names: Vec<&str> = session_programs().iter().map(|p| p.name).collect();
        assert_eq!(names, ["dbus", "xfce4-session"]);
        let refused: Vec<bool> = session_programs()
            .iter()
            .map(|p| p.refuse_pidfd_open)
            .collect();
        assert_eq!(refused, [false, true]);
    }

    /// A process under the filter gets ENOSYS from pidfd_open, and runs otherwise (perl,
    /// Debian's essential perl-base, makes the raw call; the shell and grep run under it too).
    #[test]
    fn the_filter_refuses_pidfd_open_and_lets_the_rest_through() {
        let probe = "grep '^Seccomp:' /proc/self/status; \
                     perl -e '$r = syscall(434, $$ + 0, 0); print \"pidfd_open $r \", $! + 0, \"\\n\"'";
        let mut cmd = crate::exec::command("/bin/sh");
        cmd.args(["-c", probe]);
        refuse_pidfd_open(&mut cmd);
        let out = cmd.output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Seccomp:\t2"), "{text}");
        assert!(text.contains(&format!("pidfd_open -1 {ENOSYS}")), "{text}");
        // Without the filter the call succeeds (a pidfd, fd 3 or above).
        let mut plain = crate::exec::command("/bin/sh");
        plain.args(["-c", probe]);
        let text = String::from_utf8_lossy(&plain.output().unwrap().stdout).into_owned();
        assert!(!text.contains("pidfd_open -1"), "{text}");
    }
}
