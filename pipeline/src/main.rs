//! The `tomlite` command line: parses flags, resolves them into the
//! library's plain config structs, runs, prints a one-screen summary and
//! exits with an explicit [`ExitStatus`].
//!
//! Standard output goes through [`stdout`]: this file's `println!` and
//! `print!` are the macros below, not the standard ones, so a reader that
//! has gone away (`tomlite curate status | head -1`) ends the output
//! quietly instead of a panic.

/// Writes to standard output with `write!`; see [`stdout::write`].
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!($($arg)*))
    };
}

/// Writes a line to standard output with `writeln!`; see [`stdout::write`].
macro_rules! println {
    () => {
        $crate::stdout::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Standard output that a closed pipe cannot crash.
mod stdout {
    use std::io::Write as _;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The reader is gone: nothing more is written.
    static CLOSED: AtomicBool = AtomicBool::new(false);
    /// The first write error other than a closed pipe.
    static FAILED: Mutex<Option<String>> = Mutex::new(None);

    /// Writes and flushes. A broken pipe (the reader exited: `| head -1`,
    /// `| true`) drops this and every later write, and the command still
    /// ends with the exit status of its work, which is done by then. Any
    /// other error is kept for [`failure`] and also stops the output.
    pub fn write(args: std::fmt::Arguments<'_>) {
        if CLOSED.load(Ordering::Relaxed) {
            return;
        }
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
            CLOSED.store(true, Ordering::Relaxed);
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                let mut failed = FAILED.lock().unwrap_or_else(|p| p.into_inner());
                failed.get_or_insert_with(|| e.to_string());
            }
        }
    }

    /// A write error other than a broken pipe, if one happened.
    pub fn failure() -> Option<String> {
        FAILED.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use tomlite::annotate::classifier::Classifier;
use tomlite::annotate::file::FileAnnotator;
use tomlite::annotate::{Annotator, annotation_to_json};
use tomlite::graph::nodes::Registry;
use tomlite::ingest::record::IngestOptions;
use tomlite::rules::policy::Policy;
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
    /// The time budget ran out: what was done is committed, the next run
    /// takes the rest.
    Partial = 4,
    /// `parse-annotation`: the raw output is an `ANOMALY` (no annotation read).
    Anomaly = 5,
    /// `run --escalate-poison`: the run committed, but skipped poison records.
    Poison = 6,
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
    /// Annotate records with the local classifier; write DESIGN.md's annotation JSONL.
    Annotate(AnnotateArgs),
    /// Fine-tune the encoder (LoRA adapters) and train and calibrate the
    /// heads from the committed labeled data (--frozen: the heads only).
    Train(TrainArgs),
    /// Measure the classifier on labeled records and/or a GoEmotions split.
    Eval(EvalArgs),
    /// The curator's decisions: apply a decisions file, or show what is pending.
    #[command(subcommand)]
    Curate(CurateCommand),
    /// Join complete shard runs (`run --shard K/N`) into one committed run.
    Merge(MergeArgs),
    /// Re-check a run's files against its sealed receipt (or every committed
    /// run of a staging directory); exit 1 when anything differs.
    Verify(VerifyArgs),
    /// Read one raw annotator output on stdin; print its canonical annotation and parse class.
    ParseAnnotation(ParseAnnotationArgs),
    /// Subagent contracts: lint them, or print their JSON Schema.
    #[command(subcommand)]
    Contract(ContractCommand),
}

#[derive(Debug, Subcommand)]
enum ContractCommand {
    /// Check contract YAML files against the seed's lint rules; exit 1 on any error.
    Lint(ContractLintArgs),
    /// Print the JSON Schema of a subagent contract.
    Schema,
}

#[derive(Debug, Args)]
struct ContractLintArgs {
    /// Contract files (YAML).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ParseAnnotationArgs {
    /// The record id to put in the canonical annotation.
    #[arg(long)]
    record_id: Option<String>,
    /// The annotator to name when the output names none.
    #[arg(long)]
    annotator: Option<String>,
    /// A file holding the record's text: quotes without offsets are anchored
    /// at their first verbatim occurrence, and quotes not in it are reported.
    #[arg(long)]
    text: Option<PathBuf>,
    /// Print only the canonical annotation line (the `--annotations` shape).
    #[arg(long)]
    annotation_only: bool,
}

#[derive(Debug, Subcommand)]
enum CurateCommand {
    /// Apply decisions.jsonl (exported from report.html) to <staging>/curated/.
    Apply(CurateApplyArgs),
    /// What is pending, decided and applied.
    Status(CurateStatusArgs),
}

#[derive(Debug, Args)]
struct CurateApplyArgs {
    /// The decisions file (JSONL: run_id, item_id, decision, label, target_node, curator, note, decided_at).
    decisions: PathBuf,
    /// Staging directory (default: the policy's run.staging).
    #[arg(long)]
    staging: Option<PathBuf>,
    /// Node registry for relabelled edges (default: the one the item's run used).
    #[arg(long)]
    nodes: Option<PathBuf>,
    /// Policy file (for run.staging).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct CurateStatusArgs {
    /// Staging directory (default: the policy's run.staging).
    #[arg(long)]
    staging: Option<PathBuf>,
    /// Also count the lines of this decisions file that are not applied yet.
    #[arg(long)]
    decisions: Option<PathBuf>,
    /// Policy file (for run.staging).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ModelArgs {
    /// Encoder directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long, env = "TOMLITE_MODEL_DIR")]
    model_dir: Option<PathBuf>,
    /// Trained heads directory (heads.safetensors, card.json).
    #[arg(long, env = "TOMLITE_HEADS_DIR")]
    heads_dir: Option<PathBuf>,
    /// Precision of the encoder's matrix products: f32, or int8 weights
    /// with integer activations (see models/PERF.md).
    #[arg(long, env = "TOMLITE_PRECISION", default_value_t = tomlite_models::EncodeOptions::default().precision)]
    precision: tomlite_models::Precision,
    /// Folder of the LoRA adapters (adapters.safetensors) merged into the
    /// encoder at load (default: the heads directory's, when it has them).
    #[arg(long, env = "TOMLITE_ADAPTERS_DIR")]
    adapters: Option<PathBuf>,
}

impl ModelArgs {
    fn dirs(&self) -> (PathBuf, PathBuf) {
        (
            self.model_dir
                .clone()
                .unwrap_or_else(|| repo_path(tomlite::annotate::classifier::DEFAULT_MODEL_DIR)),
            self.heads_dir.clone().unwrap_or_else(default_heads_dir),
        )
    }

    fn load(&self, policy: &Policy) -> Result<Classifier, Failure> {
        let (m, h) = self.dirs();
        let mut clf = Classifier::load_with_adapters(
            &m,
            &h,
            self.adapters.as_deref(),
            policy.classifier_policy.abstain_below,
            self.precision,
        )
        .map_err(Failure::config)?;
        let sensitive = &policy.persona_memory_policy.sensitive_content;
        clf.set_sensitive_threshold(sensitive.detect.then_some(sensitive.threshold));
        Ok(clf)
    }
}

/// The fine-tuned folder (`models/artifacts/adapters`) when `tomlite train`
/// has finished one there (adapters and heads), else the frozen-encoder
/// heads (`models/artifacts/heads`).
fn default_heads_dir() -> PathBuf {
    let tuned = repo_path(tomlite::annotate::classifier::DEFAULT_ADAPTERS_DIR);
    if tuned
        .join(tomlite::annotate::classifier::ADAPTERS_FILE)
        .is_file()
        && tuned.join(tomlite_models::heads::CARD_FILE).is_file()
    {
        tuned
    } else {
        repo_path(tomlite::annotate::classifier::DEFAULT_HEADS_DIR)
    }
}

/// `rel` under the repository this binary was built in (target/<profile>/tomlite
/// lives two levels below it), else under the current directory.
fn repo_path(rel: &str) -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1) {
            let p = dir.join(rel);
            if p.exists() {
                return p;
            }
        }
    }
    PathBuf::from(rel)
}

