//! How an image's definition is put together from `key = value` files: the base every image
//! shares (`images/base/image.conf`), then the images it inherits from, oldest first, then its
//! own `image.conf`. Each file is read on its own (so its errors name its lines), then the files
//! are merged in that order:
//!
//! - a scalar key set by a later file replaces the earlier value;
//! - an item of a list key (`package`, `component`, `extra_suite`, `extra_suite_package`,
//!   `dpkg_exclude`, `dpkg_include`) is appended after the earlier items, and `key = !VALUE`
//!   removes the earlier item `VALUE`. An item given twice, or a removal of an item no earlier
//!   file gives, is an error: either would be a no-op that a reader takes for a change.
//!   `dpkg_exclude` and `dpkg_include` share one list, because dpkg applies them in order.
//! - an `extra_suite_package` names its suite as apt does, `NAME/SUITE`; a bare `NAME` is taken
//!   from the one extra suite known once its file's own `extra_suite` lines are applied, and is
//!   an error where there are none or several. So an image of one extra suite needs no suffix,
//!   and an image inheriting it may add a second suite without touching its parent.
//!
//! Some keys belong to one level only: what makes an image itself (its suite, extra suite and
//! parent) is never in the base, and what the rig assumes of every image (its architecture and
//! mmdebstrap variant) is only in the base.

use super::definition::{Definition, ExtraSuite};
use anyhow::{bail, Context, Result};

/// How many image files one image may be composed of, itself included (the base not counted).
/// An image deeper than this is hard to read from its files; flatten the chain instead.
pub const MAX_CHAIN: usize = 4;

/// Where a file sits in a composition, which decides the keys it may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `images/base/image.conf`: the settings every image shares.
    Base,
    /// `images/<name>/image.conf`: what one image adds to what it builds on.
    Image,
    /// A complete definition in one text, composed of nothing else.
    Whole,
}

const SCALAR_KEYS: [&str; 9] = [
    "suite",
    "mirror",
    "architecture",
    "variant",
    "kernel_flavour",
    "source_date_epoch",
    "disk_size_mib",
    "inodes",
    "inherit",
];
const LIST_KEYS: [&str; 6] = [
    "component",
    "package",
    "extra_suite",
    "extra_suite_package",
    "dpkg_exclude",
    "dpkg_include",
];
const NUMBER_KEYS: [&str; 3] = ["source_date_epoch", "disk_size_mib", "inodes"];

/// Keys only an image may set, and why the base may not.
fn image_only(key: &str) -> Option<&'static str> {
    match key {
        "suite" | "extra_suite" | "extra_suite_package" => {
            Some("the suites are what tell one image from another")
        }
        "inherit" => Some("the base builds on nothing"),
        _ => None,
    }
}

/// Keys only the base may set, and why.
fn base_only(key: &str) -> Option<&'static str> {
    match key {
        "architecture" => Some("the VM boots every image as x86_64"),
        "variant" => Some(
            "the builder's hooks need the same tools (dpkg-query, apt's archives) in every image",
        ),
        _ => None,
    }
}

/// A scalar setting of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Setting {
    key: &'static str,
    value: String,
    line: usize,
}

/// A list item of one file: added, or (`key = !value`) removed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    key: &'static str,
    value: String,
    remove: bool,
    line: usize,
}

/// One file of a composition, read and checked on its own but not yet merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// What errors call the file (its path), or empty for a text of its own.
    pub source: String,
    scalars: Vec<Setting>,
    items: Vec<Item>,
}

/// `source line N`, or `line N` for a text of its own.
fn at(source: &str, line: usize) -> String {
    if source.is_empty() {
        format!("line {line}")
    } else {
        format!("{source} line {line}")
    }
}

