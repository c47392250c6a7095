//! `tomlite policy`: prints the effective policy and its sha256.

use crate::Failure;
use crate::cli::settings::LoadedPolicy;

/// Prints the policy as YAML under a header naming its source and hash.
pub fn policy(loaded: &LoadedPolicy) -> Result<(), Failure> {
    let source = loaded
        .source
        .as_ref()
        .map_or("the seed's defaults (no policy file)".to_string(), |path| {
            path.display().to_string()
        });
    println!("# effective policy from {source}");
    println!("# sha256: {}", loaded.policy.sha256());
    print!("{}", loaded.policy.to_yaml());
    Ok(())
}
