//! Flags, the policy file and the environment resolved into what each
//! command runs with. Every usage and configuration check is made here, so
//! a command body only opens its inputs and does its work.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use tomlite::annotate::classifier::{
    ADAPTERS_FILE, DEFAULT_ADAPTERS_DIR, DEFAULT_HEADS_DIR, DEFAULT_MODEL_DIR,
};
use tomlite::ingest::record::IngestOptions;
use tomlite::rules::policy::Policy;
use tomlite::run::RunConfig;
use tomlite_train::{FineTuneConfig, TrainConfig};

use super::args::{
    AnnotateArgs, CurateApplyArgs, CurateStatusArgs, EvalArgs, MergeArgs, ModelArgs, RunArgs,
    TrainArgs, VerifyArgs,
};
use crate::Failure;

/// A policy and the file it was read from.
pub struct LoadedPolicy {
    /// The effective policy.
    pub policy: Policy,
    /// The policy file; none: the seed's defaults.
    pub source: Option<PathBuf>,
}

impl LoadedPolicy {
    /// `--policy FILE`, else `./tomlite.yaml` when present, else the seed's
    /// defaults.
    pub fn load(explicit: Option<&Path>) -> Result<Self, Failure> {
        let path = match explicit {
            Some(path) => Some(path.to_path_buf()),
            None => Some(PathBuf::from("tomlite.yaml")).filter(|path| path.is_file()),
        };
        match path {
            Some(path) => Ok(Self {
                policy: Policy::load(&path).map_err(Failure::config)?,
                source: Some(path),
            }),
            None => Ok(Self {
                policy: Policy::default(),
                source: None,
            }),
        }
    }

    /// The source as error messages name it.
    fn source_name(&self) -> String {
        self.source
            .as_deref()
            .map_or("(defaults)".into(), |path| path.display().to_string())
    }

    /// `classifier_policy.local_llm_or_classifier_may_suggest: false` forbids
    /// the local classifier to annotate.
    fn classifier_may_annotate(&self) -> Result<(), Failure> {
        if self
            .policy
            .classifier_policy
            .local_llm_or_classifier_may_suggest
        {
            return Ok(());
        }
        Err(Failure::config(anyhow!(
            "policy {}: classifier_policy.local_llm_or_classifier_may_suggest is false: the local classifier may not annotate; give annotations made elsewhere with --annotations FILE or --raw-annotations FILE",
            self.source_name()
        )))
    }
}

/// `--staging DIR`, else the policy's `run.staging`.
fn staging_or_policy(explicit: Option<PathBuf>, policy: &Policy) -> Result<PathBuf, Failure> {
    explicit
        .or_else(|| policy.run.staging.clone())
        .ok_or_else(|| {
            Failure::config(anyhow!(
                "no staging directory: pass --staging DIR or set run.staging in the policy"
            ))
        })
}

/// The run creates its staging directory when it is missing; a path that
/// exists must be one (a file there is a usage error, not a failed run).
fn check_staging_is_a_directory(staging: &Path) -> Result<(), Failure> {
    if staging.exists() && !staging.is_dir() {
        return Err(Failure::config(anyhow!(
            "staging directory {} exists and is not a directory",
            staging.display()
        )));
    }
    Ok(())
}

/// `--staging DIR`, else the `run.staging` of the policy (read only then).
fn staging_of(explicit: Option<PathBuf>, policy: Option<&Path>) -> Result<PathBuf, Failure> {
    match explicit {
        Some(staging) => Ok(staging),
        None => staging_or_policy(None, &LoadedPolicy::load(policy)?.policy),
    }
}

/// `rel` under the repository this binary was built in (target/<profile>/tomlite
/// lives two levels below it), else under the current directory.
pub fn repo_path(rel: &str) -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1) {
            let candidate = dir.join(rel);
            if candidate.exists() {
                return candidate;
            }
        }
    }
    PathBuf::from(rel)
}

/// The fine-tuned folder (`models/artifacts/adapters`) when `tomlite train`
/// has finished one there (adapters and heads), else the frozen-encoder
/// heads (`models/artifacts/heads`).
fn default_heads_dir() -> PathBuf {
    let tuned = repo_path(DEFAULT_ADAPTERS_DIR);
    if tuned.join(ADAPTERS_FILE).is_file() && tuned.join(tomlite_models::heads::CARD_FILE).is_file()
    {
        tuned
    } else {
        repo_path(DEFAULT_HEADS_DIR)
    }
}