impl Layer {
    /// Reads one file; its errors name the line (`line 7: ...`), the caller names the file.
    pub fn parse(text: &str, level: Level, source: &str) -> Result<Layer> {
        let mut layer = Layer {
            source: source.to_string(),
            scalars: Vec::new(),
            items: Vec::new(),
        };
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .with_context(|| format!("line {n}: expected `key = value`, got {raw:?}"))?;
            let (k, v) = (k.trim(), v.trim());
            if v.is_empty() {
                bail!("line {n}: {k} has no value");
            }
            let Some(key) = SCALAR_KEYS.iter().chain(&LIST_KEYS).find(|x| **x == k) else {
                bail!("line {n}: unknown key {k:?}");
            };
            if v.split_whitespace().count() != 1 {
                bail!("line {n}: {k} takes one word, got {v:?}");
            }
            match (level, image_only(k), base_only(k)) {
                (Level::Base, Some(why), _) => bail!(
                    "line {n}: {k} belongs in an image's own {file}, not in the base that every \
                     image shares: {why}",
                    file = super::definition::DEFINITION_FILE
                ),
                (Level::Image, _, Some(why)) => bail!(
                    "line {n}: {k} is set once for every image, in the base \
                     ({base}/{file}): {why}",
                    base = super::definition::BASE_DIR,
                    file = super::definition::DEFINITION_FILE
                ),
                (Level::Whole, _, _) if k == "inherit" => bail!(
                    "line {n}: inherit names a parent image, which only an image directory can have"
                ),
                _ => {}
            }
            let (remove, value) = match v.strip_prefix('!') {
                Some(rest) => (true, rest.trim()),
                None => (false, v),
            };
            if remove {
                if !LIST_KEYS.contains(key) {
                    bail!(
                        "line {n}: {k} = {v}: `!` removes an item of a list key; a scalar key \
                         is replaced by giving it a new value"
                    );
                }
                if value.is_empty() {
                    bail!("line {n}: {k} = ! names no item to remove");
                }
                if level != Level::Image {
                    bail!(
                        "line {n}: {k} = {v} removes an item, but nothing comes before this file: \
                         delete the line that adds {value:?} instead"
                    );
                }
            }
            if NUMBER_KEYS.contains(key) && value.parse::<u64>().is_err() {
                bail!("line {n}: {k} must be a whole number, got {value:?}");
            }
            if LIST_KEYS.contains(key) {
                layer.items.push(Item {
                    key,
                    value: value.to_string(),
                    remove,
                    line: n,
                });
            } else if layer.scalars.iter().any(|s| s.key == k) {
                bail!("line {n}: {k} given twice");
            } else {
                layer.scalars.push(Setting {
                    key,
                    value: value.to_string(),
                    line: n,
                });
            }
        }
        Ok(layer)
    }

    /// The image this file builds on (`inherit = NAME`) and the line saying so.
    pub fn parent(&self) -> Option<(&str, usize)> {
        self.scalars
            .iter()
            .find(|s| s.key == "inherit")
            .map(|s| (s.value.as_str(), s.line))
    }
}

/// Follows `inherit` from the image `name` up to the image that names no parent, reading each
/// with `read`. Returns the images oldest first, `name` last. Refuses a cycle (naming it) and a
/// chain longer than [`MAX_CHAIN`]; `read`'s own error (an unknown image, say) is given with the
/// line that named it.
pub fn image_chain(
    name: &str,
    read: &mut dyn FnMut(&str) -> Result<Layer>,
) -> Result<Vec<(String, Layer)>> {
    let mut chain = vec![(name.to_string(), read(name)?)];
    while let Some((child, layer)) = chain.last() {
        let Some((parent, line)) = layer.parent() else {
            break;
        };
        let parent = parent.to_string();
        let named_at = at(&layer.source, line);
        if parent == super::definition::BASE_DIR {
            bail!(
                "{named_at}: inherit = {parent}: every image builds on the base already; \
                 name an image to build on, or delete the line"
            );
        }
        if let Some(first) = chain.iter().position(|(n, _)| *n == parent) {
            let cycle: Vec<&str> = chain[first..]
                .iter()
                .map(|(n, _)| n.as_str())
                .chain([parent.as_str()])
                .collect();
            bail!(
                "{named_at}: inherit = {parent} makes a cycle: {}; one image of it must name \
                 no parent",
                cycle.join(" -> ")
            );
        }
        if chain.len() == MAX_CHAIN {
            let names: Vec<&str> = chain.iter().map(|(n, _)| n.as_str()).collect();
            bail!(
                "{named_at}: inherit = {parent} makes {name} a chain of more than {MAX_CHAIN} \
                 images ({} -> {parent}): copy the settings of one of them into its child and \
                 let that child inherit its parent instead",
                names.join(" -> ")
            );
        }
        let child = child.clone();
        let layer =
            read(&parent).with_context(|| format!("{named_at}: {child} inherits {parent}"))?;
        chain.push((parent, layer));
    }
    chain.reverse();
    Ok(chain)
}