#[derive(Debug, Args)]
struct AnnotateArgs {
    /// Record input (JSONL, Parquet, or a folder of journals). Repeatable.
    #[arg(long, required = true)]
    input: Vec<PathBuf>,
    /// Where to write the annotations (JSONL).
    #[arg(long)]
    out: PathBuf,
    /// Node registry (JSONL or Parquet): mentions of its nodes become edge candidates.
    #[arg(long)]
    nodes: Option<PathBuf>,
    /// Policy file (for `classifier_policy.abstain_below` and the text limit).
    #[arg(long)]
    policy: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
    /// Persona of journal files that sit directly in an input folder.
    #[arg(long)]
    journal_persona: Option<String>,
}

#[derive(Debug, Args)]
struct TrainArgs {
    /// Labeled ToM-lite JSONL files (default: data/training/tom_lite/*.jsonl
    /// and data/training/styles/*.jsonl).
    #[arg(long)]
    data: Vec<PathBuf>,
    /// Records labeled for sensitive content, for the sensitive content
    /// head (default: data/sensitivity/*.jsonl; none there: no head, the
    /// identifier rules alone detect).
    #[arg(long)]
    sensitivity: Vec<PathBuf>,
    /// Folder with GoEmotions train.tsv, dev.tsv and labels.txt.
    #[arg(long, default_value = "../shared/datasets/goemotions")]
    goemotions: PathBuf,
    /// Encoder directory.
    #[arg(long, env = "TOMLITE_MODEL_DIR")]
    model_dir: Option<PathBuf>,
    /// Where to write the adapters and heads (default: models/artifacts/adapters;
    /// with --frozen, models/artifacts/heads).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Keep the encoder frozen: fit only the heads on its embeddings (the
    /// committed heads come from this path).
    #[arg(long)]
    frozen: bool,
    /// Fine-tuning passes over the examples (default 4). With --frozen:
    /// passes of the heads (default 30; the tom_kind and intensity heads
    /// get twice as many, the affect MLP a quarter).
    #[arg(long)]
    epochs: Option<usize>,
    /// GoEmotions train comments per fine-tuning epoch, drawn afresh each
    /// epoch (seeded) from the whole train split.
    #[arg(long, default_value_t = tomlite::train::FineTuneConfig::default().goemotions)]
    goemotions_per_epoch: usize,
    /// Continue an interrupted fine-tuning run from the checkpoint in
    /// <out>/checkpoint (same data and settings; --epochs may grow).
    #[arg(long)]
    resume: bool,
    /// Seed of initialisation and batch order.
    #[arg(long, default_value_t = 17)]
    seed: u64,
    /// Use only the first N examples of each source (quick checks).
    #[arg(long)]
    limit: Option<usize>,
    /// Use at most N GoEmotions train examples, evenly spaced, for the heads (embedding them dominates their training time).
    #[arg(long)]
    max_goemotions: Option<usize>,
    /// Cache of training-text embeddings (default target/tomlite-train-cache; "none" to disable).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Node registry of the training data (default: data/training/nodes.jsonl).
    #[arg(long)]
    nodes: Option<PathBuf>,
    /// A staging directory whose curated decisions (curate apply) become
    /// tom_kind examples: accepted and relabelled tags as positives,
    /// rejected ones as negatives of their kind.
    #[arg(long)]
    curated: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct EvalArgs {
    /// Labeled records (JSONL with a `gold` object): one or more files
    /// (`--data a.jsonl b.jsonl`), or repeat the flag.
    #[arg(long, num_args = 1..)]
    data: Vec<PathBuf>,
    /// A GoEmotions TSV split (labels.txt beside it).
    #[arg(long)]
    goemotions: Option<PathBuf>,
    /// Records labeled for sensitive content (data/sensitivity/*.jsonl):
    /// the detector's recall per category, false positives on the hard
    /// controls, ECE; with --dev only its held-out styles
    /// (third_person_memory, rambling_journal).
    #[arg(long, num_args = 1..)]
    sensitivity: Vec<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    json: bool,
    /// Only the records of the held-out dev split: whole held-out styles (emoji_social, third_person_memory, reported_speech, logistics_admin) and 15 % of the records without a style, by a stable hash of their id.
    #[arg(long)]
    dev: bool,
    /// Policy file (thresholds of "what the policy would promote").
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Node registry of the labeled data: evaluates edges too (gold
    /// `mentions`, `unknown_mentions`, `links_to`).
    #[arg(long)]
    nodes: Option<PathBuf>,
    #[command(flatten)]
    model: ModelArgs,
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
    #[arg(long, conflicts_with = "raw_annotations")]
    annotations: Option<PathBuf>,
    /// Raw annotator output made elsewhere (JSONL lines `{record_id, annotator, raw}`),
    /// read by the verdict parser.
    #[arg(long)]
    raw_annotations: Option<PathBuf>,
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
    #[command(flatten)]
    model: ModelArgs,
    /// Stop taking new records near this local time (HH:MM within the next
    /// 12 h; one that passed less than 12 h ago means at once), commit what
    /// is done and exit 4; the next run takes the rest.
    #[arg(long, value_name = "HH:MM")]
    deadline: Option<String>,
    /// Like --deadline, as seconds from the start.
    #[arg(long, value_name = "N")]
    max_seconds: Option<f64>,
    /// Process only shard K of N (0-based): the records whose persona_id
    /// hashes to K. Give each shard its own --staging; join them with `tomlite merge`.
    #[arg(long, value_name = "K/N")]
    shard: Option<String>,
    /// Fail the run without committing when more than this share of the
    /// records annotated so far fails (at least 3; records that failed in
    /// earlier runs not counted).
    #[arg(long, default_value_t = tomlite::run::DEFAULT_MAX_FAILED_SHARE)]
    max_failed_share: f64,
    /// A record whose annotation alone takes longer than this fails
    /// (seconds; measured when the call returns, a hung call is not cut off).
    #[arg(long, value_name = "SECS")]
    record_timeout: Option<f64>,
    /// Records per annotator call (default: the annotator's own).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Seconds between heartbeats in events.jsonl (and log lines on stderr).
    #[arg(long, default_value_t = 30.0, hide = true)]
    heartbeat_seconds: f64,
    /// No progress and no summary: only errors and the poison warning, on stderr (for cron).
    #[arg(long, short)]
    quiet: bool,
    /// Exit 6 when the run committed but skipped poison records (records
    /// whose annotation failed in 3 runs); scripts/nightly passes it.
    #[arg(long)]
    escalate_poison: bool,
    /// Retries of a transient I/O error (the seed's tool transient retry:
    /// default 1, hard maximum 2).
    #[arg(long, value_name = "N", default_value_t = tomlite_staging::retry::DEFAULT_RETRIES)]
    transient_retries: u32,
}

#[derive(Debug, Args)]
struct MergeArgs {
    /// Committed shard run directories (`<shard staging>/runs/<run_id>`), one per shard.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Staging directory that receives the merged run.
    #[arg(long)]
    staging: PathBuf,
    /// The policy the shards ran with (default: ./tomlite.yaml when present, else the seed's defaults).
    #[arg(long)]
    policy: Option<PathBuf>,
    /// The node registry the shards ran with (for the report's edge details).
    #[arg(long)]
    nodes: Option<PathBuf>,
    /// Print the merged run's summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    /// A run directory (`<staging>/runs/<run_id>`).
    #[arg(required_unless_present = "staging", conflicts_with = "staging")]
    run_dir: Option<PathBuf>,
    /// Verify every run the staging directory's state lists, and that list.
    #[arg(long)]
    staging: Option<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    json: bool,
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
    #[cfg(feature = "failpoints")]
    let _faults = fail::FailScenario::setup();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => cmd_run(args),
        Command::Policy(args) => cmd_policy(args),
        Command::Annotate(args) => cmd_annotate(args),
        Command::Train(args) => cmd_train(args),
        Command::Eval(args) => cmd_eval(args),
        Command::Curate(CurateCommand::Apply(args)) => cmd_curate_apply(args),
        Command::Curate(CurateCommand::Status(args)) => cmd_curate_status(args),
        Command::Merge(args) => cmd_merge(args),
        Command::Verify(args) => cmd_verify(args),
        Command::ParseAnnotation(args) => cmd_parse_annotation(args),
        Command::Contract(ContractCommand::Lint(args)) => cmd_contract_lint(args),
        Command::Contract(ContractCommand::Schema) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&tomlite_contract::schema()).unwrap_or_default()
            );
            Ok(())
        }
    };
    match result {
        Ok(()) => match stdout::failure() {
            None => ExitStatus::Success.into(),
            Some(e) => {
                eprintln!("tomlite: error: cannot write to standard output: {e}");
                ExitStatus::Failed.into()
            }
        },
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

fn staging_of(
    explicit: Option<&PathBuf>,
    policy: Option<&std::path::Path>,
) -> Result<PathBuf, Failure> {
    if let Some(s) = explicit {
        return Ok(s.clone());
    }
    let (policy, _) = load_policy(policy)?;
    policy.run.staging.clone().ok_or_else(|| {
        Failure::config(anyhow::anyhow!(
            "no staging directory: pass --staging DIR or set run.staging in the policy"
        ))
    })
}

fn curate_failure(e: tomlite::curate::CurateError) -> Failure {
    match e {
        tomlite::curate::CurateError::Staging(e @ tomlite_staging::Error::Locked { .. }) => {
            Failure {
                status: ExitStatus::Locked,
                error: anyhow::Error::new(e)
                    .context("a run holds the staging directory; nothing was applied"),
            }
        }
        tomlite::curate::CurateError::Nodes(e) => Failure::config(e),
        e => Failure {
            status: ExitStatus::Failed,
            error: e.into(),
        },
    }
}

fn cmd_curate_apply(args: CurateApplyArgs) -> Result<(), Failure> {
    let staging = staging_of(args.staging.as_ref(), args.policy.as_deref())?;
    if !staging.join("state").exists() {
        return Err(Failure::config(anyhow::anyhow!(
            "{} holds no committed run",
            staging.display()
        )));
    }
    let registry = match &args.nodes {
        Some(p) => Some(Registry::load(p).map_err(Failure::config)?),
        None => None,
    };
    let report = tomlite::curate::apply(&staging, &args.decisions, registry.as_ref())
        .map_err(curate_failure)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        println!(
            "tomlite curate apply {}: {} lines: {} new, {} updated, {} already applied, {} not applied",
            args.decisions.display(),
            report.lines,
            report.new,
            report.updated,
            report.unchanged,
            report.errors.len()
        );
        for e in &report.errors {
            eprintln!("tomlite: {}: {e}", args.decisions.display());
        }
        if let Some(p) = &report.written {
            println!("  curated     {}", p.display());
        }
    }
    if report.errors.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            status: ExitStatus::Failed,
            error: anyhow::anyhow!(
                "{} decision lines were not applied (the valid ones were)",
                report.errors.len()
            ),
        })
    }
}

