//! A click's recorded outcome other than joined: written by the join observers
//! ([`crate::join`]) into the `outcomes` table, read back by [`crate::verify`].

/// What became of a click that was not (yet) joined. Stored as text (these forms are in
/// existing stores, so they do not change): `too_old`, `filtered`, `waiting`,
/// `expired:<horizon seconds>` (or `expired`, as written by earlier versions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Older than the IdRegistry boundary: never joined (the registry no longer proves
    /// anything about it).
    TooOld,
    /// Dropped by the pipeline's adapter.
    Filtered,
    /// Parked until its query arrives.
    Waiting,
    /// Its query did not arrive within the horizon.
    Expired {
        /// The horizon in seconds, if recorded.
        horizon_secs: Option<u64>,
    },
}

impl Outcome {
    /// Whether the click was settled without a join for good (too old, filtered, expired):
    /// a later run on it writes nothing.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Outcome::TooOld | Outcome::Filtered | Outcome::Expired { .. }
        )
    }

    /// The stored form.
    pub fn encode(self) -> String {
        match self {
            Outcome::TooOld => "too_old".to_string(),
            Outcome::Filtered => "filtered".to_string(),
            Outcome::Waiting => "waiting".to_string(),
            Outcome::Expired {
                horizon_secs: Some(secs),
            } => format!("expired:{secs}"),
            Outcome::Expired { horizon_secs: None } => "expired".to_string(),
        }
    }

    /// Reads a stored form; `None` if it is none of them.
    pub fn decode(text: &str) -> Option<Outcome> {
        match text {
            "too_old" => Some(Outcome::TooOld),
            "filtered" => Some(Outcome::Filtered),
            "waiting" => Some(Outcome::Waiting),
            "expired" => Some(Outcome::Expired { horizon_secs: None }),
            _ => match text.split_once(':') {
                Some(("expired", secs)) => Some(Outcome::Expired {
                    horizon_secs: secs.parse().ok(),
                }),
                _ => None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;

    #[test]
    fn stored_forms_round_trip_and_stay_the_same() {
        for (outcome, text) in [
            (Outcome::TooOld, "too_old"),
            (Outcome::Filtered, "filtered"),
            (Outcome::Waiting, "waiting"),
            (
                Outcome::Expired {
                    horizon_secs: Some(600),
                },
                "expired:600",
            ),
            (Outcome::Expired { horizon_secs: None }, "expired"),
        ] {
            assert_eq!(outcome.encode(), text);
            assert_eq!(Outcome::decode(text), Some(outcome));
        }
        assert_eq!(Outcome::decode("joined"), None);
        assert_eq!(
            Outcome::decode("expired:soon"),
            Some(Outcome::Expired { horizon_secs: None })
        );
    }
}
