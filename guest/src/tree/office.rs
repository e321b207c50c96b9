//! The office workload's tree: LibreOffice Writer on VCL's plain X11 backend (no GTK), under
//! openbox, with a private profile in the tree's /tmp built at its first start.

use super::workload::{After, Program, TreeFile};

/// The profile's directory in the tree's /tmp (`-env:UserInstallation`).
pub const OFFICE_PROFILE: &str = "/tmp/sharedos-office";
/// The class half of the Writer window's WM_CLASS on the plain X11 backend.
pub const OFFICE_CLASS: &str = "libreoffice-writer";

/// The settings put into the profile before its first start, which keeps them: no dialog at
/// the first start (the tip of the day would take the typed keys), and no autocorrection or
/// word completion, which would change what is typed (the space of a change capitalises the
/// first letter of a sentence) so that the document no longer holds exactly that.
pub fn office_registry() -> String {
    let item = |path: &str, name: &str| {
        format!(
            r#"<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>false</value></prop></item>"#
        )
    };
    let items = [
        item("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay"),
        item("/org.openoffice.Office.Common/Misc", "FirstRun"),
        item(
            "/org.openoffice.Office.Common/AutoCorrect",
            "CapitalAtStartSentence",
        ),
        item(
            "/org.openoffice.Office.Common/AutoCorrect",
            "TwoCapitalsAtStart",
        ),
        item("/org.openoffice.Office.Common/AutoCorrect", "ChangeDash"),
        item(
            "/org.openoffice.Office.Common/AutoCorrect",
            "UseReplacementTable",
        ),
        item(
            "/org.openoffice.Office.Common/AutoCorrect",
            "ChangeOrdinalNumber",
        ),
        item(
            "/org.openoffice.Office.Writer/AutoFunction/Completion",
            "Enable",
        ),
        item(
            "/org.openoffice.Office.Writer/AutoFunction/Format/Option",
            "UseAutoCorrect",
        ),
    ];
    let geometry = format!(
        r#"<item oor:path="/org.openoffice.Setup/Factories/org.openoffice.Setup:Factory['com.sun.star.text.TextDocument']"><prop oor:name="ooSetupFactoryWindowAttributes" oor:op="fuse"><value>{WINDOW_STATE}</value></prop></item>"#
    );
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<oor:items xmlns:oor=\"http://openoffice.org/2001/registry\" xmlns:xs=\"http://www.w3.org/2001/XMLSchema\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\">\n{}\n</oor:items>\n",
        items.join("\n") + "\n" + &geometry
    )
}

/// Writer's window as VCL records a window's state (`x,y,width,height;state;` and the same for
/// its maximised size, state 1 being normal): 520x360 at the top left, clear of the mark
/// isolation and reset draw at 560,400, which a window covering the screen hides.
const WINDOW_STATE: &str = "0,0,520,360;1;0,0,520,360;";

/// Writer with a new document: no splash, no document recovery, no lock file check.
pub fn office_argv() -> Vec<String> {
    [
        "soffice",
        &format!("-env:UserInstallation=file://{OFFICE_PROFILE}"),
        "--norestore",
        "--nologo",
        "--nolockcheck",
        "--writer",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The programs the office tree starts after the state app, and its files.
pub fn office_programs() -> (Vec<Program>, Vec<TreeFile>) {
    let files = vec![TreeFile {
        path: "/tmp/sharedos-office/user/registrymodifications.xcu",
        text: office_registry(),
    }];
    let wm = Program::new("openbox", vec!["openbox".into()]);
    let mut office = Program::new("soffice", office_argv());
    office.env.push(("SAL_USE_VCLPLUGIN".into(), "gen".into()));
    // As with the desktop's editor: its map request goes to a manager that is up.
    office.after = vec![After::WindowManager];
    (vec![wm, office], files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_runs_on_the_x11_backend_with_its_profile_in_the_tree() {
        let (programs, files) = office_programs();
        let names: Vec<_> = programs.iter().map(|p| p.name).collect();
        assert_eq!(names, ["openbox", "soffice"]);
        let office = &programs[1];
        assert!(office
            .env
            .contains(&("SAL_USE_VCLPLUGIN".into(), "gen".into())));
        assert_eq!(office.after, [After::WindowManager]);
        assert!(office
            .argv
            .contains(&"-env:UserInstallation=file:///tmp/sharedos-office".to_string()));
        assert!(files[0].path.starts_with(OFFICE_PROFILE));
        let xcu = office_registry();
        assert!(xcu.contains(r#"oor:name="ShowTipOfTheDay""#));
        assert!(xcu.contains(r#"oor:name="CapitalAtStartSentence""#));
        assert!(!xcu.contains("<value>true</value>"));
    }
}