fn cmd_curate_status(args: CurateStatusArgs) -> Result<(), Failure> {
    let staging = staging_of(args.staging.as_ref(), args.policy.as_deref())?;
    let st =
        tomlite::curate::status(&staging, args.decisions.as_deref()).map_err(curate_failure)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&st).unwrap_or_default());
        return Ok(());
    }
    println!("tomlite curate status {}", staging.display());
    println!(
        "  pending     {} items (queued by the run that last processed their record, no decision yet)",
        st["pending"]
    );
    for (k, v) in st["pending_by_reason"].as_object().into_iter().flatten() {
        println!("    {k:32} {v}");
    }
    println!("  applied     {} decisions", st["applied"]);
    for (k, v) in st["applied_by_decision"].as_object().into_iter().flatten() {
        println!("    {k:32} {v}");
    }
    if let Some(d) = st.get("decisions_file") {
        println!(
            "  decided     {} lines in {}, {} not applied yet",
            d["lines"], d["path"], d["decided_not_applied"]
        );
    }
    Ok(())
}

/// `classifier_policy.local_llm_or_classifier_may_suggest: false` forbids the
/// local classifier to annotate.
fn classifier_may_annotate(policy: &Policy, source: Option<&Path>) -> Result<(), Failure> {
    if policy.classifier_policy.local_llm_or_classifier_may_suggest {
        return Ok(());
    }
    Err(Failure::config(anyhow::anyhow!(
        "policy {}: classifier_policy.local_llm_or_classifier_may_suggest is false: the local classifier may not annotate; give annotations made elsewhere with --annotations FILE or --raw-annotations FILE",
        source.map_or("(defaults)".into(), |p| p.display().to_string())
    )))
}

