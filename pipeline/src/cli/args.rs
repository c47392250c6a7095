//! The command line's clap definitions: every flag, its help text and its
//! default. Nothing here is validated or resolved; `settings` does that.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The `tomlite` command line.
#[derive(Debug, Parser)]
#[command(
    name = "tomlite",
    version,
    about = "Nightly ToM-lite annotation of persona-memory records"
)]
pub struct Cli {
    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Annotate, validate and stage records; commit one run directory.
    Run(RunArgs),
    /// Print the effective policy (YAML) and its sha256.
    Policy(PolicyArgs),
    /// Annotate records with the local classifier; write docs/design.md's annotation JSONL.
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

/// `tomlite contract` subcommands.
#[derive(Debug, Subcommand)]
pub enum ContractCommand {
    /// Check contract YAML files against the seed's lint rules; exit 1 on any error.
    Lint(ContractLintArgs),
    /// Print the JSON Schema of a subagent contract.
    Schema,
}

/// `tomlite contract lint` flags.
#[derive(Debug, Args)]
pub struct ContractLintArgs {
    /// Contract files (YAML).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}

/// `tomlite parse-annotation` flags.
#[derive(Debug, Args)]
pub struct ParseAnnotationArgs {
    /// The record id to put in the canonical annotation.
    #[arg(long)]
    pub record_id: Option<String>,
    /// The annotator to name when the output names none.
    #[arg(long)]
    pub annotator: Option<String>,
    /// A file holding the record's text: quotes without offsets are anchored
    /// at their first verbatim occurrence, and quotes not in it are reported.
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Print only the canonical annotation line (the `--annotations` shape).
    #[arg(long)]
    pub annotation_only: bool,
}

/// `tomlite curate` subcommands.
#[derive(Debug, Subcommand)]
pub enum CurateCommand {
    /// Apply decisions.jsonl (exported from report.html) to <staging>/curated/.
    Apply(CurateApplyArgs),
    /// What is pending, decided and applied.
    Status(CurateStatusArgs),
}

/// `tomlite curate apply` flags.
#[derive(Debug, Args)]
pub struct CurateApplyArgs {
    /// The decisions file (JSONL: run_id, item_id, decision, label, target_node, curator, note, decided_at).
    pub decisions: PathBuf,
    /// Staging directory (default: the policy's run.staging).
    #[arg(long)]
    pub staging: Option<PathBuf>,
    /// Node registry for relabelled edges (default: the one the item's run used).
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// Policy file (for run.staging).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}

/// `tomlite curate status` flags.
#[derive(Debug, Args)]
pub struct CurateStatusArgs {
    /// Staging directory (default: the policy's run.staging).
    #[arg(long)]
    pub staging: Option<PathBuf>,
    /// Also count the lines of this decisions file that are not applied yet.
    #[arg(long)]
    pub decisions: Option<PathBuf>,
    /// Policy file (for run.staging).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}

/// The classifier's flags, shared by `run`, `annotate` and `eval`.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Encoder directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long, env = "TOMLITE_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// Trained heads directory (heads.safetensors, card.json).
    #[arg(long, env = "TOMLITE_HEADS_DIR")]
    pub heads_dir: Option<PathBuf>,
    /// Precision of the encoder's matrix products: f32, or int8 weights
    /// with integer activations (see models/PERF.md).
    #[arg(long, env = "TOMLITE_PRECISION", default_value_t = tomlite_models::EncodeOptions::default().precision)]
    pub precision: tomlite_models::Precision,
    /// Folder of the LoRA adapters (adapters.safetensors) merged into the
    /// encoder at load (default: the heads directory's, when it has them).
    #[arg(long, env = "TOMLITE_ADAPTERS_DIR")]
    pub adapters: Option<PathBuf>,
}

/// `tomlite annotate` flags.
#[derive(Debug, Args)]
pub struct AnnotateArgs {
    /// Record input (JSONL, Parquet, or a folder of journals). Repeatable.
    #[arg(long, required = true)]
    pub input: Vec<PathBuf>,
    /// Where to write the annotations (JSONL).
    #[arg(long)]
    pub out: PathBuf,
    /// Node registry (JSONL or Parquet): mentions of its nodes become edge candidates.
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// Policy file (for `classifier_policy.abstain_below` and the text limit).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// The classifier's flags.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Persona of journal files that sit directly in an input folder.
    #[arg(long)]
    pub journal_persona: Option<String>,
}

/// `tomlite train` flags.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Labeled ToM-lite JSONL files (default: data/training/tom_lite/*.jsonl
    /// and data/training/styles/*.jsonl).
    #[arg(long)]
    pub data: Vec<PathBuf>,
    /// Records labeled for sensitive content, for the sensitive content
    /// head (default: data/sensitivity/*.jsonl; none there: no head, the
    /// identifier rules alone detect).
    #[arg(long)]
    pub sensitivity: Vec<PathBuf>,
    /// Folder with GoEmotions train.tsv, dev.tsv and labels.txt (default:
    /// the repository's data/goemotions).
    #[arg(long)]
    pub goemotions: Option<PathBuf>,
    /// Encoder directory.
    #[arg(long, env = "TOMLITE_MODEL_DIR")]
    pub model_dir: Option<PathBuf>,
    /// Where to write the adapters and heads (default: models/artifacts/adapters;
    /// with --frozen, models/artifacts/heads).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Keep the encoder frozen: fit only the heads on its embeddings (the
    /// committed heads come from this path).
    #[arg(long)]
    pub frozen: bool,
    /// Fit the heads on the encoder with an earlier run's adapters (a
    /// folder with adapters.safetensors and adapters.json, e.g.
    /// models/artifacts/adapters), copied into --out, without fine-tuning
    /// again: minutes instead of an hour (new labeled data, --curated).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["frozen", "resume"])]
    pub adapters: Option<PathBuf>,
    /// Fine-tuning passes over the examples (default 6, the committed model's; 8 overfit). With --frozen or --adapters:
    /// passes of the heads (default 30; the tom_kind and intensity heads
    /// get twice as many, the affect MLP a quarter).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// GoEmotions train comments per fine-tuning epoch, drawn afresh each
    /// epoch (seeded) from the whole train split.
    #[arg(long, default_value_t = tomlite_train::FineTuneConfig::default().goemotions)]
    pub goemotions_per_epoch: usize,
    /// Continue an interrupted fine-tuning run from the checkpoint in
    /// <out>/checkpoint (same data and settings; --epochs may grow).
    #[arg(long)]
    pub resume: bool,
    /// Seed of initialisation and batch order.
    #[arg(long, default_value_t = 17)]
    pub seed: u64,
    /// Use only the first N examples of each source (quick checks).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Use at most N GoEmotions train examples, evenly spaced, for the heads (embedding them dominates their training time).
    #[arg(long)]
    pub max_goemotions: Option<usize>,
    /// Cache of training-text embeddings (default target/tomlite-train-cache; "none" to disable).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Node registry of the training data (default: data/training/nodes.jsonl).
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// A staging directory whose curated decisions (curate apply) become
    /// training examples: accepted and relabelled tags teach the kind, the
    /// affect and the intensity (rejected ones are negatives of their
    /// kind); edge decisions teach the edge model.
    #[arg(long)]
    pub curated: Option<PathBuf>,
    /// How many training rows each curated example counts for in the
    /// kind, affect and intensity heads: a writer's hundred decisions
    /// among thousands of general rows teach nothing at weight 1.
    #[arg(long, default_value_t = tomlite::train::DEFAULT_CURATED_WEIGHT, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub curated_weight: u32,
}

/// `tomlite eval` flags.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Labeled records (JSONL with a `gold` object): one or more files
    /// (`--data a.jsonl b.jsonl`), or repeat the flag.
    #[arg(long, num_args = 1..)]
    pub data: Vec<PathBuf>,
    /// A GoEmotions TSV split (labels.txt beside it).
    #[arg(long)]
    pub goemotions: Option<PathBuf>,
    /// Records labeled for sensitive content (data/sensitivity/*.jsonl):
    /// the detector's recall per category, false positives on the hard
    /// controls, ECE; with --dev only its held-out styles
    /// (third_person_memory, rambling_journal, voice_memo).
    #[arg(long, num_args = 1..)]
    pub sensitivity: Vec<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
    /// Only the records of the held-out dev split: whole held-out styles (emoji_social, third_person_memory, reported_speech, logistics_admin) and 15 % of the records without a style, by a stable hash of their id.
    #[arg(long)]
    pub dev: bool,
    /// Policy file (thresholds of "what the policy would promote").
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Node registry of the labeled data: evaluates edges too (gold
    /// `mentions`, `unknown_mentions`, `links_to`).
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// The classifier's flags.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// `tomlite policy` flags.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Policy file (default: ./tomlite.yaml when present, else the seed's defaults).
    #[arg(long)]
    pub policy: Option<PathBuf>,
}

/// `tomlite run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Record input: a JSONL file, a Parquet file, or a folder of .md/.txt journals. Repeatable.
    #[arg(long, required = true)]
    pub input: Vec<PathBuf>,
    /// Node registry (JSONL or Parquet): id, kind, name, aliases.
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// Annotations made elsewhere (JSONL, one object per record_id).
    #[arg(long, conflicts_with = "raw_annotations")]
    pub annotations: Option<PathBuf>,
    /// Raw annotator output made elsewhere (JSONL lines `{record_id, annotator, raw}`),
    /// read by the verdict parser.
    #[arg(long)]
    pub raw_annotations: Option<PathBuf>,
    /// Staging directory (default: the policy's run.staging).
    #[arg(long)]
    pub staging: Option<PathBuf>,
    /// Policy file (default: ./tomlite.yaml when present, else the seed's defaults).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Process every record, ignoring what earlier runs committed.
    #[arg(long)]
    pub full: bool,
    /// Persona of journal files that sit directly in an input folder.
    #[arg(long)]
    pub journal_persona: Option<String>,
    /// The classifier's flags.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Stop taking new records near this local time (HH:MM within the next
    /// 12 h; one that passed less than 12 h ago means at once), commit what
    /// is done and exit 4; the next run takes the rest.
    #[arg(long, value_name = "HH:MM")]
    pub deadline: Option<String>,
    /// Like --deadline, as seconds from the start.
    #[arg(long, value_name = "N")]
    pub max_seconds: Option<f64>,
    /// Process only shard K of N (0-based): the records whose persona_id
    /// hashes to K. Give each shard its own --staging; join them with `tomlite merge`.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
    /// Fail the run without committing when more than this share of the
    /// records annotated so far fails (at least 3; records that failed in
    /// earlier runs not counted).
    #[arg(long, default_value_t = tomlite::run::DEFAULT_MAX_FAILED_SHARE)]
    pub max_failed_share: f64,
    /// A record whose annotation alone takes longer than this fails
    /// (seconds; measured when the call returns, a hung call is not cut off).
    #[arg(long, value_name = "SECS")]
    pub record_timeout: Option<f64>,
    /// Records per annotator call (default: the annotator's own).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Seconds between heartbeats in events.jsonl (and log lines on stderr).
    #[arg(long, default_value_t = 30.0, hide = true)]
    pub heartbeat_seconds: f64,
    /// No progress and no summary: only errors and the poison warning, on stderr (for cron).
    #[arg(long, short)]
    pub quiet: bool,
    /// Exit 6 when the run committed but skipped poison records (records
    /// whose annotation failed in 3 runs); scripts/nightly passes it.
    #[arg(long)]
    pub escalate_poison: bool,
    /// Retries of a transient I/O error (the seed's tool transient retry:
    /// default 1, hard maximum 2).
    #[arg(long, value_name = "N", default_value_t = tomlite_staging::retry::DEFAULT_RETRIES)]
    pub transient_retries: u32,
}

/// `tomlite merge` flags.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Committed shard run directories (`<shard staging>/runs/<run_id>`), one per shard.
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Staging directory that receives the merged run.
    #[arg(long)]
    pub staging: PathBuf,
    /// The policy the shards ran with (default: ./tomlite.yaml when present, else the seed's defaults).
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// The node registry the shards ran with (for the report's edge details).
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// Print the merged run's summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tomlite verify` flags.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// A run directory (`<staging>/runs/<run_id>`).
    #[arg(required_unless_present = "staging", conflicts_with = "staging")]
    pub run_dir: Option<PathBuf>,
    /// Verify every run the staging directory's state lists, and that list.
    #[arg(long)]
    pub staging: Option<PathBuf>,
    /// Print JSON for machines.
    #[arg(long)]
    pub json: bool,
}
