use super::*;

const BASE: &str = "mirror = http://m/debian\ncomponent = main\narchitecture = amd64\n\
        variant = apt\nkernel_flavour = cloud-amd64\npackage = criu\npackage = xterm\n\
        dpkg_exclude = /usr/share/doc/*\ndpkg_include = /usr/share/doc/*/copyright\n\
        source_date_epoch = 1700000000\ndisk_size_mib = 1536\n";

fn base() -> Layer {
    Layer::parse(BASE, Level::Base, "images/base/image.conf").unwrap()
}

fn image(name: &str, text: &str) -> Layer {
    Layer::parse(text, Level::Image, &format!("images/{name}/image.conf")).unwrap()
}

fn image_err(text: &str) -> String {
    format!(
        "{:#}",
        Layer::parse(text, Level::Image, "images/x/image.conf").unwrap_err()
    )
}

/// A set of image files in memory, read the way the images directory is.
fn chain_of(files: &[(&str, &str)], name: &str) -> Result<Vec<(String, Layer)>> {
    image_chain(name, &mut |n: &str| {
        let text = files
            .iter()
            .find(|(f, _)| *f == n)
            .map(|(_, t)| *t)
            .with_context(|| format!("there is no image {n:?}"))?;
        Ok(image(n, text))
    })
}

fn compose_image(files: &[(&str, &str)], name: &str) -> Result<Definition> {
    let mut layers = vec![base()];
    layers.extend(chain_of(files, name)?.into_iter().map(|(_, l)| l));
    compose(&layers)
}

#[test]
fn an_image_takes_the_base_and_adds_its_suite() {
    let d = compose_image(&[("bookworm", "suite = bookworm\n")], "bookworm").unwrap();
    assert_eq!(d.suite, "bookworm");
    assert_eq!(d.packages, ["criu", "xterm"]);
    assert_eq!(d.disk_size_mib, 1536);
    assert_eq!(d.inodes, 65536);
    assert!(d.extra_suites.is_empty());
}

#[test]
fn a_scalar_of_the_image_replaces_the_bases() {
    let d = compose_image(
        &[(
            "big",
            "suite = bookworm\ndisk_size_mib = 4096\nmirror = http://other\n",
        )],
        "big",
    )
    .unwrap();
    assert_eq!(d.disk_size_mib, 4096);
    assert_eq!(d.mirror, "http://other");
    assert_eq!(d.source_date_epoch, 1_700_000_000);
}

#[test]
fn list_items_append_in_order_and_bang_removes_one() {
    let d = compose_image(
        &[(
            "x",
            "suite = bookworm\npackage = gedit\npackage = !xterm\ncomponent = contrib\n\
                 dpkg_exclude = /usr/share/gtk-doc/*\ndpkg_include = !/usr/share/doc/*/copyright\n",
        )],
        "x",
    )
    .unwrap();
    assert_eq!(d.packages, ["criu", "gedit"]);
    assert_eq!(d.components, ["main", "contrib"]);
    assert_eq!(
        d.dpkg_filters,
        vec![
            (false, "/usr/share/doc/*".to_string()),
            (false, "/usr/share/gtk-doc/*".to_string()),
        ]
    );
}

#[test]
fn a_removal_can_reorder_by_adding_again() {
    // dpkg applies filters in order: moving one to the end is a removal and an addition.
    let d = compose_image(
        &[(
            "x",
            "suite = bookworm\ndpkg_exclude = !/usr/share/doc/*\ndpkg_exclude = /usr/share/doc/*\n",
        )],
        "x",
    )
    .unwrap();
    assert_eq!(
        d.dpkg_filters,
        vec![
            (true, "/usr/share/doc/*/copyright".to_string()),
            (false, "/usr/share/doc/*".to_string()),
        ]
    );
}

#[test]
fn a_repeated_item_or_a_removal_of_nothing_is_refused_with_both_places() {
    let e = compose_image(&[("x", "suite = bookworm\n\npackage = criu\n")], "x")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("images/x/image.conf line 3: package = criu is already given at images/base/image.conf line 6"),
        "{e}"
    );
    let e = compose_image(&[("x", "suite = bookworm\npackage = !gedit\n")], "x")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("images/x/image.conf line 2: package = !gedit removes nothing"),
        "{e}"
    );
    // An item of one key does not remove an item of another.
    let e = compose_image(
        &[("x", "suite = bookworm\ndpkg_include = !/usr/share/doc/*\n")],
        "x",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("removes nothing"), "{e}");
}