fn cmd_run(args: RunArgs) -> Result<(), Failure> {
    let started = chrono::Utc::now();
    let mut staging = args.staging.clone();
    let result = run_command(args, &mut staging);
    // A usage or configuration error leaves its record too, in a staging
    // directory that exists (one is never created for it).
    if let (Err(f), Some(staging)) = (&result, staging)
        && f.status == ExitStatus::Config
        && staging.is_dir()
    {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let run_id = tomlite::run::new_run_id(&staging.join("runs"), started);
        let error = format!("{:#}", f.error);
        let ended = tomlite::run::failed::Ended {
            run_id: &run_id,
            command: &command,
            status: "blocked",
            exit_code: ExitStatus::Config as i32,
            phase: "configure",
            error: &error,
            next_step: "fix the usage or configuration error that bug_or_blocker names, then run again",
            started_at: started,
            heartbeat: tomlite::run::events::HEARTBEAT,
            counts: serde_json::json!({}),
            left_untouched: tomlite::run::failed::untouched(
                &staging,
                "nothing ran: the staging directory was not opened",
            ),
            artifact: None,
        };
        if let Err(w) = tomlite::run::failed::record(&staging, &ended, None, false) {
            eprintln!("tomlite: warning: cannot keep the record of the blocked run {run_id}: {w}");
        }
    }
    result
}

/// `tomlite run`; sets `staging_seen` as soon as the staging directory is
/// known.
fn run_command(args: RunArgs, staging_seen: &mut Option<PathBuf>) -> Result<(), Failure> {
    let (policy, policy_source) = load_policy(args.policy.as_deref())?;
    if staging_seen.is_none() {
        staging_seen.clone_from(&policy.run.staging);
    }
    let elsewhere = args.annotations.is_some() || args.raw_annotations.is_some();
    if !elsewhere {
        classifier_may_annotate(&policy, policy_source.as_deref())?;
    } else if !policy.classifier_policy.optional {
        return Err(Failure::config(anyhow::anyhow!(
            "policy {}: classifier_policy.optional is false: the local classifier is required, so --annotations and --raw-annotations cannot replace it",
            policy_source
                .as_deref()
                .map_or("(defaults)".into(), |p| p.display().to_string())
        )));
    }
    if args.transient_retries > tomlite_staging::retry::MAX_RETRIES {
        return Err(Failure::config(anyhow::anyhow!(
            "--transient-retries {}: above the seed's hard maximum of {} retries of a transient tool error",
            args.transient_retries,
            tomlite_staging::retry::MAX_RETRIES
        )));
    }
    for input in &args.input {
        if !input.exists() {
            return Err(Failure::config(anyhow::anyhow!(
                "input {} does not exist",
                input.display()
            )));
        }
        // A device, or a Parquet input that is a pipe: refused before the run.
        tomlite::ingest::check_input(input).map_err(Failure::config)?;
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
    let mut annotator: Box<dyn Annotator> = match (&args.annotations, &args.raw_annotations) {
        (Some(annotations), _) => Box::new(
            FileAnnotator::open(annotations)
                .with_context(|| format!("cannot use --annotations {}", annotations.display()))
                .map_err(Failure::config)?,
        ),
        (None, Some(raw)) => Box::new(
            FileAnnotator::open_raw(raw)
                .with_context(|| format!("cannot use --raw-annotations {}", raw.display()))
                .map_err(Failure::config)?,
        ),
        (None, None) => {
            let mut clf = args.model.load(&policy)?;
            if let Some((_, registry)) = &nodes {
                clf.set_registry(registry);
            }
            Box::new(clf)
        }
    };
    let deadline = budget_deadline(args.deadline.as_deref(), args.max_seconds)?;
    let shard = args
        .shard
        .as_deref()
        .map(tomlite::run::Shard::parse)
        .transpose()
        .map_err(|e| Failure::config(anyhow::anyhow!(e)))?;
    if !(0.0..=1.0).contains(&args.max_failed_share) {
        return Err(Failure::config(anyhow::anyhow!(
            "--max-failed-share {} is not a share between 0 and 1",
            args.max_failed_share
        )));
    }
    let heartbeat = std::time::Duration::try_from_secs_f64(args.heartbeat_seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Failure::config(anyhow::anyhow!("--heartbeat-seconds must be positive")))?;
    let record_timeout = args
        .record_timeout
        .map(|s| {
            std::time::Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero() && *d < std::time::Duration::from_secs(86_400))
                .ok_or_else(|| {
                    Failure::config(anyhow::anyhow!(
                        "--record-timeout {s}: expected seconds, more than 0 and less than a day"
                    ))
                })
        })
        .transpose()?;
    let mut cfg = RunConfig::new(args.input.clone(), staging, policy);
    cfg.ingest.journal_persona = args.journal_persona.clone();
    cfg.policy_source = policy_source;
    cfg.nodes = nodes;
    cfg.full = args.full;
    cfg.command = std::env::args().collect::<Vec<_>>().join(" ");
    cfg.deadline = deadline;
    cfg.shard = shard;
    cfg.batch_size = args.batch_size.filter(|&b| b > 0);
    cfg.max_failed_share = args.max_failed_share;
    cfg.record_timeout = record_timeout;
    cfg.heartbeat = heartbeat;
    cfg.escalate_poison = args.escalate_poison;
    cfg.transient_retries = args.transient_retries;
    cfg.progress = tomlite::run::progress::ProgressMode::detect(
        args.quiet,
        heartbeat.min(std::time::Duration::from_secs(10)),
    );
    match tomlite::run::run(&cfg, annotator.as_mut()) {
        Ok(summary) => {
            if !args.quiet {
                print_summary(&summary);
            }
            // Poison is said even with --quiet: it is what cron must see.
            let poison = summary.counts.poison_skipped;
            if poison > 0 {
                eprintln!(
                    "tomlite: warning: run {} skipped {poison} poison records (their annotation failed in {} runs); see `poison` in {}",
                    summary.run_id,
                    tomlite::run::POISON_AFTER,
                    summary.run_dir.join("receipt.json").display()
                );
            }
            if summary.stop_condition == tomlite::run::StopCondition::Deadline {
                return Err(Failure {
                    status: ExitStatus::Partial,
                    error: anyhow::anyhow!(
                        "time budget reached: run {} committed {} records and left {} (and the rest of the input) for the next run",
                        summary.run_id,
                        summary.counts.processed + summary.counts.failed,
                        summary.counts.deferred
                    ),
                });
            }
            if poison > 0 && args.escalate_poison {
                return Err(Failure {
                    status: ExitStatus::Poison,
                    error: anyhow::anyhow!(
                        "run {} committed, but skipped {poison} poison records (--escalate-poison)",
                        summary.run_id
                    ),
                });
            }
            Ok(())
        }
        Err(RunError::Staging(e @ tomlite_staging::Error::Locked { .. })) => Err(Failure {
            status: ExitStatus::Locked,
            error: anyhow::Error::new(e).context("another run is in progress; nothing was done"),
        }),
        Err(RunError::Staging(e @ tomlite_staging::Error::Unfinished { .. })) => Err(Failure {
            status: ExitStatus::Failed,
            error: anyhow::Error::new(e)
                .context("run failed after its commit point; the next run's recovery completes it"),
        }),
        Err(e) => Err(Failure {
            status: ExitStatus::Failed,
            error: anyhow::Error::new(e).context("run failed; nothing was committed"),
        }),
    }
}

