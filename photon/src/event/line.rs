//! A log line read for its ids and event time only, without building the event's other
//! fields (a `serde_json::Map` per event), yet accepting the lines [`crate::event::Query`]
//! and [`crate::event::Click`] accept, but those nested too deep to read back once stored
//! ([`MAX_DEPTH`]): how the loader checks a line (it stores the line's text as given:
//! `crate::load::Parsed`), how the join reads a stored event (`crate::schema::StoredEvent`)
//! and how verification reads the logs.

use crate::event::Kind;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// The ids and event time of a log line. The line is accepted exactly when it parses as a
/// [`crate::event::Query`] or [`crate::event::Click`] and is nested at most [`MAX_DEPTH`]
/// deep: a JSON object with its kind's fields (`query_id`, and for a click `click_id`,
/// strings; `event_time` an unsigned integer), each once, and any other fields, each a JSON
/// value the events' map takes (numbers in range, escapes that are characters). Those are
/// checked and dropped.
pub(crate) struct EventLine<'a> {
    /// The click's id (`None` for a query).
    pub(crate) click_id: Option<Text<'a>>,
    /// The query's id (a click's query).
    pub(crate) query_id: Text<'a>,
    /// The event time, ms since the epoch.
    pub(crate) event_time: u64,
}

impl<'a> EventLine<'a> {
    /// `line` (one log line, without its line end) as an event of `kind`.
    pub(crate) fn parse(line: &'a str, kind: Kind) -> serde_json::Result<Self> {
        let mut de = serde_json::Deserializer::from_str(line);
        let event = de.deserialize_map(EventVisitor { kind })?;
        de.end()?;
        Ok(event)
    }

    /// [`EventLine::parse`] of JSON text given as bytes (its strings are checked as UTF-8).
    pub(crate) fn parse_bytes(text: &'a [u8], kind: Kind) -> serde_json::Result<Self> {
        let mut de = serde_json::Deserializer::from_slice(text);
        let event = de.deserialize_map(EventVisitor { kind })?;
        de.end()?;
        Ok(event)
    }
}

struct EventVisitor {
    kind: Kind,
}

impl<'de> Visitor<'de> for EventVisitor {
    type Value = EventLine<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut click_id, mut query_id, mut event_time) = (None, None, None);
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "click_id" if self.kind == Kind::Click => {
                    once(&mut click_id, "click_id", map.next_value()?)?
                }
                "query_id" => once(&mut query_id, "query_id", map.next_value()?)?,
                "event_time" => once(&mut event_time, "event_time", map.next_value()?)?,
                _ => map.next_value_seed(Checked { depth: 2 })?,
            }
        }
        let click_id = match (self.kind, click_id) {
            (Kind::Click, None) => return Err(de::Error::missing_field("click_id")),
            (_, id) => id,
        };
        Ok(EventLine {
            click_id,
            query_id: query_id.ok_or_else(|| de::Error::missing_field("query_id"))?,
            event_time: event_time.ok_or_else(|| de::Error::missing_field("event_time"))?,
        })
    }
}

/// Sets a field seen for the first time; a second time is an error, as for the loader.
fn once<T, E: de::Error>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(value);
    Ok(())
}

/// A string, borrowed from the line unless it holds escapes.
pub(crate) struct Text<'a>(pub(crate) Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(TextVisitor)
    }
}

/// The deepest nesting of objects and arrays in a line the loader accepts, the line's own
/// object counted: serde_json reads at most 127 levels (its recursion limit), and the line
/// is stored and joined one level down (`{"event":<line>,…}`, `{"click":<line>,…}`). A line
/// nested 127 deep would load, and then no join could read it back.
pub(crate) const MAX_DEPTH: usize = 126;

/// Any JSON value, parsed as a [`crate::event::Query`]'s map of other fields parses it (so
/// that the same values fail: a number out of range, a lone surrogate escape; and nesting
/// past [`MAX_DEPTH`]) and dropped. `serde::de::IgnoredAny` would only check the syntax. `depth` is the level of the
/// value: a field of the line is at level 2.
struct Checked {
    depth: usize,
}

impl Checked {
    /// Refuses a container at a level past [`MAX_DEPTH`]; else what its elements are checked as.
    fn inner<E: de::Error>(&self) -> Result<Checked, E> {
        if self.depth > MAX_DEPTH {
            return Err(E::custom(format_args!(
                "nested deeper than {MAX_DEPTH} levels (the stored event would pass \
                 serde_json's limit of 127)"
            )));
        }
        Ok(Checked {
            depth: self.depth + 1,
        })
    }
}

