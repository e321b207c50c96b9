//! The `sharedos-rig` CLI: parses arguments, calls the library, maps outcomes to exit codes.
//! Exit codes: 0 / 1 / 3 as verify's verdict; 2 for usage and I/O problems.
//! A reader that stops early (`sharedos-rig show DIR | head`) is not an error: the output just
//! ends, quietly, and the exit code stays what the command decided.

// A front end prints its results and its one error line itself (ARCHITECTURE.md).
#![allow(clippy::disallowed_macros)]

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use sharedos_report::report::ReviewDecision;
use sharedos_rig::escape;
use sharedos_rig::judge::compare::read as compare;
use sharedos_rig::judge::ledger::Ledger;
use sharedos_rig::judge::verdict::{self, How};
use sharedos_rig::judge::{review, sign};
use sharedos_rig::render::{diff, list};
use sharedos_rig::{matrix, render};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "sharedos-rig",
    version,
    about = "Shows, reviews, verifies, compares and lists sharedos diagnostic reports"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Record the human decision on the GUI gate in review.json, citing every PNG's sha256.
    Review {
        /// The report directory (holding report.json and the PNGs).
        report_dir: PathBuf,
        #[arg(long, value_enum)]
        decision: Decision,
        /// Who looked at the images.
        #[arg(long)]
        reviewer: String,
        #[arg(long, default_value = "")]
        note: String,
        /// Replace an existing review.json.
        #[arg(long)]
        force: bool,
        /// Sign review.json with this OpenSSH private key (writes review.json.sig).
        #[arg(long, value_name = "KEY")]
        sign_key: Option<PathBuf>,
    },
    /// Re-hash every artifact, judge the review and print the final verdict.
    /// Exits 0 all gates pass (review included), 3 only the review is outstanding, 1 otherwise.
    Verify {
        report_dir: PathBuf,
        /// Require report.json (and review.json, if any) to be signed by a key in this OpenSSH
        /// allowed_signers file.
        #[arg(long, value_name = "FILE")]
        allowed_signers: Option<PathBuf>,
    },
    /// Render a report (taking review.json into account), or a matrix directory (from
    /// `cargo xtask vm-matrix`) as one table: a row per image, a column per gate, each row
    /// judged again from its report, with a warning wherever matrix.json says otherwise. A
    /// vm-migrate directory is shown as `matrix pairs` shows it. A vm-compare directory is shown
    /// as its two columns side by side (html: with charts), judged again from its reports, with a
    /// warning wherever compare.json says otherwise; exits 0 PASS, 1 FAIL.
    Show {
        report_dir: PathBuf,
        #[arg(long, value_enum, default_value_t = render::Format::Text)]
        format: render::Format,
        /// For a matrix: where images/ is, for each image's expected-gates [default:
        /// $SHAREDOS_RIG_IMAGES, ./images, then the source tree].
        #[arg(long)]
        images_dir: Option<PathBuf>,
    },
    /// What changed from report A to report B (or, for two matrix directories, cell by cell; for
    /// two vm-compare directories, figure by figure).
    Diff {
        report_a: PathBuf,
        report_b: PathBuf,
    },
    /// The reports under a directory, newest first.
    List {
        #[arg(default_value = "reports")]
        dir: PathBuf,
    },
    /// Matrix directories made from vm-run reports (`cargo xtask vm-matrix` makes its own).
    Matrix {
        #[command(subcommand)]
        command: MatrixCommand,
    },
}