/// The instant a run must stop taking records: the next local HH:MM, or
/// `max_seconds` from now, whichever comes first.
fn budget_deadline(
    hhmm: Option<&str>,
    max_seconds: Option<f64>,
) -> Result<Option<std::time::Instant>, Failure> {
    let now = std::time::Instant::now();
    let mut out: Option<std::time::Instant> = None;
    if let Some(s) = max_seconds {
        let d = std::time::Duration::try_from_secs_f64(s)
            .map_err(|_| Failure::config(anyhow::anyhow!("--max-seconds {s} is not a duration")))?;
        out = Some(now + d);
    }
    if let Some(t) = hhmm {
        let time = chrono::NaiveTime::parse_from_str(t, "%H:%M").map_err(|_| {
            Failure::config(anyhow::anyhow!(
                "--deadline `{t}`: expected HH:MM (24-hour, local time)"
            ))
        })?;
        let local = chrono::Local::now();
        let mut target = local.date_naive().and_time(time);
        if target <= local.naive_local() {
            target += chrono::Duration::days(1);
        }
        let mut wait = (target - local.naive_local()).to_std().unwrap_or_default();
        // More than 12 h away: the deadline passed earlier today (a late
        // start or a retry), not tomorrow's: take nothing new.
        if wait > std::time::Duration::from_secs(12 * 3600) {
            wait = std::time::Duration::ZERO;
        }
        let at = now + wait;
        out = Some(out.map_or(at, |o| o.min(at)));
    }
    Ok(out)
}

fn cmd_merge(args: MergeArgs) -> Result<(), Failure> {
    let (policy, _) = load_policy(args.policy.as_deref())?;
    let registry = match &args.nodes {
        Some(p) => Some(Registry::load(p).map_err(Failure::config)?),
        None => None,
    };
    match tomlite::run::merge::merge(&args.runs, &args.staging, &policy, registry.as_ref()) {
        Ok(summary) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&summary).unwrap_or_default()
                );
            } else {
                print_summary(&summary);
            }
            Ok(())
        }
        Err(tomlite::run::merge::MergeError::Staging(
            e @ tomlite_staging::Error::Locked { .. },
        )) => Err(Failure {
            status: ExitStatus::Locked,
            error: anyhow::Error::new(e).context("another run holds the target staging directory"),
        }),
        Err(e @ tomlite::run::merge::MergeError::Refused { .. }) => Err(Failure::config(e)),
        Err(e) => Err(Failure {
            status: ExitStatus::Failed,
            error: anyhow::Error::new(e).context("merge failed; nothing was committed"),
        }),
    }
}

fn cmd_verify(args: VerifyArgs) -> Result<(), Failure> {
    let v = match (&args.run_dir, &args.staging) {
        (Some(dir), _) => {
            if !dir.is_dir() {
                return Err(Failure::config(anyhow::anyhow!(
                    "{} is not a directory",
                    dir.display()
                )));
            }
            tomlite::stage::verify::Verification {
                staging: None,
                runs: vec![tomlite::stage::verify::verify_run(dir)],
                differences: Vec::new(),
                not_checked: Vec::new(),
            }
        }
        (None, Some(root)) => {
            tomlite::stage::verify::verify_staging(root).map_err(Failure::config)?
        }
        (None, None) => unreachable!("clap requires RUN_DIR or --staging"),
    };
    if args.json {
        let mut out = serde_json::to_value(&v).unwrap_or_default();
        out["ok"] = serde_json::json!(v.ok());
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        for r in &v.runs {
            if r.differences.is_empty() {
                println!("ok      {} ({} files)", r.dir.display(), r.files);
            }
        }
        for d in v.all_differences() {
            println!("DIFFERS {d}");
        }
        for n in &v.not_checked {
            println!("skipped {n}");
        }
    }
    if v.ok() {
        Ok(())
    } else {
        let bad = v.runs.iter().filter(|r| !r.differences.is_empty()).count();
        Err(Failure {
            status: ExitStatus::Failed,
            error: anyhow::anyhow!(
                "verify: {} differences ({bad} of {} runs, {} in the staging directory's list of runs)",
                v.all_differences().count(),
                v.runs.len(),
                v.differences.len()
            ),
        })
    }
}