/// Where a merged value came from, for the errors of later files.
#[derive(Debug, Clone)]
struct Origin {
    source: String,
    line: usize,
}

/// The extra suites merged so far, in order.
fn extra_suites_so_far<'a>(items: &'a [(&'static str, String, Origin)]) -> Vec<&'a str> {
    items
        .iter()
        .filter(|(k, _, _)| *k == "extra_suite")
        .map(|(_, v, _)| v.as_str())
        .collect()
}

/// An `extra_suite_package` value as `NAME/SUITE`: given so, or a bare `NAME` bound to the one
/// extra suite merged so far (its own file's included).
fn bind_extra_package(
    value: &str,
    remove: bool,
    items: &[(&'static str, String, Origin)],
    here: &str,
) -> Result<String> {
    let bang = if remove { "!" } else { "" };
    if let Some((name, suite)) = value.split_once('/') {
        if name.is_empty() || suite.is_empty() || suite.contains('/') {
            bail!(
                "{here}: extra_suite_package = {bang}{value}: write NAME or NAME/SUITE, \
                 e.g. criu/forky"
            );
        }
        return Ok(value.to_string());
    }
    if remove {
        // A removal takes away what is there: the one earlier item of that name, whichever
        // suite it came with.
        let there: Vec<&str> = items
            .iter()
            .filter(|(k, v, _)| {
                *k == "extra_suite_package" && v.split_once('/').is_some_and(|(n, _)| n == value)
            })
            .map(|(_, v, _)| v.as_str())
            .collect();
        return match there.as_slice() {
            [one] => Ok(one.to_string()),
            [] => bail!(
                "{here}: extra_suite_package = !{value} removes nothing: no earlier file gives \
                 extra_suite_package = {value}"
            ),
            several => bail!(
                "{here}: extra_suite_package = !{value}: it is taken from several suites ({}): \
                 name the one, e.g. extra_suite_package = !{}",
                several.join(", "),
                several[0]
            ),
        };
    }
    match extra_suites_so_far(items).as_slice() {
        [one] => Ok(format!("{value}/{one}")),
        [] => bail!(
            "{here}: extra_suite_package = {bang}{value} is given but extra_suite is not: name \
             the suite it comes from (`extra_suite = SUITE`)"
        ),
        several => bail!(
            "{here}: extra_suite_package = {bang}{value}: this image takes packages from \
             several extra suites ({}): name the one, e.g. extra_suite_package = {bang}{value}/{}",
            several.join(", "),
            several[several.len() - 1]
        ),
    }
}

/// The merged extra suites, each with its packages in file order. A package naming a suite the
/// image does not take packages from (never added, or removed since) is refused where it is.
fn extra_suites(items: &[(&'static str, String, Origin)]) -> Result<Vec<ExtraSuite>> {
    let mut out: Vec<ExtraSuite> = extra_suites_so_far(items)
        .into_iter()
        .map(|s| ExtraSuite {
            suite: s.to_string(),
            packages: Vec::new(),
        })
        .collect();
    for (k, v, origin) in items {
        if *k != "extra_suite_package" {
            continue;
        }
        // Bound values always hold one `/` (see bind_extra_package).
        let (name, suite) = v.split_once('/').unwrap_or((v.as_str(), ""));
        match out.iter_mut().find(|e| e.suite == suite) {
            Some(e) => e.packages.push(name.to_string()),
            None => {
                let known: Vec<&str> = out.iter().map(|e| e.suite.as_str()).collect();
                bail!(
                    "{}: extra_suite_package = {v}: {suite} is not an extra suite of this image \
                     ({}): add `extra_suite = {suite}`, or take {name} from another",
                    at(&origin.source, origin.line),
                    if known.is_empty() {
                        "it has none".to_string()
                    } else {
                        format!("they are {}", known.join(", "))
                    }
                );
            }
        }
    }
    Ok(out)
}

/// Merges the files in order (see the module's rules) into a checked [`Definition`].
pub fn compose(layers: &[Layer]) -> Result<Definition> {
    let mut scalars: Vec<(&'static str, String)> = Vec::new();
    // (key, value, origin); dpkg_exclude and dpkg_include share their order.
    let mut items: Vec<(&'static str, String, Origin)> = Vec::new();
    for layer in layers {
        for s in &layer.scalars {
            scalars.retain(|(k, _)| *k != s.key);
            scalars.push((s.key, s.value.clone()));
        }
        // The file's extra suites first, so that its bare package names bind to them whatever
        // the order of its lines.
        let (suites, rest): (Vec<&Item>, Vec<&Item>) =
            layer.items.iter().partition(|it| it.key == "extra_suite");
        for it in suites.into_iter().chain(rest) {
            let here = at(&layer.source, it.line);
            let value = if it.key == "extra_suite_package" {
                bind_extra_package(&it.value, it.remove, &items, &here)?
            } else {
                it.value.clone()
            };
            let found = items
                .iter()
                .position(|(k, v, _)| *k == it.key && *v == value);
            match (it.remove, found) {
                (false, None) => items.push((
                    it.key,
                    value.clone(),
                    Origin {
                        source: layer.source.clone(),
                        line: it.line,
                    },
                )),
                (false, Some(i)) => bail!(
                    "{here}: {} = {value} is already given at {}: delete one of them",
                    it.key,
                    at(&items[i].2.source, items[i].2.line)
                ),
                (true, Some(i)) => {
                    items.remove(i);
                }
                (true, None) => bail!(
                    "{here}: {key} = !{value} removes nothing: no earlier file gives {key} = {value}",
                    key = it.key,
                ),
            }
        }
    }
    let files: Vec<&str> = layers
        .iter()
        .map(|l| l.source.as_str())
        .filter(|s| !s.is_empty())
        .collect();
    let from = if files.is_empty() {
        String::new()
    } else {
        format!(" (read from {})", files.join(" + "))
    };
    let get = |k: &str| {
        scalars
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.clone())
    };
    let need = |k: &str| get(k).with_context(|| format!("{k} is missing{from}"));
    let number = |k: &str| -> Result<Option<u64>> {
        get(k)
            .map(|v| {
                v.parse::<u64>()
                    .with_context(|| format!("{k} must be a whole number, got {v:?}"))
            })
            .transpose()
    };
    let list = |k: &str| -> Vec<String> {
        items
            .iter()
            .filter(|(key, _, _)| *key == k)
            .map(|(_, v, _)| v.clone())
            .collect()
    };
    let def = Definition {
        suite: need("suite")?,
        mirror: need("mirror")?,
        components: list("component"),
        architecture: need("architecture")?,
        variant: need("variant")?,
        kernel_flavour: need("kernel_flavour")?,
        packages: list("package"),
        extra_suites: extra_suites(&items)?,
        dpkg_filters: items
            .iter()
            .filter(|(k, _, _)| *k == "dpkg_exclude" || *k == "dpkg_include")
            .map(|(k, v, _)| (*k == "dpkg_include", v.clone()))
            .collect(),
        source_date_epoch: number("source_date_epoch")?
            .with_context(|| format!("source_date_epoch is missing{from}"))?,
        disk_size_mib: number("disk_size_mib")?
            .with_context(|| format!("disk_size_mib is missing{from}"))?,
        inodes: number("inodes")?.unwrap_or(65536),
    };
    def.check()?;
    Ok(def)
}

#[cfg(test)]
mod tests;
