//! Matrix rows: an image and its variants, written `image+variant+...` in `--images`. A variant
//! stands for arguments of the guest's `sharedos-gate diagnose`, which vm-run passes on after
//! `--`. The mapping is one table both ways: vm-matrix turns a row into arguments, and
//! `sharedos-rig matrix merge` turns the arguments a report's vm-run was given back into its row,
//! so a row has the same label whichever way the matrix was built.

use anyhow::{bail, Result};
use sharedos_report::report::{Report, Workload};

/// The fixed variants and their diagnose arguments; every workload but the default one is a
/// variant of its own name ([`workload_variants`]), and `copies<N>` and `copiesmax` are the
/// parametric ones ([`variant_args`]).
pub const FIXED: &[(&str, &[&str])] = &[
    ("userns", &["--userns"]),
    ("cgroup", &["--cgroup", "cpu=1,memory=512M"]),
    ("cowroot", &["--cow-root"]),
];

/// The workloads that are variants: every one but the default (a plain row runs the default),
/// `NAME` standing for `--workload NAME`. Read from `Workload::ALL`, so a new workload is a
/// variant without a line here; the image must hold its programs.
pub fn workload_variants() -> impl Iterator<Item = Workload> {
    Workload::ALL.into_iter().filter(|w| !w.is_default())
}

/// The workload a row's variants run: the default when none of them is a workload.
pub fn row_workload(variants: &[String]) -> Workload {
    variants
        .iter()
        .filter_map(|v| Workload::parse(v))
        .find(|w| !w.is_default())
        .unwrap_or_default()
}

/// Every fixed variant with its arguments, the workloads' included.
fn fixed() -> Vec<(String, Vec<String>)> {
    FIXED
        .iter()
        .map(|(n, a)| (n.to_string(), a.iter().map(|s| s.to_string()).collect()))
        .chain(workload_variants().map(|w| {
            (
                w.as_str().to_string(),
                vec!["--workload".to_string(), w.as_str().to_string()],
            )
        }))
        .collect()
}

/// Every variant name a user may write, for error messages.
pub fn known() -> String {
    let mut names: Vec<String> = fixed().into_iter().map(|(n, _)| n).collect();
    names.extend(["copies<N> (N >= 1)".to_string(), "copiesmax".to_string()]);
    names.join(", ")
}

/// The diagnose arguments of one variant.
pub fn variant_args(name: &str) -> Result<Vec<String>> {
    if let Some((_, args)) = fixed().into_iter().find(|(n, _)| n == name) {
        return Ok(args);
    }
    if let Some(n) = name.strip_prefix("copies") {
        if n == "max" {
            return Ok(vec!["--copies".into(), "max".into()]);
        }
        // Canonical digits only, so that the label read back from the arguments is the same.
        if let Ok(k) = n.parse::<u32>() {
            if k >= 1 && k.to_string() == n {
                return Ok(vec!["--copies".into(), n.into()]);
            }
        }
    }
    bail!("unknown variant {name:?}: the variants are {}", known())
}

/// One matrix row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub image: String,
    pub variants: Vec<String>,
}

impl Row {
    /// `image+variant+...` into a row, every variant checked.
    pub fn parse(label: &str) -> Result<Row> {
        let mut parts = label.split('+').map(str::trim);
        let image = parts.next().unwrap_or("").to_string();
        if image.is_empty() {
            bail!("{label:?} names no image before its variants");
        }
        let mut variants: Vec<String> = Vec::new();
        for v in parts {
            variant_args(v).map_err(|e| anyhow::anyhow!("--images {label}: {e}"))?;
            if variants.iter().any(|x| x == v) {
                bail!("--images {label}: variant {v} is given twice");
            }
            variants.push(v.to_string());
        }
        Ok(Row { image, variants })
    }

    pub fn plain(image: &str) -> Row {
        Row {
            image: image.to_string(),
            variants: Vec::new(),
        }
    }

    /// The row's name in the table, its report directory and its matrix.json cell.
    pub fn label(&self) -> String {
        std::iter::once(self.image.as_str())
            .chain(self.variants.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("+")
    }

    /// The arguments for the guest's diagnose, in variant order; empty for a plain row.
    pub fn diagnose_args(&self) -> Vec<String> {
        self.variants
            .iter()
            .flat_map(|v| variant_args(v).unwrap_or_default())
            .collect()
    }
}

/// The variants that a vm-run's diagnose arguments stand for: the inverse of
/// [`Row::diagnose_args`]. Arguments that are no variant's are refused, naming them.
pub fn variants_from_args(args: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    let fixed = fixed();
    'next: while i < args.len() {
        for (name, want) in &fixed {
            if args[i..].starts_with(want) {
                out.push(name.clone());
                i += want.len();
                continue 'next;
            }
        }
        if args[i] == "--copies" {
            if let Some(n) = args.get(i + 1) {
                let name = format!("copies{n}");
                if variant_args(&name).is_ok() {
                    out.push(name);
                    i += 2;
                    continue;
                }
            }
        }
        bail!(
            "the diagnose arguments {:?} are not a matrix variant's (the variants: {})",
            args[i..].join(" "),
            known()
        );
    }
    Ok(out)
}