#[test]
fn an_image_builds_on_its_parent_and_the_base() {
    let files = [
        ("bookworm", "suite = bookworm\n"),
        (
            "desktop",
            "inherit = bookworm\npackage = openbox\npackage = gedit\npackage = dbus-x11\n\
                 disk_size_mib = 2048\n",
        ),
        (
            "desktop-big",
            "inherit = desktop\ndisk_size_mib = 4096\npackage = !gedit\n",
        ),
    ];
    let d = compose_image(&files, "desktop").unwrap();
    assert_eq!(d.suite, "bookworm");
    assert_eq!(
        d.packages,
        ["criu", "xterm", "openbox", "gedit", "dbus-x11"]
    );
    assert_eq!(d.disk_size_mib, 2048);
    let d = compose_image(&files, "desktop-big").unwrap();
    assert_eq!(d.packages, ["criu", "xterm", "openbox", "dbus-x11"]);
    assert_eq!(d.disk_size_mib, 4096);
    let names: Vec<String> = chain_of(&files, "desktop-big")
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["bookworm", "desktop", "desktop-big"]);
    // The parent is untouched by what its children do.
    assert_eq!(
        compose_image(&files, "bookworm").unwrap().packages,
        ["criu", "xterm"]
    );
}

#[test]
fn a_child_may_change_its_parents_suites() {
    let files = [
        ("trixie", "suite = trixie\n"),
        (
            "trixie-bpo",
            "inherit = trixie\nextra_suite = trixie-backports\n\
                 extra_suite_package = linux-image-cloud-amd64\n",
        ),
        (
            "trixie-bpo-criu",
            "inherit = trixie-bpo\nextra_suite_package = criu\n",
        ),
    ];
    let d = compose_image(&files, "trixie-bpo-criu").unwrap();
    assert_eq!(d.extra_suite_names(), ["trixie-backports"]);
    assert_eq!(
        d.extra_suites[0].packages,
        ["linux-image-cloud-amd64", "criu"]
    );
    assert_eq!(
        d.include_packages(),
        [
            "criu/trixie-backports",
            "xterm",
            "linux-image-cloud-amd64/trixie-backports"
        ]
    );
}

/// trixie-bpo and its child that takes criu from a second extra suite.
const TRIXIE_BPO: [(&str, &str); 2] = [
    (
        "trixie",
        "suite = trixie
",
    ),
    (
        "trixie-bpo",
        "inherit = trixie
extra_suite = trixie-backports
\
             extra_suite_package = linux-image-cloud-amd64
",
    ),
];

fn with_child(child: &str) -> Result<Definition> {
    let mut files = TRIXIE_BPO.to_vec();
    files.push(("child", child));
    compose_image(&files, "child")
}

#[test]
fn a_child_may_add_a_second_extra_suite_with_its_own_packages() {
    // The parent's bare name stays bound to the parent's one suite; the child's names theirs,
    // in either order of its lines.
    for child in [
        "inherit = trixie-bpo\nextra_suite = forky\nextra_suite_package = criu/forky\n",
        "inherit = trixie-bpo\nextra_suite_package = criu/forky\nextra_suite = forky\n",
    ] {
        let d = with_child(child).unwrap();
        assert_eq!(d.suites(), ["trixie", "trixie-backports", "forky"]);
        assert_eq!(d.extra_suite_of("criu"), Some("forky"));
        assert_eq!(
            d.extra_suite_of("linux-image-cloud-amd64"),
            Some("trixie-backports")
        );
        assert_eq!(
            d.include_packages(),
            [
                "criu/forky",
                "xterm",
                "linux-image-cloud-amd64/trixie-backports"
            ]
        );
        assert_eq!(
            d.extra_packages(),
            [
                (
                    "linux-image-cloud-amd64".to_string(),
                    "trixie-backports".to_string()
                ),
                ("criu".to_string(), "forky".to_string())
            ]
        );
        // Rendered with every package's suite named, and read back to the same definition.
        let text = d.render();
        assert!(
            text.contains(
                "suite = trixie\nextra_suite = trixie-backports\nextra_suite = forky\n\
                     extra_suite_package = linux-image-cloud-amd64/trixie-backports\n\
                     extra_suite_package = criu/forky\n"
            ),
            "{text}"
        );
        assert_eq!(Definition::parse(&text).unwrap(), d);
    }
    // A single extra suite named explicitly is the same definition as a bare name.
    let d =
        with_child("inherit = trixie-bpo\nextra_suite_package = criu/trixie-backports\n").unwrap();
    let bare = with_child("inherit = trixie-bpo\nextra_suite_package = criu\n").unwrap();
    assert_eq!(d, bare);
    assert!(d.render().contains("extra_suite_package = criu\n"));
}

