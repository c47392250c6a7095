//! The `tomlite` command line: parses flags ([`cli::args`]), resolves them
//! with the policy file and the environment into settings and the library's
//! plain config structs ([`cli::settings`]), runs the command
//! ([`cli::commands`]), prints ([`cli::summary`]) and exits with an explicit
//! [`ExitStatus`].
//!
//! Standard output goes through [`cli::stdout`]: the binary's `println!`
//! and `print!` are the macros below, not the standard ones, so a reader that
//! has gone away (`tomlite curate status | head -1`) ends the output
//! quietly instead of a panic.

/// Writes to standard output with `write!`; see [`cli::stdout::write`].
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::cli::stdout::write(format_args!($($arg)*))
    };
}

/// Writes a line to standard output with `writeln!`; see [`cli::stdout::write`].
macro_rules! println {
    () => {
        $crate::cli::stdout::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

// Declared after the macros, so that its modules print through them.
mod cli;

use std::process::ExitCode;

use clap::Parser as _;

use cli::args::{Cli, Command, ContractCommand, CurateCommand};
use cli::commands;
use cli::settings::{
    AnnotateSettings, CurateApplySettings, CurateStatusSettings, EvalSettings, LoadedPolicy,
    MergeSettings, RunSettings, VerifySettings, train_config,
};

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
    /// `run`: SIGINT stopped the run cleanly before its commit point (128 + 2).
    Interrupted = 130,
    /// `run`: SIGTERM stopped the run cleanly before its commit point (128 + 15).
    Terminated = 143,
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> Self {
        ExitCode::from(status as u8)
    }
}

/// An error with the exit status it maps to.
struct Failure {
    /// The exit status.
    status: ExitStatus,
    /// What went wrong, with its context.
    error: anyhow::Error,
}

impl Failure {
    /// A usage or configuration error: exit 2.
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
    match dispatch(cli.command) {
        Ok(()) => match cli::stdout::failure() {
            None => ExitStatus::Success.into(),
            Some(error) => {
                eprintln!("tomlite: error: cannot write to standard output: {error}");
                ExitStatus::Failed.into()
            }
        },
        Err(failure) => {
            eprintln!("tomlite: error: {:#}", failure.error);
            failure.status.into()
        }
    }
}

/// Resolves the command's settings and runs it.
fn dispatch(command: Command) -> Result<(), Failure> {
    match command {
        Command::Run(args) => commands::run::keep_blocked_record(args.staging.clone(), |staging| {
            commands::run::run(RunSettings::resolve(args, staging)?)
        }),
        Command::Policy(args) => {
            commands::policy::policy(&LoadedPolicy::load(args.policy.as_deref())?)
        }
        Command::Annotate(args) => commands::annotate::annotate(AnnotateSettings::resolve(args)?),
        Command::Train(args) => commands::train::train(train_config(args)?),
        Command::Eval(args) => commands::eval::eval(EvalSettings::resolve(args)?),
        Command::Curate(CurateCommand::Apply(args)) => {
            commands::curate::apply(CurateApplySettings::resolve(args)?)
        }
        Command::Curate(CurateCommand::Status(args)) => {
            commands::curate::status(CurateStatusSettings::resolve(args)?)
        }
        Command::Merge(args) => commands::merge::merge(MergeSettings::resolve(args)?),
        Command::Verify(args) => commands::verify::verify(VerifySettings::resolve(args)?),
        Command::ParseAnnotation(args) => commands::parse_annotation::parse_annotation(args),
        Command::Contract(ContractCommand::Lint(args)) => {
            commands::contract::lint(&args.files, args.json)
        }
        Command::Contract(ContractCommand::Schema) => commands::contract::schema(),
    }
}
