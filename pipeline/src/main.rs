//! The `tomlite` command line: parses flags, resolves them into the
//! library's plain config structs, runs, prints a one-screen summary and
//! exits with an explicit [`ExitStatus`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use tomlite::annotation::FileAnnotator;
use tomlite::nodes::Registry;
use tomlite::policy::Policy;
use tomlite::record::IngestOptions;
use tomlite::run::{RunConfig, RunError, RunSummary};

/// The process exit codes; documented in the README.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum ExitStatus {
    /// The run committed.
    Success = 0,
    /// The run failed; nothing was committed.
    Failed = 1,
    /// Bad usage or configuration (policy, node registry, missing input); nothing ran.
    Config = 2,
    /// Another run holds the staging directory's lock.
    Locked = 3,
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> Self {
        ExitCode::from(s as u8)
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "tomlite",
    version,
    about = "Nightly ToM-lite annotation of persona-memory records"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Annotate, validate and stage records; commit one run directory.
    Run(RunArgs),
    /// Print the effective policy (YAML) and its sha256.
    Policy(PolicyArgs),
}

#[derive(Debug, Args)]
struct PolicyArgs {
    /// Policy file (default: ./tomlite.yaml when present, else the seed's defaults).
    #[arg(long)]
    policy: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Record input: a JSONL file, a Parquet file, or a folder of .md/.txt journals. Repeatable.
    #[arg(long, required = true)]
    input: Vec<PathBuf>,
    /// Node registry (JSONL or Parquet): id, kind, name, aliases.
    #[arg(long)]
    nodes: Option<PathBuf>,
    /// Annotations made elsewhere (JSONL, one object per record_id).
    #[arg(long)]
    annotations: Option<PathBuf>,
    /// Staging directory (default: the policy's run.staging).
    #[arg(long)]
    staging: Option<PathBuf>,
    /// Policy file (default: ./tomlite.yaml when present, else the seed's defaults).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Process every record, ignoring what earlier runs committed.
    #[arg(long)]
    full: bool,
    /// Persona of journal files that sit directly in an input folder.
    #[arg(long)]
    journal_persona: Option<String>,
}

/// An error with the exit status it maps to.
struct Failure {
    status: ExitStatus,
    error: anyhow::Error,
}

impl Failure {
    fn config(error: impl Into<anyhow::Error>) -> Self {
        Self {
            status: ExitStatus::Config,
            error: error.into(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => cmd_run(args),
        Command::Policy(args) => cmd_policy(args),
    };
    match result {
        Ok(()) => ExitStatus::Success.into(),
        Err(f) => {
            eprintln!("tomlite: error: {:#}", f.error);
            f.status.into()
        }
    }
}

fn load_policy(explicit: Option<&Path>) -> Result<(Policy, Option<PathBuf>), Failure> {
    let path = match explicit {
        Some(p) => Some(p.to_path_buf()),
        None => Some(PathBuf::from("tomlite.yaml")).filter(|p| p.is_file()),
    };
    match path {
        Some(p) => Ok((Policy::load(&p).map_err(Failure::config)?, Some(p))),
        None => Ok((Policy::default(), None)),
    }
}

fn cmd_policy(args: PolicyArgs) -> Result<(), Failure> {
    let (policy, source) = load_policy(args.policy.as_deref())?;
    let source = source.map_or("the seed's defaults (no policy file)".to_string(), |p| {
        p.display().to_string()
    });
    println!("# effective policy from {source}");
    println!("# sha256: {}", policy.sha256());
    print!("{}", policy.to_yaml());
    Ok(())
}

fn cmd_run(args: RunArgs) -> Result<(), Failure> {
    let (policy, policy_source) = load_policy(args.policy.as_deref())?;
    for input in &args.input {
        if !input.exists() {
            return Err(Failure::config(anyhow::anyhow!(
                "input {} does not exist",
                input.display()
            )));
        }
    }
    let staging = args
        .staging
        .clone()
        .or_else(|| policy.run.staging.clone())
        .ok_or_else(|| {
            Failure::config(anyhow::anyhow!(
                "no staging directory: pass --staging DIR or set run.staging in the policy"
            ))
        })?;
    let nodes = match &args.nodes {
        Some(p) => Some((p.clone(), Registry::load(p).map_err(Failure::config)?)),
        None => None,
    };
    let Some(annotations) = &args.annotations else {
        return Err(Failure::config(anyhow::anyhow!(
            "no annotator: pass --annotations FILE (annotations made elsewhere, checked by the same validator)"
        )));
    };
    let mut annotator = FileAnnotator::open(annotations)
        .with_context(|| format!("cannot use --annotations {}", annotations.display()))
        .map_err(Failure::config)?;
    let cfg = RunConfig {
        inputs: args.input.clone(),
        staging,
        ingest: IngestOptions {
            max_text_bytes: policy.run.max_text_bytes,
            journal_persona: args.journal_persona.clone(),
        },
        policy,
        policy_source,
        nodes,
        full: args.full,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    match tomlite::run::run(&cfg, &mut annotator) {
        Ok(summary) => {
            print_summary(&summary);
            Ok(())
        }
        Err(RunError::Staging(e @ tomlite_staging::Error::Locked { .. })) => Err(Failure {
            status: ExitStatus::Locked,
            error: anyhow::Error::new(e).context("another run is in progress; nothing was done"),
        }),
        Err(e) => Err(Failure {
            status: ExitStatus::Failed,
            error: anyhow::Error::new(e).context("run failed; nothing was committed"),
        }),
    }
}

fn print_summary(s: &RunSummary) {
    let c = &s.counts;
    println!("tomlite run {}: committed", s.run_id);
    println!(
        "  records     {} in: {} processed, {} skipped (unchanged), {} rejected",
        c.records_in, c.processed, c.skipped_unchanged, c.rejected
    );
    if c.processed == 0 && c.skipped_unchanged > 0 {
        println!(
            "              nothing new: every record is unchanged since run {}",
            s.skipped_from.join(", ")
        );
    }
    println!(
        "  tags        {} promoted, {} quarantined; {} records abstained",
        c.promoted_tags, c.quarantined_tags, c.abstained
    );
    println!(
        "  edges       {} promoted, {} quarantined",
        c.promoted_edges, c.quarantined_edges
    );
    if c.quarantined_annotations > 0 {
        println!(
            "  annotations {} unreadable, quarantined whole",
            c.quarantined_annotations
        );
    }
    if c.annotation_rejects > 0 {
        println!(
            "  annotations {} lines match no record (see rejects)",
            c.annotation_rejects
        );
    }
    if !s.reasons.is_empty() {
        println!("  quarantine reasons (items can carry several):");
        let width = s.reasons.keys().map(String::len).max().unwrap_or(0);
        for (r, n) in &s.reasons {
            println!("    {r:width$}  {n}");
        }
    }
    if !s.recovered.is_empty() {
        println!(
            "  recovered   removed {} leftovers of an interrupted run",
            s.recovered.len()
        );
    }
    println!("  run dir     {}", s.run_dir.display());
}