/// The row a vm-run report belongs to: the image its vm-run recorded, and the variants the
/// diagnose arguments after `--` on its command line stand for. Both are the host's record of
/// the run, not the guest's word.
pub fn report_row(r: &Report) -> Result<Row> {
    let Some(vm) = r.vm.as_ref() else {
        bail!("it is a report of `sharedos-gate diagnose` alone, not of vm-run: it names no image");
    };
    let image = vm.image_name.as_str();
    let plain = !image.is_empty()
        && !image.starts_with('.')
        && image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !plain {
        bail!(
            "it records the image {image:?}, which is not a plain image name: it was not \
             written by vm-run"
        );
    }
    let diagnose: &[String] = match vm.command_line.iter().position(|a| a == "--") {
        Some(i) => &vm.command_line[i + 1..],
        None => &[],
    };
    Ok(Row {
        image: image.to_string(),
        variants: variants_from_args(diagnose)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_map_to_diagnose_arguments_and_back() {
        let r = Row::parse("bookworm+userns+cgroup").unwrap();
        assert_eq!(r.image, "bookworm");
        assert_eq!(r.label(), "bookworm+userns+cgroup");
        assert_eq!(
            r.diagnose_args(),
            ["--userns", "--cgroup", "cpu=1,memory=512M"]
        );
        let r2 = Row::parse("trixie+cowroot+copies4").unwrap();
        assert_eq!(r2.diagnose_args(), ["--cow-root", "--copies", "4"]);
        let r3 = Row::parse("forky+copiesmax").unwrap();
        assert_eq!(r3.diagnose_args(), ["--copies", "max"]);
        let r4 = Row::parse("trixie-desktop+desktop+copies2").unwrap();
        assert_eq!(
            r4.diagnose_args(),
            ["--workload", "desktop", "--copies", "2"]
        );
        let r5 = Row::parse("bookworm-browser+browser-nosandbox").unwrap();
        assert_eq!(r5.diagnose_args(), ["--workload", "browser-nosandbox"]);
        for r in [&r, &r2, &r3, &r4, &r5] {
            assert_eq!(variants_from_args(&r.diagnose_args()).unwrap(), r.variants);
        }
        // Every workload of `Workload` is a variant both ways; the default is none.
        for w in workload_variants() {
            let row = Row::parse(&format!("bookworm-apps+{w}+copies2")).unwrap();
            assert_eq!(
                row.diagnose_args(),
                ["--workload", w.as_str(), "--copies", "2"]
            );
            assert_eq!(
                variants_from_args(&row.diagnose_args()).unwrap(),
                row.variants
            );
            assert_eq!(row_workload(&row.variants), w);
        }
        assert!(Row::parse("bookworm+xterm").is_err());
        assert_eq!(row_workload(&[]), Workload::Xterm);
        let plain = Row::parse("bookworm").unwrap();
        assert_eq!(plain, Row::plain("bookworm"));
        assert!(plain.diagnose_args().is_empty());
        assert_eq!(plain.label(), "bookworm");
    }

    #[test]
    fn unknown_or_odd_variants_are_bad_input_listing_the_known_ones() {
        for bad in [
            "bookworm+fast",
            "bookworm+copies0",
            "bookworm+copies04",
            "bookworm+copies",
            "bookworm+copies-1",
        ] {
            let e = format!("{:#}", Row::parse(bad).unwrap_err());
            assert!(e.contains("unknown variant"), "{bad}: {e}");
            // Every workload but the default is listed, whichever workloads there are.
            let workloads: Vec<&str> = workload_variants().map(|w| w.as_str()).collect();
            assert!(workloads.starts_with(&["desktop", "browser", "browser-nosandbox"]));
            assert!(
                e.contains(&format!(
                    "userns, cgroup, cowroot, {}, copies<N>",
                    workloads.join(", ")
                )),
                "{e}"
            );
        }
        let e = format!("{:#}", Row::parse("bookworm+userns+userns").unwrap_err());
        assert!(e.contains("given twice"), "{e}");
        let e = format!("{:#}", Row::parse("+userns").unwrap_err());
        assert!(e.contains("names no image"), "{e}");
        let e = format!(
            "{:#}",
            variants_from_args(&["--userns".into(), "--verbose".into()]).unwrap_err()
        );
        assert!(e.contains("\"--verbose\""), "{e}");
        assert!(variants_from_args(&["--copies".into()]).is_err());
    }
}