/// Where the classifier is loaded from, and how it multiplies.
pub struct ModelSettings {
    /// Encoder directory.
    pub model_dir: PathBuf,
    /// Trained heads directory.
    pub heads_dir: PathBuf,
    /// LoRA adapters folder; none: the heads directory's, when it has them.
    pub adapters: Option<PathBuf>,
    /// Precision of the encoder's matrix products.
    pub precision: tomlite_models::Precision,
}

impl ModelSettings {
    /// The flags (or their environment variables), else the repository's
    /// artifacts.
    fn resolve(args: ModelArgs) -> Self {
        Self {
            model_dir: args
                .model_dir
                .unwrap_or_else(|| repo_path(DEFAULT_MODEL_DIR)),
            heads_dir: args.heads_dir.unwrap_or_else(default_heads_dir),
            adapters: args.adapters,
            precision: args.precision,
        }
    }
}

/// Who annotates the records of a run.
pub enum AnnotatorSource {
    /// Annotations made elsewhere (`--annotations`).
    Annotations(PathBuf),
    /// Raw annotator output made elsewhere (`--raw-annotations`).
    RawAnnotations(PathBuf),
    /// The local classifier.
    Classifier(ModelSettings),
}

/// When a run stops taking records: `--deadline` and `--max-seconds`,
/// checked; the instant is fixed only when the run is about to start.
pub struct Budget {
    /// `--max-seconds`.
    max_duration: Option<Duration>,
    /// `--deadline`, local time.
    until: Option<chrono::NaiveTime>,
}

impl Budget {
    /// Checks `--max-seconds` and `--deadline HH:MM`.
    fn resolve(hhmm: Option<&str>, max_seconds: Option<f64>) -> Result<Self, Failure> {
        let max_duration = max_seconds
            .map(|secs| {
                Duration::try_from_secs_f64(secs)
                    .map_err(|_| Failure::config(anyhow!("--max-seconds {secs} is not a duration")))
            })
            .transpose()?;
        let until = hhmm
            .map(|text| {
                chrono::NaiveTime::parse_from_str(text, "%H:%M").map_err(|_| {
                    Failure::config(anyhow!(
                        "--deadline `{text}`: expected HH:MM (24-hour, local time)"
                    ))
                })
            })
            .transpose()?;
        Ok(Self {
            max_duration,
            until,
        })
    }

    /// The instant a run must stop taking records: the next local HH:MM, or
    /// `--max-seconds` from now, whichever comes first.
    pub fn deadline(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut deadline = self.max_duration.map(|duration| now + duration);
        if let Some(time) = self.until {
            let local = chrono::Local::now();
            let mut target = local.date_naive().and_time(time);
            if target <= local.naive_local() {
                target += chrono::Duration::days(1);
            }
            let mut wait = (target - local.naive_local()).to_std().unwrap_or_default();
            // More than 12 h away: the deadline passed earlier today (a late
            // start or a retry), not tomorrow's: take nothing new.
            if wait > Duration::from_secs(12 * 3600) {
                wait = Duration::ZERO;
            }
            let local_deadline = now + wait;
            deadline = Some(deadline.map_or(local_deadline, |max| max.min(local_deadline)));
        }
        deadline
    }
}

/// The command line as the run's records quote it.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// `tomlite run`, resolved.
pub struct RunSettings {
    /// The library's config; its `nodes` and `deadline` are filled when the
    /// registry is read and the annotator is ready.
    pub config: RunConfig,
    /// `--nodes`.
    pub nodes: Option<PathBuf>,
    /// Who annotates.
    pub annotator: AnnotatorSource,
    /// `--deadline` and `--max-seconds`.
    pub budget: Budget,
    /// `--quiet`: no summary.
    pub quiet: bool,
}