fn print_summary(s: &RunSummary) {
    let c = &s.counts;
    println!(
        "tomlite run {}: committed{}",
        s.run_id,
        match s.stop_condition {
            tomlite::run::StopCondition::Deadline => " (partial: time budget reached)",
            tomlite::run::StopCondition::InputExhausted => "",
        }
    );
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
        "  edges       {} promoted, {} quarantined; {} to an earlier memory, {} naming someone not in the registry",
        c.promoted_edges, c.quarantined_edges, c.memory_links, c.unknown_mentions
    );
    let sens = &s.sensitive;
    if sens.records > 0 {
        let detected: Vec<String> = sens
            .by_category
            .iter()
            .map(|(cat, n)| format!("{cat} {n}"))
            .collect();
        println!(
            "  sensitive   {} sensitive records ({} safety): {} flagged by their producer; detected: {}",
            sens.records,
            sens.safety_records,
            sens.flagged,
            if detected.is_empty() {
                "none".to_string()
            } else {
                detected.join(", ")
            }
        );
    }
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
    if c.failed > 0 || c.poison_skipped > 0 {
        println!(
            "  failed      {} records failed to annotate (retried next run), {} skipped as poison (see rejects)",
            c.failed, c.poison_skipped
        );
    }
    if c.deferred > 0 {
        println!(
            "  deferred    {} records read but left for the next run (time budget)",
            c.deferred
        );
    }
    if c.other_shards > 0 {
        println!(
            "  shards      {} records belong to other shards",
            c.other_shards
        );
    }
    if s.retries_used > 0 {
        println!(
            "  retries     {} transient I/O errors retried",
            s.retries_used
        );
    }
    let left = s
        .recovered
        .iter()
        .filter(|l| l.starts_with(tomlite_staging::LEFT_ALONE))
        .count();
    if s.recovered.len() > left {
        println!(
            "  recovered   removed {} leftovers of an interrupted run",
            s.recovered.len() - left
        );
    }
    if left > 0 {
        println!(
            "  left alone  {left} entries of runs/ this program did not write (see the receipt's recovered)"
        );
    }
    println!("  run dir     {}", s.run_dir.display());
}

fn cmd_contract_lint(args: ContractLintArgs) -> Result<(), Failure> {
    use tomlite_contract::Severity;
    let mut all = Vec::new();
    for f in &args.files {
        all.extend(tomlite_contract::lint_file(f));
    }
    let errors = all.iter().filter(|f| f.severity == Severity::Error).count();
    let warnings = all.len() - errors;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "files": args.files.len(),
                "errors": errors,
                "warnings": warnings,
                "findings": all,
            }))
            .unwrap_or_default()
        );
    } else {
        for f in &all {
            let sev = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            println!(
                "{}: {sev}[{}] {}: {}",
                f.file,
                f.rule.id(),
                f.path,
                f.message
            );
        }
        println!(
            "tomlite contract lint: {} files, {errors} errors, {warnings} warnings",
            args.files.len()
        );
    }
    if errors == 0 {
        Ok(())
    } else {
        Err(Failure {
            status: ExitStatus::Failed,
            error: anyhow::anyhow!("{errors} contract lint errors"),
        })
    }
}

fn cmd_parse_annotation(args: ParseAnnotationArgs) -> Result<(), Failure> {
    use std::io::Read as _;
    let text = match &args.text {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read --text {}", p.display()))
                .map_err(Failure::config)?,
        ),
        None => None,
    };
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .context("cannot read stdin")
        .map_err(Failure::config)?;
    let raw = String::from_utf8_lossy(&bytes);
    let mut v = tomlite::annotate::verdict::parse(&raw);
    if let std::borrow::Cow::Owned(_) = raw {
        v.notes
            .push("stdin is not valid UTF-8: invalid bytes read as U+FFFD".into());
    }
    let record_id = args.record_id.clone().or_else(|| {
        v.object
            .as_ref()
            .and_then(|o| o.get("record_id"))
            .and_then(|r| r.as_str())
            .map(str::to_string)
    });
    let mut problems = Vec::new();
    let canonical = v.annotation.as_mut().map(|a| {
        if a.annotator.is_none() {
            a.annotator = args.annotator.clone();
        }
        if let Some(t) = &text {
            let n = tomlite::annotate::verdict::anchor_quotes(a, t);
            if n > 0 {
                v.notes
                    .push(format!("{n} quote(s) anchored in the record text"));
            }
        }
        problems = tomlite::annotate::verdict::problems(a, text.as_deref());
        let mut j = annotation_to_json(record_id.as_deref().unwrap_or_default(), a);
        if record_id.is_none() {
            j["record_id"] = serde_json::Value::Null;
        }
        j
    });
    if args.annotation_only {
        if let Some(c) = &canonical {
            println!("{c}");
        }
    } else {
        let out = serde_json::json!({
            "parse_class": v.class.as_str(),
            "escape_shape": v.shape.map(|s| s.as_str()),
            "annotation": canonical,
            "problems": problems,
            "notes": v.notes,
            "error": v.error,
            "raw_bytes": bytes.len(),
        });
        println!("{out}");
    }
    match v.error {
        None => Ok(()),
        Some(e) => Err(Failure {
            status: ExitStatus::Anomaly,
            error: anyhow::anyhow!("ANOMALY: {e}"),
        }),
    }
}

fn cmd_annotate(args: AnnotateArgs) -> Result<(), Failure> {
    use std::io::Write as _;
    let (policy, source) = load_policy(args.policy.as_deref())?;
    classifier_may_annotate(&policy, source.as_deref())?;
    let mut clf = args.model.load(&policy)?;
    if let Some(p) = &args.nodes {
        clf.set_registry(&Registry::load(p).map_err(Failure::config)?);
    }
    let opts = IngestOptions {
        max_text_bytes: policy.run.max_text_bytes,
        journal_persona: args.journal_persona.clone(),
    };
    let failed = |e: anyhow::Error| Failure {
        status: ExitStatus::Failed,
        error: e,
    };
    let tmp = args.out.with_extension("jsonl.tmp");
    let file = std::fs::File::create(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))
        .map_err(failed)?;
    let mut out = std::io::BufWriter::new(file);
    let (mut n, mut rejected) = (0u64, 0u64);
    let started = std::time::Instant::now();
    for input in &args.input {
        let items = tomlite::ingest::open(input, &opts).map_err(|e| failed(e.into()))?;
        let mut batch: Vec<tomlite::ingest::record::Record> = Vec::new();
        let mut flush = |batch: &mut Vec<tomlite::ingest::record::Record>,
                         out: &mut std::io::BufWriter<std::fs::File>|
         -> anyhow::Result<()> {
            let refs: Vec<&tomlite::ingest::record::Record> = batch.iter().collect();
            let texts: Vec<&str> = refs.iter().map(|r| r.text.as_str()).collect();
            let scores = clf.score(&texts)?;
            for (r, s) in refs.iter().zip(&scores) {
                let a = clf.annotation(r, s);
                serde_json::to_writer(&mut *out, &annotation_to_json(&r.id, &a))?;
                out.write_all(b"\n")?;
            }
            batch.clear();
            Ok(())
        };
        for item in items {
            match item.map_err(|e| failed(e.into()))? {
                tomlite::ingest::record::Item::Record(r) => {
                    n += 1;
                    batch.push(*r);
                    if batch.len() == tomlite::annotate::classifier::RECORDS_PER_PASS {
                        flush(&mut batch, &mut out).map_err(failed)?;
                    }
                }
                tomlite::ingest::record::Item::Reject(r) => {
                    rejected += 1;
                    eprintln!(
                        "tomlite: skipped {}:{} ({}): {}: {}",
                        r.source,
                        r.line,
                        r.record_id.as_deref().unwrap_or("?"),
                        r.field.as_deref().unwrap_or("line"),
                        r.error
                    );
                }
            }
        }
        flush(&mut batch, &mut out).map_err(failed)?;
    }
    out.flush()
        .with_context(|| format!("cannot write {}", tmp.display()))
        .map_err(failed)?;
    drop(out);
    std::fs::rename(&tmp, &args.out)
        .with_context(|| format!("cannot write {}", args.out.display()))
        .map_err(failed)?;
    let secs = started.elapsed().as_secs_f64();
    let st = &clf.stats;
    eprintln!(
        "tomlite annotate: {n} records ({rejected} rejected) in {secs:.1}s: {:.1} records/s, {:.0} tokens/s; {} texts encoded ({} reused in their batch, {} from earlier batches), {} tokens + {} padding, {} truncated to the encoder limit; kernels {}",
        n as f64 / secs.max(1e-9),
        st.tokens as f64 / secs.max(1e-9),
        st.texts_encoded,
        st.texts_deduplicated,
        st.texts_cached,
        st.tokens,
        st.padded_tokens,
        st.truncated_texts,
        clf.kernels()
    );
    if tomlite_models::profile::enabled() {
        print_profile(secs);
    }
    Ok(())
}

