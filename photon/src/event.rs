//! The event model: queries and clicks as JSON lines.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A search query event.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Query {
    /// Unique id (Photon-style ids such as `server:process:timestamp` work).
    pub query_id: String,
    /// Event time, milliseconds since the Unix epoch.
    pub event_time: u64,
    /// Any other fields, kept as given.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// An ad click event, referring to the query that produced it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Click {
    /// Unique id of the click (a repeated click_id is the same click delivered twice).
    pub click_id: String,
    /// The query this click came from.
    pub query_id: String,
    /// Event time, milliseconds since the Unix epoch.
    pub event_time: u64,
    /// Any other fields, kept as given.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

/// Which kind of events a log file holds (from its name: `queries*` or `clicks*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A query log.
    Query,
    /// A click log.
    Click,
}

impl Kind {
    /// The kind of a log file by its file name, if recognizable.
    pub fn of_file(path: &std::path::Path) -> Option<Kind> {
        let name = path.file_name()?.to_str()?;
        if !name.ends_with(".jsonl") {
            return None;
        }
        if name.starts_with("queries") {
            Some(Kind::Query)
        } else if name.starts_with("clicks") {
            Some(Kind::Click)
        } else {
            None
        }
    }
}

/// The event day (UTC days since the epoch) of an event time, the IdRegistry's partition.
pub fn day_of(event_time_ms: u64) -> u64 {
    event_time_ms / 86_400_000
}

/// A joined event: the click, its query, and who joined it when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Joined {
    /// The click.
    pub click: Click,
    /// The query it came from.
    pub query: Query,
    /// The IdRegistry token of the join (pipeline, worker, process, the notification it ran
    /// for, its start_ts: `join::JoinToken`).
    pub token: String,
    /// Wall-clock time of the join transaction, ms since the epoch.
    pub joined_at: u64,
    /// When the later of click and query was loaded (the earliest the join was possible).
    pub arrived_at: u64,
}

/// Query and click objects read in one pass: the named fields into their slots, every other
/// field into `fields`. `#[serde(flatten)]` did the same by buffering the whole object first
/// (every key and value copied into serde's generic content, then again into the map): it
/// was a third of the cost of reading an event, and events are read by the loader, the join
/// and verification. Missing and repeated named fields are the same errors as the derived
/// code's.
mod de {
    use super::{Click, Query};
    use serde::de::{DeserializeSeed, Error, MapAccess, Visitor};
    use serde::{Deserialize, Deserializer};
    use serde_json::{Map, Value};
    use std::fmt;

    /// A key of an event object: one of the named fields (its index), or another.
    enum Key {
        Named(usize),
        Other(String),
    }