impl RunSettings {
    /// Resolves and checks `tomlite run`'s flags; sets `staging_seen` as
    /// soon as the staging directory is known.
    pub fn resolve(args: RunArgs, staging_seen: &mut Option<PathBuf>) -> Result<Self, Failure> {
        let loaded = LoadedPolicy::load(args.policy.as_deref())?;
        if staging_seen.is_none() {
            staging_seen.clone_from(&loaded.policy.run.staging);
        }
        check_annotator_choice(&loaded, &args)?;
        check_transient_retries(args.transient_retries)?;
        check_inputs(&args.input)?;
        let staging = staging_or_policy(args.staging, &loaded.policy)?;
        check_staging_is_a_directory(&staging)?;
        let budget = Budget::resolve(args.deadline.as_deref(), args.max_seconds)?;
        let shard = args
            .shard
            .as_deref()
            .map(tomlite::run::Shard::parse)
            .transpose()
            .map_err(|error| Failure::config(anyhow!(error)))?;
        check_failed_share(args.max_failed_share)?;
        let heartbeat = heartbeat(args.heartbeat_seconds)?;
        let record_timeout = args.record_timeout.map(record_timeout).transpose()?;
        let mut config = RunConfig::new(args.input, staging, loaded.policy);
        config.ingest.journal_persona = args.journal_persona;
        config.policy_source = loaded.source;
        config.full = args.full;
        config.command = command_line();
        config.shard = shard;
        config.batch_size = args.batch_size.filter(|&size| size > 0);
        config.max_failed_share = args.max_failed_share;
        config.record_timeout = record_timeout;
        config.heartbeat = heartbeat;
        config.escalate_poison = args.escalate_poison;
        config.transient_retries = args.transient_retries;
        config.progress = tomlite::run::progress::ProgressMode::detect(
            args.quiet,
            heartbeat.min(Duration::from_secs(10)),
        );
        let annotator = match (args.annotations, args.raw_annotations) {
            (Some(annotations), _) => AnnotatorSource::Annotations(annotations),
            (None, Some(raw)) => AnnotatorSource::RawAnnotations(raw),
            (None, None) => AnnotatorSource::Classifier(ModelSettings::resolve(args.model)),
        };
        Ok(Self {
            config,
            nodes: args.nodes,
            annotator,
            budget,
            quiet: args.quiet,
        })
    }
}

/// The local classifier must be allowed to annotate, unless annotations
/// made elsewhere are given; those may replace it only when it is optional.
fn check_annotator_choice(loaded: &LoadedPolicy, args: &RunArgs) -> Result<(), Failure> {
    let elsewhere = args.annotations.is_some() || args.raw_annotations.is_some();
    if !elsewhere {
        return loaded.classifier_may_annotate();
    }
    if !loaded.policy.classifier_policy.optional {
        return Err(Failure::config(anyhow!(
            "policy {}: classifier_policy.optional is false: the local classifier is required, so --annotations and --raw-annotations cannot replace it",
            loaded.source_name()
        )));
    }
    Ok(())
}

/// `--transient-retries` stays within the seed's hard maximum.
fn check_transient_retries(retries: u32) -> Result<(), Failure> {
    if retries > tomlite_staging::retry::MAX_RETRIES {
        return Err(Failure::config(anyhow!(
            "--transient-retries {}: above the seed's hard maximum of {} retries of a transient tool error",
            retries,
            tomlite_staging::retry::MAX_RETRIES
        )));
    }
    Ok(())
}

/// Every input exists and can be read the way its kind needs.
fn check_inputs(inputs: &[PathBuf]) -> Result<(), Failure> {
    for input in inputs {
        if !input.exists() {
            return Err(Failure::config(anyhow!(
                "input {} does not exist",
                input.display()
            )));
        }
        // A device, or a Parquet input that is a pipe: refused before the run.
        tomlite::ingest::check_input(input).map_err(Failure::config)?;
    }
    Ok(())
}

/// `--max-failed-share`: a share between 0 and 1.
fn check_failed_share(share: f64) -> Result<(), Failure> {
    if !(0.0..=1.0).contains(&share) {
        return Err(Failure::config(anyhow!(
            "--max-failed-share {share} is not a share between 0 and 1"
        )));
    }
    Ok(())
}

/// `--heartbeat-seconds`: a positive duration.
fn heartbeat(seconds: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| Failure::config(anyhow!("--heartbeat-seconds must be positive")))
}

/// `--record-timeout`: more than 0 and less than a day.
fn record_timeout(seconds: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|duration| !duration.is_zero() && *duration < Duration::from_secs(86_400))
        .ok_or_else(|| {
            Failure::config(anyhow!(
                "--record-timeout {seconds}: expected seconds, more than 0 and less than a day"
            ))
        })
}