impl<'de> de::DeserializeSeed<'de> for Checked {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        while seq
            .next_element_seed(Checked { depth: inner.depth })?
            .is_some()
        {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        while map.next_key::<Text<'de>>()?.is_some() {
            map.next_value_seed(Checked { depth: inner.depth })?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::{Click, Query};

    /// Log lines the loader accepts and lines it refuses, for either kind.
    pub(crate) fn lines() -> Vec<String> {
        let mut lines: Vec<String> = [
            r#"{"query_id":"q1","event_time":5}"#,
            r#"{"query_id":"q1","event_time":5,"terms":"a b","n":[1,{"x":null}]}"#,
            r#"{"click_id":"c1","query_id":"q1","event_time":7,"ad":3}"#,
            r#"{"click_id":"c\"1\u00e9","query_id":"q\\1","event_time":7}"#,
            r#"{"event_time":5,"query_id":"q1","click_id":"c1"}"#,
            r#"{"query\u005fid":"q1","event_time":5,"click_id":"c1"}"#,
            r#"{"query_id":"q1","event_time":5,"click_id":7}"#,
            r#"{"query_id":"q1","event_time":5,"query_id":"q2"}"#,
            r#"{"query_id":"q1","event_time":5,"x":1,"x":2}"#,
            r#"{"Query_ID":"q1","event_time":5}"#,
            r#"{"query_id":"q1"}"#,
            r#"{"query_id":"q1","event_time":-5}"#,
            r#"{"query_id":"q1","event_time":-0}"#,
            r#"{"query_id":"q1","event_time":"5"}"#,
            r#"{"query_id":"q1","event_time":5.5}"#,
            r#"{"query_id":"q1","event_time":5.0}"#,
            r#"{"query_id":7,"event_time":5}"#,
            r#"{"query_id":null,"event_time":5}"#,
            r#"{"click_id":"c1","query_id":"q1","event_time":18446744073709551615}"#,
            r#"{"click_id":"c1","query_id":"q1","event_time":18446744073709551616}"#,
            r#"{"click_id":"c1","query_id":"q1","event_time":7,"x":1e400}"#,
            r#"{"click_id":"c1","query_id":"q1","event_time":7,"x":-1e400}"#,
            r#"{"click_id":"c1","query_id":"q1","event_time":7,"x":"\ud800"}"#,
            r#"{"click_id":"c1","query_id":"q1","event_time":7,"x":{"\ud800":1}}"#,
            r#"{"click_id":"c1","query_id":"q1","event_time":7,"x":"\ud83d\ude00"}"#,
            r#"{"query_id":"q1","event_time":5} trailing"#,
            r#"{"query_id":"q1","event_time":5"#,
            r#"["q1",5]"#,
            r#"["c1","q1",5]"#,
            r#" {"query_id":"q1","event_time":5}"#,
            "{\"query_id\":\"q1\",\r\"event_time\":5}\r",
            "{\"query_id\":\"q\r1\",\"event_time\":5}",
            "\x0c{\"query_id\":\"q1\",\"event_time\":5}",
            r#""q1""#,
            r#"{}"#,
        ]
        .iter()
        .map(|l| l.to_string())
        .collect();
        let big = "9".repeat(400);
        lines.push(format!(
            r#"{{"click_id":"c1","query_id":"q1","event_time":7,"x":{big}}}"#
        ));
        for depth in [100, 126, 127, 128, 200] {
            let (open, close) = ("[".repeat(depth), "]".repeat(depth));
            lines.push(format!(
                r#"{{"click_id":"c1","query_id":"q1","event_time":7,"x":{open}{close}}}"#
            ));
        }
        lines
    }

    #[test]
    fn the_check_accepts_the_lines_the_loader_accepts_with_the_same_ids() {
        let lines = lines();
        let mut accepted = 0;
        for line in &lines {
            let query = serde_json::from_str::<Query>(line).ok().filter(readable);
            let light = EventLine::parse(line, Kind::Query).ok();
            assert_eq!(
                query.as_ref().map(|q| (q.query_id.as_str(), q.event_time)),
                light
                    .as_ref()
                    .map(|q| (q.query_id.0.as_ref(), q.event_time)),
                "query line {line}"
            );
            let click = serde_json::from_str::<Click>(line).ok().filter(readable);
            let light = EventLine::parse(line, Kind::Click).ok();
            assert_eq!(
                click
                    .as_ref()
                    .map(|c| (c.click_id.as_str(), c.query_id.as_str(), c.event_time)),
                light.as_ref().map(|c| (
                    c.click_id.as_ref().map_or("", |id| id.0.as_ref()),
                    c.query_id.0.as_ref(),
                    c.event_time
                )),
                "click line {line}"
            );
            accepted += usize::from(click.is_some());
        }
        // Both kinds of answer are among the lines.
        assert!(accepted > 5 && accepted < lines.len() - 5, "{accepted}");
    }

    /// Whether an event, stored one level down as the loader stores it, reads back.
    pub(crate) fn readable<T: serde::Serialize + serde::de::DeserializeOwned>(event: &T) -> bool {
        let stored = serde_json::to_vec(&crate::schema::Stored {
            event,
            loaded_at: 0,
        })
        .unwrap();
        serde_json::from_slice::<crate::schema::Stored<T>>(&stored).is_ok()
    }

    /// A line nested 127 deep parses as an event but its stored form does not read back
    /// (the join of it would fail forever): the check refuses it, and accepts 126.
    #[test]
    fn a_line_too_deep_to_read_back_once_stored_is_refused() {
        let nested = |levels: usize| {
            let (open, close) = ("[".repeat(levels - 1), "]".repeat(levels - 1));
            format!(r#"{{"click_id":"c1","query_id":"q1","event_time":7,"x":{open}{close}}}"#)
        };
        let deepest = nested(MAX_DEPTH);
        let click: Click = serde_json::from_str(&deepest).unwrap();
        assert!(readable(&click));
        assert!(EventLine::parse(&deepest, Kind::Click).is_ok());
        let too_deep = nested(MAX_DEPTH + 1);
        let click: Click = serde_json::from_str(&too_deep).unwrap();
        assert!(!readable(&click));
        let error = EventLine::parse(&too_deep, Kind::Click).err().unwrap();
        assert!(
            error.to_string().contains("nested deeper than 126 levels"),
            "{error}"
        );
    }
}