/// The per-operation wall-clock times of `TOMLITE_PROFILE=1` runs, on stderr.
fn print_profile(total: f64) {
    let ops = tomlite_models::profile::totals();
    let encoder: f64 = ops.iter().map(|(_, s, _)| s).sum();
    eprintln!("tomlite profile (wall-clock seconds per operation):");
    for (op, secs, calls) in &ops {
        eprintln!(
            "  {:<36} {secs:>8.3} s {:>5.1} %  {calls:>6} calls",
            op.name(),
            100.0 * secs / total.max(1e-9)
        );
    }
    eprintln!(
        "  {:<36} {:>8.3} s {:>5.1} %",
        "rest (heads, quotes, edges, I/O)",
        total - encoder,
        100.0 * (total - encoder) / total.max(1e-9)
    );
    eprintln!("  {:<36} {total:>8.3} s", "total");
}

/// The `.jsonl` files of the repository folder `sub`, sorted; none when an
/// optional folder is absent.
fn jsonl_files(sub: &str, required: bool) -> Result<Vec<PathBuf>, Failure> {
    let dir = repo_path(sub);
    if !required && !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))
        .map_err(Failure::config)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    found.sort();
    Ok(found)
}

fn cmd_train(args: TrainArgs) -> Result<(), Failure> {
    if args.frozen && args.resume {
        return Err(Failure::config(anyhow::anyhow!(
            "--resume continues a fine-tuning run; --frozen has no checkpoint"
        )));
    }
    let data = if args.data.is_empty() {
        let mut files = jsonl_files("data/training/tom_lite", true)?;
        files.extend(jsonl_files("data/training/styles", false)?);
        files
    } else {
        args.data.clone()
    };
    let sensitivity = if args.sensitivity.is_empty() {
        jsonl_files("data/sensitivity", false)?
    } else {
        args.sensitivity.clone()
    };
    let finetune = (!args.frozen).then(|| tomlite::train::FineTuneConfig {
        epochs: args
            .epochs
            .unwrap_or(tomlite::train::FineTuneConfig::default().epochs),
        seed: args.seed,
        goemotions: args.goemotions_per_epoch,
        resume: args.resume,
        ..Default::default()
    });
    let default_out = if args.frozen {
        tomlite::annotate::classifier::DEFAULT_HEADS_DIR
    } else {
        tomlite::annotate::classifier::DEFAULT_ADAPTERS_DIR
    };
    let cfg = tomlite::train::TrainConfig {
        model_dir: args
            .model_dir
            .clone()
            .unwrap_or_else(|| repo_path(tomlite::annotate::classifier::DEFAULT_MODEL_DIR)),
        heads_dir: args.out.clone().unwrap_or_else(|| repo_path(default_out)),
        tom_files: data,
        sensitivity_files: sensitivity,
        goemotions_train: args.goemotions.join("train.tsv"),
        goemotions_dev: args.goemotions.join("dev.tsv"),
        options: tomlite_models::heads::TrainOptions {
            epochs: if args.frozen {
                args.epochs.unwrap_or(30)
            } else {
                30
            },
            seed: args.seed,
            ..Default::default()
        },
        limit: args.limit,
        max_goemotions: args.max_goemotions,
        nodes: args
            .nodes
            .clone()
            .or_else(|| Some(repo_path("data/training/nodes.jsonl")).filter(|p| p.exists())),
        curated: args.curated.clone(),
        cache: match &args.cache {
            Some(p) if p.as_os_str() == "none" => None,
            Some(p) => Some(p.clone()),
            None => Some(repo_path("target").join("tomlite-train-cache")),
        },
        finetune,
    };
    let started = std::time::Instant::now();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut progress = |line: &str| {
        if tty && line.starts_with("embedding") {
            eprint!("\r{line}\x1b[K");
        } else {
            if tty {
                eprint!("\r\x1b[K");
            }
            eprintln!("{line}");
        }
    };
    // Fine-tuning steps: a bar redrawn in place on a terminal; plain lines
    // (about 20 per epoch, and each epoch's end) otherwise.
    let mut steps = |p: &tomlite_models::finetune::Progress| {
        let line = step_line(p);
        if tty {
            eprint!("\r{line}\x1b[K");
            if p.epoch_done {
                eprintln!();
            }
        } else {
            let per_epoch = p.steps.div_ceil(p.epochs.max(1)).max(1);
            let every = per_epoch.div_ceil(20).max(1);
            if p.epoch_done || p.step.is_multiple_of(every) {
                eprintln!("{line}");
            }
        }
    };
    let card =
        tomlite::train::train_with_steps(&cfg, &mut progress, &mut steps).map_err(|e| Failure {
            status: ExitStatus::Failed,
            error: e.into(),
        })?;
    let adapters = card.training["adapters_sha256"]
        .as_str()
        .map(|a| format!(", adapters {}", &a[..12.min(a.len())]))
        .unwrap_or_default();
    println!(
        "trained heads written to {} in {:.0}s (encoder {}{adapters})",
        cfg.heads_dir.display(),
        started.elapsed().as_secs_f64(),
        &card.encoder_sha256[..12]
    );
    Ok(())
}

