//! Thin front end for development tasks: `cargo xtask image`, `cargo xtask bench-image`.
//! Everything real lives in the sharedos-rig library.

use anyhow::Result;
use clap::{Parser, Subcommand};
use sharedos_rig::image::{self, BuildOptions};

#[derive(Parser)]
#[command(name = "xtask", about = "sharedos-rig development tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build (or find in the cache) the pinned guest image; prints the entry directory last.
    Image(BuildOptions),
    /// Time cached no-op image builds (the first run builds if needed and is not counted).
    BenchImage {
        #[command(flatten)]
        opts: BuildOptions,
        #[arg(long, default_value_t = 10)]
        iterations: usize,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Image(opts) => image::cli_main_image(&opts),
        Command::BenchImage { opts, iterations } => {
            let mut t = image::bench_cached_image(&opts, iterations.max(1))?;
            t.sort();
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
            let (min, med, max) = (t[0], t[t.len() / 2], t[t.len() - 1]);
            println!(
                "cached image no-op over {} runs: min {:.1} ms, median {:.1} ms, max {:.1} ms ({})",
                t.len(),
                ms(min),
                ms(med),
                ms(max),
                if max.as_secs_f64() < 1.0 {
                    "under a second"
                } else {
                    "NOT under a second"
                }
            );
            Ok(())
        }
    }
}
