//! Store selection strings, as given to `--store` (and `--durability`) on every command line.

use super::Durability;
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

/// A `--durability` value that is neither `process` nor `fsync`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid durability {0:?} (expected process or fsync)")]
pub struct DurabilityError(pub String);

impl std::str::FromStr for Durability {
    type Err = DurabilityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "process" => Ok(Durability::Process),
            "fsync" => Ok(Durability::Fsync),
            _ => Err(DurabilityError(text.to_string())),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::Process => "process",
            Durability::Fsync => "fsync",
        })
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
    fn durability_round_trips_and_refuses_the_rest() {
        for d in [Durability::Process, Durability::Fsync] {
            assert_eq!(d.to_string().parse(), Ok(d));
        }
        assert_eq!(
            "sync".parse::<Durability>(),
            Err(DurabilityError("sync".to_string()))
        );
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