/// `epoch 2/4 [#######.......] step 130/480 loss 1.234 (epoch 1.301) 41.0 ex/s ETA 12m05s`
fn step_line(p: &tomlite_models::finetune::Progress) -> String {
    const WIDTH: usize = 24;
    let filled = (p.step * WIDTH)
        .checked_div(p.steps)
        .unwrap_or(0)
        .min(WIDTH);
    let eta = p.eta.as_secs();
    format!(
        "epoch {}/{} [{}{}] step {}/{} loss {:.4} (epoch {:.4}) {:.1} ex/s ETA {}m{:02}s",
        p.epoch,
        p.epochs,
        "#".repeat(filled),
        ".".repeat(WIDTH - filled),
        p.step,
        p.steps,
        p.loss,
        p.epoch_loss,
        p.examples_per_s,
        eta / 60,
        eta % 60
    )
}

/// `tomlite eval --sensitivity`'s lines.
fn print_sensitivity(v: &serde_json::Value) {
    println!(
        "== {} ({} records{}): sensitive content at P >= {}",
        v["data"].as_str().unwrap_or(""),
        v["records"],
        if v["split"] == "dev" {
            ", dev split"
        } else {
            ""
        },
        v["threshold"]
    );
    println!(
        "sensitive  recall {} of {}  controls flagged {} of {} ({})  ECE {}  category right {}  quote on the gold line {}",
        v["recall"],
        v["sensitive"],
        v["control_false_positives"],
        v["controls"],
        v["control_false_positive_rate"],
        v["ece"],
        v["category_right_when_detected"],
        v["quote_overlaps_gold_line"]
    );
    for (name, c) in v["per_category"].as_object().into_iter().flatten() {
        println!("    {name:30} recall {}  n {}", c["recall"], c["support"]);
    }
}

fn cmd_eval(args: EvalArgs) -> Result<(), Failure> {
    let (policy, _) = load_policy(args.policy.as_deref())?;
    if args.data.is_empty() && args.goemotions.is_none() && args.sensitivity.is_empty() {
        return Err(Failure::config(anyhow::anyhow!(
            "nothing to evaluate: pass --data FILE, --goemotions TSV and/or --sensitivity FILE"
        )));
    }
    let registry = match &args.nodes {
        Some(p) => Some(Registry::load(p).map_err(Failure::config)?),
        None => None,
    };
    let mut clf = args.model.load(&policy)?;
    let failed = |e: tomlite::train::LearnError| Failure {
        status: ExitStatus::Failed,
        error: e.into(),
    };
    let mut sets = Vec::new();
    if !args.data.is_empty() {
        sets.push(
            tomlite::train::eval_records(
                &mut clf,
                &args.data,
                &policy,
                args.dev,
                registry.as_ref(),
            )
            .map_err(failed)?,
        );
    }
    if let Some(g) = &args.goemotions {
        sets.push(tomlite::train::eval_goemotions(&mut clf, g).map_err(failed)?);
    }
    if !args.sensitivity.is_empty() {
        sets.push(
            tomlite::train::sensitive::eval(&mut clf, &args.sensitivity, args.dev)
                .map_err(failed)?,
        );
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&sets).unwrap_or_default()
        );
        return Ok(());
    }
    for s in &sets {
        if let Some(v) = s.get("sensitivity") {
            print_sensitivity(v);
            continue;
        }
        println!(
            "== {} ({} records{})",
            s["data"].as_str().unwrap_or(""),
            s["records"]
                .as_u64()
                .map_or("GoEmotions".to_string(), |n| n.to_string()),
            if s["split"] == "dev" {
                ", dev split"
            } else {
                ""
            }
        );
        for head in ["tom_kind", "affect", "intensity"] {
            let h = &s[head];
            if h.is_null() {
                continue;
            }
            println!(
                "{head:10} macro-F1 {:.3}  ECE before {:.3} after {:.3}",
                h["macro_f1"].as_f64().unwrap_or(0.0),
                h["ece_before"].as_f64().unwrap_or(0.0),
                h["ece_after"].as_f64().unwrap_or(0.0)
            );
            for l in h["per_label"].as_array().into_iter().flatten() {
                println!(
                    "    {:18} P {:.3}  R {:.3}  F1 {:.3}  n {}",
                    l["label"].as_str().unwrap_or(""),
                    l["precision"].as_f64().unwrap_or(0.0),
                    l["recall"].as_f64().unwrap_or(0.0),
                    l["f1"].as_f64().unwrap_or(0.0),
                    l["support"]
                );
            }
        }
        let t = &s["tags"];
        if !t.is_null() {
            println!(
                "tags       {} emitted  precision {}  ECE of their confidence {}  at >= 0.8: {} tags, precision {}",
                t["n"],
                t["precision"],
                t["ece"],
                t["at_or_above_0_8"]["n"],
                t["at_or_above_0_8"]["precision"]
            );
        }
        let p = &s["policy"];
        if !p.is_null() {
            println!(
                "policy     promoted tags {}  precision {}  coverage {}  on no-signal records {}  quote overlaps gold {}",
                p["promoted_tags"],
                p["promoted_tag_precision"],
                p["coverage"],
                p["promoted_on_no_signal_records"],
                p["quote_overlaps_gold"]
            );
        }
        if let Some(n) = s["sensitive_detected"].as_u64() {
            println!("sensitive  {n} records detected (their tags and edges quarantine)");
        }
        let e = &s["edges"];
        if !e.is_null() {
            let (r, u, m) = (&e["registry"], &e["unknown"], &e["memory"]);
            println!(
                "edges      registry: {} gold mentions, {} proposed (precision {}, recall {}), {} promoted (edge precision {}, edge recall {}), ECE of confidence {}",
                r["gold_mentions"],
                r["proposed"],
                r["proposed_precision"],
                r["proposed_recall"],
                r["promoted"],
                r["edge_precision"],
                r["edge_recall"],
                r["confidence_ece"]
            );
            println!(
                "           unknown: {} gold, recall {}, {} unknown edges, false unknowns {} ({} per 100 records)",
                u["gold_unknown_mentions"],
                u["unknown_recall"],
                u["unknown_edges"],
                u["false_unknowns"],
                u["false_unknowns_per_100_records"]
            );
            println!(
                "           memory links: {} gold, {} proposed (precision {}, recall {}), {} promoted (precision {})",
                m["gold_links"],
                m["proposed"],
                m["proposed_precision"],
                m["recall"],
                m["promoted"],
                m["promoted_precision"]
            );
            println!(
                "           records over the edge limit: {}",
                e["records_over_the_edge_limit"]
            );
        }
    }
    Ok(())
}