#[derive(Subcommand, Debug)]
enum MatrixCommand {
    /// One matrix directory from vm-run report directories made elsewhere (one CI job per
    /// image): each copied into OUT/<row>/, judged as vm-run judges it, each plain row held
    /// against its images/<name>/expected-gates, matrix.json written exactly as vm-matrix
    /// writes it. The row comes from each report (its image and variants). Prints the table on
    /// stderr and OUT last on stdout; exits as vm-matrix: 0 as expected, 1 a row differs or
    /// failed, 3 only the GUI review is outstanding, 2 the rig failed for a row or bad input.
    Merge {
        /// The matrix directory to create (new or empty).
        #[arg(long)]
        out: PathBuf,
        /// Where images/ is, for the expectations [default: $SHAREDOS_RIG_IMAGES, ./images,
        /// then the source tree].
        #[arg(long)]
        images_dir: Option<PathBuf>,
        /// The rows there must be, comma-separated as vm-matrix's --images: a row without a
        /// report is a RIG FAILURE row (its run archived nothing), a report of another row is
        /// refused [default: the reports' own rows, in the order given].
        #[arg(long)]
        images: Option<String>,
        /// vm-run report directories (`cargo xtask vm-run --out DIR`), in row order.
        #[arg(required = true)]
        report_dirs: Vec<PathBuf>,
    },
    /// vm-migrate's results side by side: one row per migration, from image (kernel, criu) to
    /// image (kernel, criu), its verdict and a short cause (CRIU's own error when it refused a
    /// restore). Each migration is judged again from its two halves' reports, with a warning
    /// wherever its migration.json says otherwise. Exits 0 every pair passed, 1 one failed, 2
    /// the rig failed for one or bad input.
    Pairs {
        #[arg(long, value_enum, default_value_t = render::Format::Text)]
        format: render::Format,
        /// vm-migrate directories (`cargo xtask vm-migrate --out DIR`), or directories that
        /// hold them (such as reports/), in row order.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// The table a deployment reads, from a matrix directory (`cargo xtask vm-matrix
    /// --workloads all`): per application and CRIU version, whether it forks, the cause where
    /// not (the failed gate and CRIU's words), what was turned off to make it fork, memory per
    /// copy (the density gate's median PSS) and fork latency (CRIU's restore). Every row is
    /// judged again from its report, as `show MATRIX` does. With --readme, the table between
    /// README's `<!-- deployment-table:begin MATRIX_DIR -->` and `<!-- deployment-table:end -->`
    /// is rendered again from the matrix directory the marker names: exit 0 when it is the
    /// same, 1 when not (--write puts the rendered table there instead).
    Table {
        /// The matrix directory (not with --readme, whose marker names it).
        #[arg(required_unless_present = "readme", conflicts_with = "readme")]
        dir: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = TableFormat::Text)]
        format: TableFormat,
        /// Where images/ is, for the expectations and a row's criu when it never ran
        /// [default: $SHAREDOS_RIG_IMAGES, ./images, then the source tree].
        #[arg(long)]
        images_dir: Option<PathBuf>,
        /// A README holding the table between the markers: check it against the matrix.
        #[arg(long)]
        readme: Option<PathBuf>,
        /// With --readme: write the rendered table between the markers.
        #[arg(long, requires = "readme")]
        write: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TableFormat {
    Text,
    Md,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Decision {
    Pass,
    Fail,
}

impl From<Decision> for ReviewDecision {
    fn from(d: Decision) -> Self {
        match d {
            Decision::Pass => ReviewDecision::Pass,
            Decision::Fail => ReviewDecision::Fail,
        }
    }
}

/// The command, run; its exit code. Each command is a function of its own below.
fn run(cmd: Command) -> Result<u8> {
    let ledger = Ledger::from_env();
    let ledger = ledger.as_ref();
    match cmd {
        Command::Review {
            report_dir,
            decision,
            reviewer,
            note,
            force,
            sign_key,
        } => {
            let req = review::Request {
                decision: decision.into(),
                reviewer,
                note,
                force,
                sign_key,
            };
            review::record(&report_dir, &req, ledger, &mut std::io::stdout().lock())?;
            Ok(0)
        }
        Command::Verify {
            report_dir,
            allowed_signers,
        } => verify(&report_dir, allowed_signers.as_deref(), ledger),
        Command::Show {
            report_dir,
            format,
            images_dir,
        } if matrix::is_matrix_dir(&report_dir) => {
            show_matrix(&report_dir, format, images_dir.as_deref(), ledger)
        }
        Command::Show {
            report_dir, format, ..
        } if compare::is_compare_dir(&report_dir) => show_compare(&report_dir, format, ledger),
        Command::Show {
            report_dir, format, ..
        } if matrix::pairs::is_migration_path(&report_dir) => {
            show_pairs(std::slice::from_ref(&report_dir), format, ledger).map(|_| 0)
        }
        Command::Show {
            report_dir, format, ..
        } => {
            let o = verdict::judge(&report_dir, &How::full(ledger))?;
            emit(&render::render(&o, format))?;
            Ok(0)
        }
        Command::Diff { report_a, report_b }
            if matrix::is_matrix_dir(&report_a) || matrix::is_matrix_dir(&report_b) =>
        {
            diff_matrices(&report_a, &report_b, ledger)
        }
        Command::Diff { report_a, report_b }
            if compare::is_compare_dir(&report_a) || compare::is_compare_dir(&report_b) =>
        {
            diff_compares(&report_a, &report_b, ledger)
        }
        Command::Diff { report_a, report_b } => {
            let d = diff::diff_dirs(&report_a, &report_b, ledger)?;
            emit(&format!("{d}\n"))?;
            Ok(0)
        }
        Command::Matrix {
            command:
                MatrixCommand::Merge {
                    out,
                    images_dir,
                    images,
                    report_dirs,
                },
        } => merge(out, images_dir, images.as_deref(), report_dirs),
        Command::Matrix {
            command: MatrixCommand::Pairs { format, dirs },
        } => show_pairs(&dirs, format, ledger),
        Command::Matrix {
            command:
                MatrixCommand::Table {
                    dir,
                    format,
                    images_dir,
                    readme,
                    write,
                },
        } => deployment_table(
            dir.as_deref(),
            format,
            images_dir.as_deref(),
            readme.as_deref(),
            write,
            ledger,
        ),
        Command::List { dir } => list_reports(&dir, ledger),
    }
}

/// The one verdict on a report, printed; a report.json that cannot be read is a verdict too
/// (FAIL, exit 1), a directory that is no report a usage error (exit 2).
fn verify(
    report_dir: &Path,
    allowed_signers: Option<&Path>,
    ledger: Option<&Ledger>,
) -> Result<u8> {
    let signers = allowed_signers
        .map(sign::read_allowed_signers)
        .transpose()?;
    let how = How {
        rehash: true,
        signers: signers.as_deref(),
        ledger,
    };
    match verdict::judge(report_dir, &how) {
        Ok(o) => {
            emit(&format!("{o}\n"))?;
            Ok(exit_byte(o.exit_code))
        }
        Err(r) if r.unreadable_report => {
            emit(&format!("{r}\n"))?;
            Ok(exit_byte(r.exit_code()))
        }
        Err(r) => Err(r.into()),
    }
}

/// A matrix directory as one table, every row judged again from its report.
fn show_matrix(
    dir: &Path,
    format: render::Format,
    images_dir: Option<&Path>,
    ledger: Option<&Ledger>,
) -> Result<u8> {
    let (m, warnings) = matrix::load(dir, images_dir, ledger)?;
    warn(&warnings);
    emit(&match format {
        render::Format::Text => matrix::render::text(&m),
        render::Format::Md => matrix::render::md(&m),
        render::Format::Html => matrix::render::html(&m),
        render::Format::Junit => matrix::render::junit(&m),
    })?;
    Ok(0)
}

/// The deployment table of a matrix directory, every row judged again from its report; or
/// README's copy of it held to the table rendered again.
fn deployment_table(
    dir: Option<&Path>,
    format: TableFormat,
    images_dir: Option<&Path>,
    readme: Option<&Path>,
    write: bool,
    ledger: Option<&Ledger>,
) -> Result<u8> {
    use anyhow::Context;
    use matrix::deployment;
    let render = |dir: &Path, format: TableFormat| -> Result<String> {
        let (m, warnings) = matrix::load(dir, images_dir, ledger)?;
        warn(&warnings);
        let criu_of = |image: &str| {
            let d = sharedos_rig::image::definition::find_images_dir(images_dir, image);
            matrix::workloads::image_criu(&d, image)
        };
        let rows = deployment::entries(&m, &criu_of);
        Ok(match format {
            TableFormat::Text => deployment::text(&rows),
            TableFormat::Md => deployment::md(&rows),
        })
    };
    let Some(readme) = readme else {
        let Some(dir) = dir else {
            anyhow::bail!("give a matrix directory, or --readme README.md");
        };
        emit(&render(dir, format)?)?;
        return Ok(0);
    };
    let text =
        std::fs::read_to_string(readme).with_context(|| format!("reading {}", readme.display()))?;
    let (rel, _) = deployment::section(&text)
        .with_context(|| format!("{}'s deployment table", readme.display()))?;
    let base = readme.parent().unwrap_or(Path::new("."));
    let table = render(&base.join(&rel), TableFormat::Md)?;
    let name = readme.display().to_string();
    if write {
        let new = deployment::replace_section(&text, &table)?;
        std::fs::write(readme, new).with_context(|| format!("writing {name}"))?;
        emit(&format!(
            "{name}: the deployment table rendered from {}\n",
            escape::line(&rel)
        ))?;
        return Ok(0);
    }
    match deployment::check_readme(&text, &table, &name) {
        Ok(()) => {
            emit(&format!(
                "{name}: the deployment table is what {} renders\n",
                escape::line(&rel)
            ))?;
            Ok(0)
        }
        Err(e) => {
            eprint!("{}", escape::error_chain(&e));
            Ok(1)
        }
    }
}

/// A comparison directory, judged again from its reports; its recomputed verdict's exit code.
fn show_compare(dir: &Path, format: render::Format, ledger: Option<&Ledger>) -> Result<u8> {
    let j = compare::read(dir, ledger)?;
    // The warnings are part of every form of the page (text included), not printed apart.
    emit(&match format {
        render::Format::Text => render::compare::show_text(&j),
        render::Format::Md => render::compare::md(&j),
        render::Format::Html => render::compare::html(&j),
        render::Format::Junit => {
            anyhow::bail!("a comparison has no JUnit form\nfix: give --format text, md or html")
        }
    })?;
    Ok(exit_byte(j.exit_code()))
}

/// Two comparisons figure by figure, each judged again from its reports.
fn diff_compares(a: &Path, b: &Path, ledger: Option<&Ledger>) -> Result<u8> {
    if !(compare::is_compare_dir(a) && compare::is_compare_dir(b)) {
        anyhow::bail!(
            "one of {} and {} is a comparison directory (from `cargo xtask vm-compare`) and the \
             other is not: diff two comparisons, two matrices or two reports",
            a.display(),
            b.display()
        );
    }
    let ja = compare::read(a, ledger)?;
    let jb = compare::read(b, ledger)?;
    warn(&ja.warnings);
    warn(&jb.warnings);
    emit(&render::compare::diff(
        &ja,
        &jb,
        &escape::line(&a.display().to_string()),
        &escape::line(&b.display().to_string()),
    ))?;
    Ok(0)
}

/// Migrations side by side, each judged again from its halves; the pairs' exit code.
fn show_pairs(dirs: &[PathBuf], format: render::Format, ledger: Option<&Ledger>) -> Result<u8> {
    let (m, warnings) = matrix::pairs::load(dirs, ledger)?;
    warn(&warnings);
    emit(&match format {
        render::Format::Text => matrix::pairs::text(&m),
        render::Format::Md => matrix::pairs::md(&m),
        render::Format::Html => matrix::pairs::html(&m),
        render::Format::Junit => matrix::pairs::junit(&m),
    })?;
    Ok(exit_byte(m.exit_code))
}

fn merge(
    out: PathBuf,
    images_dir: Option<PathBuf>,
    images: Option<&str>,
    reports: Vec<PathBuf>,
) -> Result<u8> {
    let m = matrix::merge::merge(&matrix::merge::MergeOptions {
        out: out.clone(),
        reports,
        images_dir,
        images: images.map(matrix::parse_images_arg).unwrap_or_default(),
        command_line: std::env::args().collect(),
    })?;
    eprint!("{}", matrix::render::text(&m));
    // The directory the workflow reads back: the caller's own argument, as given.
    emit(&format!("{}\n", out.display()))?;
    Ok(exit_byte(m.exit_code))
}

fn list_reports(dir: &Path, ledger: Option<&Ledger>) -> Result<u8> {
    let entries = list::list(dir, ledger)?;
    let mut text = String::new();
    if entries.is_empty() {
        text = format!(
            "no reports under {}\n",
            escape::line(&dir.display().to_string())
        );
    }
    for e in entries {
        text.push_str(&format!("{e}\n"));
    }
    emit(&text)?;
    Ok(0)
}

fn diff_matrices(a: &Path, b: &Path, ledger: Option<&Ledger>) -> Result<u8> {
    if !(matrix::is_matrix_dir(a) && matrix::is_matrix_dir(b)) {
        anyhow::bail!(
            "one of {} and {} is a matrix directory and the other is not: diff two matrices or two reports",
            a.display(),
            b.display()
        );
    }
    let (ma, wa) = matrix::load(a, None, ledger)?;
    let (mb, wb) = matrix::load(b, None, ledger)?;
    warn(&wa);
    warn(&wb);
    emit(&matrix::render::diff(
        &ma,
        &mb,
        &escape::line(&a.display().to_string()),
        &escape::line(&b.display().to_string()),
    ))?;
    Ok(0)
}

/// Warnings on stderr, one escaped line each.
fn warn(warnings: &[String]) {
    let mut err = std::io::stderr().lock();
    for w in warnings {
        let _ = writeln!(err, "warning: {}", escape::line(w));
    }
}

/// Writes `text` to standard output. A closed pipe ends the output without an error (print!
/// would panic on it); any other write error is reported.
fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to standard output")),
    }
}

fn exit_byte(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(1)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let _ = std::io::stderr().write_all(escape::error_chain(&e).as_bytes());
            ExitCode::from(2)
        }
    }
}