    /// Reads a key, comparing it with `names` before copying it.
    struct KeySeed(&'static [&'static str]);

    impl<'de> DeserializeSeed<'de> for KeySeed {
        type Value = Key;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<'de> Visitor<'de> for KeySeed {
        type Value = Key;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a field name")
        }
        fn visit_str<E: Error>(self, key: &str) -> Result<Key, E> {
            Ok(match self.0.iter().position(|name| *name == key) {
                Some(i) => Key::Named(i),
                None => Key::Other(key.to_owned()),
            })
        }
    }

    /// Reads an object's entries: each named field through `named` (given its index), every
    /// other into the returned map (a repeated one keeps its last value, as the map does).
    fn read_object<'de, A: MapAccess<'de>>(
        mut map: A,
        names: &'static [&'static str],
        mut named: impl FnMut(usize, &mut A) -> Result<(), A::Error>,
    ) -> Result<Map<String, Value>, A::Error> {
        let mut fields = Map::new();
        while let Some(key) = map.next_key_seed(KeySeed(names))? {
            match key {
                Key::Named(i) => named(i, &mut map)?,
                Key::Other(key) => {
                    let value: Value = map.next_value()?;
                    fields.insert(key, value);
                }
            }
        }
        Ok(fields)
    }

    /// Reads the value of named field `name` into `slot`; a second one is an error.
    fn fill<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
        slot: &mut Option<T>,
        name: &'static str,
        map: &mut A,
    ) -> Result<(), A::Error> {
        if slot.is_some() {
            return Err(A::Error::duplicate_field(name));
        }
        *slot = Some(map.next_value()?);
        Ok(())
    }

    fn required<T, E: Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
        slot.ok_or_else(|| E::missing_field(name))
    }

    const QUERY_FIELDS: &[&str] = &["query_id", "event_time"];
    const CLICK_FIELDS: &[&str] = &["click_id", "query_id", "event_time"];

    struct QueryVisitor;

    impl<'de> Visitor<'de> for QueryVisitor {
        type Value = Query;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a query object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Query, A::Error> {
            let (mut query_id, mut event_time) = (None, None);
            let fields = read_object(map, QUERY_FIELDS, |i, map| match i {
                0 => fill(&mut query_id, QUERY_FIELDS[0], map),
                _ => fill(&mut event_time, QUERY_FIELDS[1], map),
            })?;
            Ok(Query {
                query_id: required(query_id, QUERY_FIELDS[0])?,
                event_time: required(event_time, QUERY_FIELDS[1])?,
                fields,
            })
        }
    }

    impl<'de> Deserialize<'de> for Query {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Query, D::Error> {
            d.deserialize_map(QueryVisitor)
        }
    }

    struct ClickVisitor;

    impl<'de> Visitor<'de> for ClickVisitor {
        type Value = Click;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a click object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Click, A::Error> {
            let (mut click_id, mut query_id, mut event_time) = (None, None, None);
            let fields = read_object(map, CLICK_FIELDS, |i, map| match i {
                0 => fill(&mut click_id, CLICK_FIELDS[0], map),
                1 => fill(&mut query_id, CLICK_FIELDS[1], map),
                _ => fill(&mut event_time, CLICK_FIELDS[2], map),
            })?;
            Ok(Click {
                click_id: required(click_id, CLICK_FIELDS[0])?,
                query_id: required(query_id, CLICK_FIELDS[1])?,
                event_time: required(event_time, CLICK_FIELDS[2])?,
                fields,
            })
        }
    }

    impl<'de> Deserialize<'de> for Click {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Click, D::Error> {
            d.deserialize_map(ClickVisitor)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use proptest::prelude::*;

        /// The derived code these replace: what they must read alike.
        #[derive(Debug, PartialEq, Deserialize)]
        struct DerivedClick {
            click_id: String,
            query_id: String,
            event_time: u64,
            #[serde(flatten)]
            fields: Map<String, Value>,
        }

        #[derive(Debug, PartialEq, Deserialize)]
        struct DerivedQuery {
            query_id: String,
            event_time: u64,
            #[serde(flatten)]
            fields: Map<String, Value>,
        }

        /// A JSON value of an event's field, of any kind and sometimes of the wrong one.
        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-z:0-9]{0,6}".prop_map(|s| format!("{s:?}")),
                "\\PC{0,4}".prop_map(|s| serde_json::to_string(&s).expect("a string")),
                any::<u64>().prop_map(|n| n.to_string()),
                any::<i32>().prop_map(|n| n.to_string()),
                Just("1.5".to_string()),
                Just("null".to_string()),
                Just("[1,{\"a\":[]}]".to_string()),
                Just("{\"nested\":{\"x\":true}}".to_string()),
            ]
        }

        /// An object whose keys are drawn mostly from the named fields (missing, repeated,
        /// escaped) and a few others.
        fn object() -> impl Strategy<Value = String> {
            let key = prop_oneof![
                Just("\"click_id\"".to_string()),
                Just("\"query_id\"".to_string()),
                Just("\"event_time\"".to_string()),
                Just("\"query\\u005fid\"".to_string()),
                "[a-z_]{1,8}".prop_map(|s| format!("{s:?}")),
            ];
            let random = prop::collection::vec((key, value()), 0..7);
            // Mostly well-formed: the named fields once each, shuffled among others.
            let extra = prop::collection::vec(
                ("[a-z_]{1,8}".prop_map(|s| format!("{s:?}")), value()),
                0..4,
            );
            let valid = ("[a-z0-9:]{1,8}", "[a-z0-9:]{1,8}", any::<u64>(), extra)
                .prop_map(|(click, query, time, mut entries)| {
                    entries.push(("\"click_id\"".to_string(), format!("{click:?}")));
                    entries.push(("\"query_id\"".to_string(), format!("{query:?}")));
                    entries.push(("\"event_time\"".to_string(), time.to_string()));
                    entries
                })
                .prop_shuffle();
            prop_oneof![random, valid].prop_map(|entries| {
                let body: Vec<String> = entries.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", body.join(","))
            })
        }

        proptest! {
            #[test]
            fn clicks_read_as_the_derived_code_reads_them(text in object()) {
                let ours = serde_json::from_str::<Click>(&text);
                let derived = serde_json::from_str::<DerivedClick>(&text);
                match (ours, derived) {
                    (Ok(c), Ok(d)) => {
                        prop_assert_eq!(&c.click_id, &d.click_id);
                        prop_assert_eq!(&c.query_id, &d.query_id);
                        prop_assert_eq!(c.event_time, d.event_time);
                        prop_assert_eq!(&c.fields, &d.fields);
                    }
                    (Err(_), Err(_)) => {}
                    (ours, derived) => prop_assert!(false, "{text}: ours {ours:?}, derived {derived:?}"),
                }
            }

            #[test]
            fn queries_read_as_the_derived_code_reads_them(text in object()) {
                let ours = serde_json::from_str::<Query>(&text);
                let derived = serde_json::from_str::<DerivedQuery>(&text);
                match (ours, derived) {
                    (Ok(q), Ok(d)) => {
                        prop_assert_eq!(&q.query_id, &d.query_id);
                        prop_assert_eq!(q.event_time, d.event_time);
                        prop_assert_eq!(&q.fields, &d.fields);
                    }
                    (Err(_), Err(_)) => {}
                    (ours, derived) => prop_assert!(false, "{text}: ours {ours:?}, derived {derived:?}"),
                }
            }
        }

        #[test]
        fn a_missing_or_repeated_field_is_named() {
            let missing = serde_json::from_str::<Click>(r#"{"click_id":"c","event_time":1}"#);
            assert!(missing
                .unwrap_err()
                .to_string()
                .contains("missing field `query_id`"));
            let twice =
                serde_json::from_str::<Query>(r#"{"query_id":"a","query_id":"b","event_time":1}"#);
            assert!(twice
                .unwrap_err()
                .to_string()
                .contains("duplicate field `query_id`"));
        }

        #[test]
        fn events_round_trip_with_their_other_fields() {
            let text =
                r#"{"click_id":"c1","query_id":"q1","event_time":5,"ad":{"id":[1,2]},"cost":0.5}"#;
            let click: Click = serde_json::from_str(text).expect("a click");
            assert_eq!(click.fields.len(), 2);
            let again: Click = serde_json::from_slice(&serde_json::to_vec(&click).expect("json"))
                .expect("a click");
            assert_eq!(again, click);
        }
    }
}
