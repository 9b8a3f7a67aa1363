//! Store selection strings, as given to `--store` on every command line ([`StoreSpec`]).
//!
//! They live with the binaries, not in the core crate: a spec names backends (TiKV) that
//! only the binaries link.

use std::path::PathBuf;
use std::str::FromStr;

/// Which store to open: `embedded:PATH`, `memory`, or `tikv:PD_ADDR[,PD_ADDR...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// The embedded persistent store in a data directory (the default).
    Embedded(PathBuf),
    /// A throwaway in-memory store (tests, demos).
    Memory,
    /// A TiKV cluster in raw mode, reached through its PD endpoints.
    Tikv(Vec<String>),
}

impl StoreSpec {
    /// Whether several processes may use the store at once (TiKV), so that nothing can rely
    /// on being its only user: transaction clients need the shared oracle service, and an
    /// oracle server waits out a possibly live leader's lease. Embedded stores belong to one
    /// process (directory lock) and memory stores to none other.
    pub fn is_shared(&self) -> bool {
        match self {
            StoreSpec::Tikv(_) => true,
            StoreSpec::Embedded(_) | StoreSpec::Memory => false,
        }
    }
}

/// Why a `--store` string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid store {input:?}: {reason} (expected embedded:PATH, memory, or tikv:PD_ADDR[,PD_ADDR...])")]
pub struct StoreSpecError {
    /// The string given.
    pub input: String,
    /// What was wrong with it.
    pub reason: &'static str,
}

impl FromStr for StoreSpec {
    type Err = StoreSpecError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason| StoreSpecError {
            input: input.to_string(),
            reason,
        };
        let (scheme, rest) = match input.split_once(':') {
            Some((scheme, rest)) => (scheme, Some(rest)),
            None => (input, None),
        };
        match (scheme, rest) {
            ("memory", None) => Ok(StoreSpec::Memory),
            ("memory", Some(_)) => Err(err("memory takes no argument")),
            ("embedded", Some(path)) if !path.is_empty() => {
                Ok(StoreSpec::Embedded(PathBuf::from(path)))
            }
            ("embedded", _) => Err(err("embedded needs a data directory")),
            ("tikv", Some(addrs)) => {
                let endpoints: Vec<String> = addrs
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(String::from)
                    .collect();
                if endpoints.is_empty() {
                    Err(err("tikv needs at least one PD address"))
                } else {
                    Ok(StoreSpec::Tikv(endpoints))
                }
            }
            _ => Err(err("unknown store kind")),
        }
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Embedded(path) => write!(f, "embedded:{}", path.display()),
            StoreSpec::Memory => write!(f, "memory"),
            StoreSpec::Tikv(endpoints) => write!(f, "tikv:{}", endpoints.join(",")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind() {
        assert_eq!("memory".parse(), Ok(StoreSpec::Memory));
        assert_eq!(
            "embedded:/tmp/x".parse(),
            Ok(StoreSpec::Embedded(PathBuf::from("/tmp/x")))
        );
        assert_eq!(
            "tikv:127.0.0.1:2379, 127.0.0.1:2380".parse(),
            Ok(StoreSpec::Tikv(vec![
                "127.0.0.1:2379".into(),
                "127.0.0.1:2380".into()
            ]))
        );
        for spec in ["embedded:/d", "memory", "tikv:a:1,b:2"] {
            assert_eq!(spec.parse::<StoreSpec>().unwrap().to_string(), spec);
        }
    }

    #[test]
    fn only_tikv_is_shared() {
        for (spec, shared) in [
            ("embedded:/d", false),
            ("memory", false),
            ("tikv:a:1", true),
        ] {
            assert_eq!(
                spec.parse::<StoreSpec>().unwrap().is_shared(),
                shared,
                "{spec}"
            );
        }
    }

    #[test]
    fn refuses_bad_input_naming_it() {
        for bad in [
            "",
            "embedded",
            "embedded:",
            "tikv:",
            "tikv: , ",
            "memory:x",
            "redis:x",
        ] {
            let err = bad.parse::<StoreSpec>().unwrap_err();
            assert_eq!(err.input, bad);
            assert!(err.to_string().contains("expected embedded:PATH"));
        }
    }
}
