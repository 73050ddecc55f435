//! `cargo run -p tide --example tide -- --days 3`: the experiment without the `sugarshack`
//! binary (what `sugarshack tide` does), with where the time went on stderr.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    tide: tide::TideArgs,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
    /// Keep the lake in memory instead of a temporary folder.
    #[arg(long, conflicts_with = "lake_dir")]
    memory: bool,
    /// No lake at all: bronze as a list in memory (the reference the lake run is checked
    /// against; the figures read from the lake are left out).
    #[arg(long, conflicts_with_all = ["lake_dir", "memory"])]
    reference: bool,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let started = std::time::Instant::now();
    let at = match (&cli.tide.lake_dir, cli.memory) {
        (Some(d), _) => tide::LakeAt::Dir(d.clone()),
        (None, true) => tide::LakeAt::Memory,
        (None, false) => tide::LakeAt::Temporary,
    };
    let run = async {
        if cli.reference {
            tide::run_reference(&cli.tide).await
        } else {
            tide::run_on(&cli.tide, at, !cli.quiet).await
        }
    };
    let report = match run.await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tide: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match tide::render(&report, cli.tide.format) {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("tide: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let t = &report.timings;
    eprintln!(
        "tide: {:.1?} in all: simulation {:.1?} (loader commits {:.1?}, expiry {:.1?}, model reads {:.1?}, target commits {:.1?}), reconciliation SQL {:.1?}, the story (business SQL, replays, report) {:.1?}",
        started.elapsed(),
        t.simulate,
        t.loader_commits,
        t.expiry,
        t.model_reads,
        t.target_commits,
        t.reconcile,
        t.story
    );
    std::process::ExitCode::SUCCESS
}