/// `tomlite annotate`, resolved.
pub struct AnnotateSettings {
    /// Record inputs.
    pub inputs: Vec<PathBuf>,
    /// The annotations file to write.
    pub out: PathBuf,
    /// `--nodes`.
    pub nodes: Option<PathBuf>,
    /// The effective policy.
    pub policy: Policy,
    /// The classifier.
    pub model: ModelSettings,
    /// How records are read.
    pub ingest: IngestOptions,
}

impl AnnotateSettings {
    /// Resolves `tomlite annotate`'s flags; the policy must let the local
    /// classifier annotate.
    pub fn resolve(args: AnnotateArgs) -> Result<Self, Failure> {
        let loaded = LoadedPolicy::load(args.policy.as_deref())?;
        loaded.classifier_may_annotate()?;
        let ingest = IngestOptions {
            max_text_bytes: loaded.policy.run.max_text_bytes,
            journal_persona: args.journal_persona,
        };
        Ok(Self {
            inputs: args.input,
            out: args.out,
            nodes: args.nodes,
            policy: loaded.policy,
            model: ModelSettings::resolve(args.model),
            ingest,
        })
    }
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
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    found.sort();
    Ok(found)
}

/// `tomlite train`'s config: the flags, else the repository's training data
/// and artifacts folders.
pub fn train_config(args: TrainArgs) -> Result<TrainConfig, Failure> {
    if args.frozen && args.resume {
        return Err(Failure::config(anyhow!(
            "--resume continues a fine-tuning run; --frozen has no checkpoint"
        )));
    }
    let tom_files = if args.data.is_empty() {
        let mut files = jsonl_files("data/training/tom_lite", true)?;
        files.extend(jsonl_files("data/training/styles", false)?);
        files
    } else {
        args.data
    };
    let sensitivity_files = if args.sensitivity.is_empty() {
        jsonl_files("data/sensitivity", false)?
    } else {
        args.sensitivity
    };
    let refit = args.adapters.is_some();
    let finetune = (!args.frozen && !refit).then(|| FineTuneConfig {
        epochs: args.epochs.unwrap_or(FineTuneConfig::default().epochs),
        seed: args.seed,
        goemotions: args.goemotions_per_epoch,
        resume: args.resume,
        ..Default::default()
    });
    let goemotions = args
        .goemotions
        .unwrap_or_else(|| repo_path("data/goemotions"));
    // A refit writes the adapters and heads where a fine-tuning run does.
    let default_out = if args.frozen {
        DEFAULT_HEADS_DIR
    } else {
        DEFAULT_ADAPTERS_DIR
    };
    Ok(TrainConfig {
        model_dir: args
            .model_dir
            .unwrap_or_else(|| repo_path(DEFAULT_MODEL_DIR)),
        heads_dir: args.out.unwrap_or_else(|| repo_path(default_out)),
        tom_files,
        sensitivity_files,
        goemotions_train: goemotions.join("train.tsv"),
        goemotions_dev: goemotions.join("dev.tsv"),
        options: tomlite_models::heads::TrainOptions {
            epochs: if args.frozen || refit {
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
            .or_else(|| Some(repo_path("data/training/nodes.jsonl")).filter(|path| path.exists())),
        curated: args.curated,
        curated_weight: args.curated_weight as usize,
        cache: train_cache(args.cache),
        finetune,
        adapters_from: args.adapters,
    })
}

/// `--cache DIR`, `none` for no cache, else target/tomlite-train-cache.
fn train_cache(flag: Option<PathBuf>) -> Option<PathBuf> {
    match flag {
        Some(path) if path.as_os_str() == "none" => None,
        Some(path) => Some(path),
        None => Some(repo_path("target").join("tomlite-train-cache")),
    }
}

/// `tomlite eval`, resolved.
pub struct EvalSettings {
    /// The effective policy.
    pub policy: Policy,
    /// Labeled records.
    pub data: Vec<PathBuf>,
    /// A GoEmotions TSV split.
    pub goemotions: Option<PathBuf>,
    /// Records labeled for sensitive content.
    pub sensitivity: Vec<PathBuf>,
    /// Print JSON.
    pub json: bool,
    /// Only the held-out dev split.
    pub dev: bool,
    /// `--nodes`.
    pub nodes: Option<PathBuf>,
    /// The classifier.
    pub model: ModelSettings,
}

impl EvalSettings {
    /// Resolves `tomlite eval`'s flags; something must be given to evaluate.
    pub fn resolve(args: EvalArgs) -> Result<Self, Failure> {
        let loaded = LoadedPolicy::load(args.policy.as_deref())?;
        if args.data.is_empty() && args.goemotions.is_none() && args.sensitivity.is_empty() {
            return Err(Failure::config(anyhow!(
                "nothing to evaluate: pass --data FILE, --goemotions TSV and/or --sensitivity FILE"
            )));
        }
        Ok(Self {
            policy: loaded.policy,
            data: args.data,
            goemotions: args.goemotions,
            sensitivity: args.sensitivity,
            json: args.json,
            dev: args.dev,
            nodes: args.nodes,
            model: ModelSettings::resolve(args.model),
        })
    }
}

/// `tomlite curate apply`, resolved.
pub struct CurateApplySettings {
    /// The staging directory, with at least one committed run.
    pub staging: PathBuf,
    /// The decisions file.
    pub decisions: PathBuf,
    /// `--nodes`.
    pub nodes: Option<PathBuf>,
    /// Print JSON.
    pub json: bool,
}

impl CurateApplySettings {
    /// Resolves the staging directory; it must hold a committed run.
    pub fn resolve(args: CurateApplyArgs) -> Result<Self, Failure> {
        let staging = staging_of(args.staging, args.policy.as_deref())?;
        if !staging.join("state").exists() {
            return Err(Failure::config(anyhow!(
                "{} holds no committed run",
                staging.display()
            )));
        }
        Ok(Self {
            staging,
            decisions: args.decisions,
            nodes: args.nodes,
            json: args.json,
        })
    }
}

/// `tomlite curate status`, resolved.
pub struct CurateStatusSettings {
    /// The staging directory.
    pub staging: PathBuf,
    /// A decisions file to compare with what is applied.
    pub decisions: Option<PathBuf>,
    /// Print JSON.
    pub json: bool,
}

impl CurateStatusSettings {
    /// Resolves the staging directory.
    pub fn resolve(args: CurateStatusArgs) -> Result<Self, Failure> {
        Ok(Self {
            staging: staging_of(args.staging, args.policy.as_deref())?,
            decisions: args.decisions,
            json: args.json,
        })
    }
}

/// `tomlite merge`, resolved.
pub struct MergeSettings {
    /// The shard run directories.
    pub runs: Vec<PathBuf>,
    /// The staging directory that receives the merged run.
    pub staging: PathBuf,
    /// The policy the shards ran with.
    pub policy: Policy,
    /// `--nodes`.
    pub nodes: Option<PathBuf>,
    /// Print JSON.
    pub json: bool,
}

impl MergeSettings {
    /// Resolves the policy.
    pub fn resolve(args: MergeArgs) -> Result<Self, Failure> {
        Ok(Self {
            policy: LoadedPolicy::load(args.policy.as_deref())?.policy,
            runs: args.runs,
            staging: args.staging,
            nodes: args.nodes,
            json: args.json,
        })
    }
}

/// What `tomlite verify` checks.
pub enum VerifyTarget {
    /// One run directory.
    Run(PathBuf),
    /// Every committed run of a staging directory, and its list of runs.
    Staging(PathBuf),
}

/// `tomlite verify`, resolved.
pub struct VerifySettings {
    /// What to check.
    pub target: VerifyTarget,
    /// Print JSON.
    pub json: bool,
}

impl VerifySettings {
    /// A run directory must be a directory.
    pub fn resolve(args: VerifyArgs) -> Result<Self, Failure> {
        let target = match (args.run_dir, args.staging) {
            (Some(dir), _) => {
                if !dir.is_dir() {
                    return Err(Failure::config(anyhow!(
                        "{} is not a directory",
                        dir.display()
                    )));
                }
                VerifyTarget::Run(dir)
            }
            (None, Some(root)) => VerifyTarget::Staging(root),
            (None, None) => unreachable!("clap requires RUN_DIR or --staging"),
        };
        Ok(Self {
            target,
            json: args.json,
        })
    }
}