#[test]
fn a_bare_package_among_several_extra_suites_is_refused_naming_them() {
    let e = format!(
        "{:#}",
        with_child("inherit = trixie-bpo\nextra_suite = forky\nextra_suite_package = criu\n")
            .unwrap_err()
    );
    assert!(
        e.contains(
            "images/child/image.conf line 3: extra_suite_package = criu: this image takes \
                 packages from several extra suites (trixie-backports, forky): name the one, \
                 e.g. extra_suite_package = criu/forky"
        ),
        "{e}"
    );
    // A suite the image does not have, a second suite for one package, an empty suite.
    let e = format!(
        "{:#}",
        with_child("inherit = trixie-bpo\nextra_suite_package = criu/sid\n").unwrap_err()
    );
    assert!(
        e.contains(
            "images/child/image.conf line 2: extra_suite_package = criu/sid: sid is not an \
                 extra suite of this image (they are trixie-backports): add `extra_suite = sid`"
        ),
        "{e}"
    );
    let e = with_child(
        "inherit = trixie-bpo\nextra_suite = forky\n\
             extra_suite_package = linux-image-cloud-amd64/forky\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(
            "linux-image-cloud-amd64 is taken from two extra suites, trixie-backports and forky"
        ),
        "{e}"
    );
    let e = with_child("inherit = trixie-bpo\nextra_suite = forky\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "extra_suite = forky takes no package: add `extra_suite_package = NAME` lines, \
                 e.g. extra_suite_package = linux-image-cloud-amd64/forky"
        ),
        "{e}"
    );
    let e = format!(
        "{:#}",
        with_child("inherit = trixie-bpo\nextra_suite = trixie-backports\n").unwrap_err()
    );
    assert!(e.contains("extra_suite = trixie-backports is already given at images/trixie-bpo/image.conf line 2"), "{e}");
    for bad in ["criu/", "/forky", "criu/forky/x"] {
        let e = format!(
            "{:#}",
            with_child(&format!(
                "inherit = trixie-bpo\nextra_suite = forky\nextra_suite_package = {bad}\n"
            ))
            .unwrap_err()
        );
        assert!(e.contains("write NAME or NAME/SUITE"), "{bad}: {e}");
    }
}

#[test]
fn a_child_may_move_a_package_or_drop_a_suite() {
    // Move the kernel to forky: remove it (bare: the one item of that name) and add it anew.
    let d = with_child(
        "inherit = trixie-bpo\nextra_suite = forky\n\
             extra_suite_package = !linux-image-cloud-amd64\n\
             extra_suite_package = linux-image-cloud-amd64/forky\nextra_suite_package = criu/forky\n\
             extra_suite = !trixie-backports\n",
    )
    .unwrap();
    assert_eq!(d.suites(), ["trixie", "forky"]);
    assert_eq!(
        d.extra_suites[0].packages,
        ["linux-image-cloud-amd64", "criu"]
    );
    // Dropping a suite whose package stays is refused where the package was named.
    let e = format!(
        "{:#}",
        with_child("inherit = trixie-bpo\nextra_suite = !trixie-backports\n").unwrap_err()
    );
    assert!(
        e.contains(
            "images/trixie-bpo/image.conf line 3: extra_suite_package = \
                 linux-image-cloud-amd64/trixie-backports: trixie-backports is not an extra suite \
                 of this image (it has none)"
        ),
        "{e}"
    );
    let e = format!(
        "{:#}",
        with_child("inherit = trixie-bpo\nextra_suite_package = !criu\n").unwrap_err()
    );
    assert!(
        e.contains("line 2: extra_suite_package = !criu removes nothing"),
        "{e}"
    );
}

