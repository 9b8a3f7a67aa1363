//! What verification reads of a joined output: its two times.

/// What the check reads of a joined output ([`crate::event::Joined`]): its two times; the
/// click and query it carries are skipped (they were written by a join, not read from a
/// log).
#[derive(serde::Deserialize)]
pub(super) struct JoinedTimes {
    /// When the join committed, ms since the epoch.
    pub(super) joined_at: u64,
    /// When the later of click and query was loaded.
    pub(super) arrived_at: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Joined;

    #[test]
    fn the_check_reads_a_joined_outputs_times() {
        let joined = Joined {
            click: serde_json::from_str(r#"{"click_id":"c1","query_id":"q1","event_time":7}"#)
                .unwrap(),
            query: serde_json::from_str(r#"{"query_id":"q1","event_time":5,"terms":"a"}"#).unwrap(),
            token: "A/w/1".to_string(),
            joined_at: 1_000,
            arrived_at: 400,
        };
        let bytes = serde_json::to_vec(&joined).unwrap();
        let times: JoinedTimes = serde_json::from_slice(&bytes).unwrap();
        assert_eq!((times.joined_at, times.arrived_at), (1_000, 400));
    }
}