#[test]
fn a_cycle_is_refused_naming_it() {
    let files = [
        ("a", "suite = bookworm\ninherit = c\n"),
        ("b", "inherit = a\n"),
        ("c", "inherit = b\n"),
        ("d", "inherit = c\n"),
    ];
    let e = format!("{:#}", chain_of(&files, "d").unwrap_err());
    assert!(e.contains("makes a cycle: c -> b -> a -> c"), "{e}");
    assert!(e.contains("images/a/image.conf line 2: inherit = c"), "{e}");
    let e = format!(
        "{:#}",
        chain_of(&[("s", "inherit = s\n")], "s").unwrap_err()
    );
    assert!(e.contains("makes a cycle: s -> s"), "{e}");
}

#[test]
fn a_chain_is_bounded() {
    let files = [
        ("i0", "suite = bookworm\n"),
        ("i1", "inherit = i0\n"),
        ("i2", "inherit = i1\n"),
        ("i3", "inherit = i2\n"),
        ("i4", "inherit = i3\n"),
    ];
    assert_eq!(chain_of(&files, "i3").unwrap().len(), MAX_CHAIN);
    let e = format!("{:#}", chain_of(&files, "i4").unwrap_err());
    assert!(
        e.contains("more than 4 images (i4 -> i3 -> i2 -> i1 -> i0)"),
        "{e}"
    );
}

#[test]
fn an_unknown_parent_is_named_with_the_line_that_names_it() {
    let e = format!(
        "{:#}",
        chain_of(&[("x", "suite = bookworm\ninherit = bookwrom\n")], "x").unwrap_err()
    );
    assert!(
        e.contains(
            "images/x/image.conf line 2: x inherits bookwrom: there is no image \"bookwrom\""
        ),
        "{e}"
    );
    let e = format!(
        "{:#}",
        chain_of(&[("x", "inherit = base\n")], "x").unwrap_err()
    );
    assert!(e.contains("every image builds on the base already"), "{e}");
}

#[test]
fn each_key_is_set_only_where_it_belongs() {
    for (text, want) in [
        (
            "suite = bookworm\n",
            "line 1: suite belongs in an image's own image.conf",
        ),
        (
            "extra_suite = bookworm-backports\n",
            "line 1: extra_suite belongs in an image's",
        ),
        (
            "inherit = bookworm\n",
            "line 1: inherit belongs in an image's",
        ),
        ("package = !criu\n", "nothing comes before this file"),
    ] {
        let e = format!("{:#}", Layer::parse(text, Level::Base, "b").unwrap_err());
        assert!(e.contains(want), "{text}: {e}");
    }
    let e = image_err("suite = trixie\n\narchitecture = arm64\n");
    assert!(
        e.contains(
            "line 3: architecture is set once for every image, in the base (base/image.conf)"
        ),
        "{e}"
    );
    assert!(image_err("variant = minbase\n").contains("set once for every image"));
    let e = format!(
        "{:#}",
        Layer::parse("inherit = bookworm\n", Level::Whole, "").unwrap_err()
    );
    assert!(e.contains("only an image directory can have"), "{e}");
}

#[test]
fn a_file_keeps_its_line_numbered_errors() {
    assert!(image_err("suite = a\nsuite = b\n").contains("line 2: suite given twice"));
    assert!(image_err("\ncolour = red\n").contains("line 2: unknown key \"colour\""));
    assert!(
        image_err("disk_size_mib = big\n").contains("line 1: disk_size_mib must be a whole number")
    );
    assert!(image_err("package = a b\n").contains("line 1: package takes one word"));
    assert!(image_err("suite = !bookworm\n")
        .contains("line 1: suite = !bookworm: `!` removes an item of a list key"));
    assert!(image_err("package = !\n").contains("names no item"));
    assert!(image_err("just words\n").contains("line 1: expected `key = value`"));
}

#[test]
fn the_composed_definition_is_still_checked() {
    let e = compose_image(&[("x", "package = gedit\n")], "x")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("suite is missing (read from images/base/image.conf + images/x/image.conf)"),
        "{e}"
    );
    let e = compose_image(
        &[("x", "suite = bookworm\nextra_suite = bookworm-backports\n")],
        "x",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("takes no package"), "{e}");
    let e = compose_image(&[("x", "suite = bookworm\ndisk_size_mib = 10\n")], "x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("too small"), "{e}");
}
