//! Which kinds of write each key received ([`WriteKinds`]), when recording is on
//! ([`crate::ServerConfig::record_writes`]): a plain write (no latches), an atomic-mode
//! write (`for_cas`, latched) or a CAS. TiKV serialises a CAS only with latched writes, so
//! a key that receives both a plain write and a latched one (CAS or atomic) can lose writes
//! on a real cluster; tests read [`crate::RunningServer::write_kinds`] to check that no key
//! of a workload ever does ([`WriteKinds::mixed`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

/// The kinds of write a key received (counts of applied requests naming it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteKinds {
    /// Plain puts and deletes (`for_cas = false`).
    pub plain: u64,
    /// Atomic-mode puts and deletes (`for_cas = true`).
    pub atomic: u64,
    /// Compare-and-swaps.
    pub cas: u64,
}

impl WriteKinds {
    /// Whether the key received both a plain write and a latched one (atomic or CAS).
    pub fn mixed(&self) -> bool {
        self.plain > 0 && (self.atomic > 0 || self.cas > 0)
    }
}

/// The kind of one write request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteKind {
    Plain,
    Atomic,
    Cas,
}

impl WriteKind {
    /// The kind of a put or delete sent with `for_cas`.
    pub(crate) fn of(for_cas: bool) -> Self {
        if for_cas {
            WriteKind::Atomic
        } else {
            WriteKind::Plain
        }
    }
}

/// Per key, the kinds of write it received; `None` when recording is off.
pub(crate) struct WriteLog {
    keys: Option<Mutex<BTreeMap<Vec<u8>, WriteKinds>>>,
}

impl WriteLog {
    pub(crate) fn new(enabled: bool) -> Self {
        WriteLog {
            keys: enabled.then(|| Mutex::new(BTreeMap::new())),
        }
    }

    /// Records one applied write of `kind` naming `keys`.
    pub(crate) fn record<'k>(&self, kind: WriteKind, keys: impl IntoIterator<Item = &'k [u8]>) {
        let Some(log) = &self.keys else {
            return;
        };
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            let kinds = log.entry(key.to_vec()).or_default();
            match kind {
                WriteKind::Plain => kinds.plain += 1,
                WriteKind::Atomic => kinds.atomic += 1,
                WriteKind::Cas => kinds.cas += 1,
            }
        }
    }

    /// What was recorded so far (empty when recording is off).
    pub(crate) fn snapshot(&self) -> BTreeMap<Vec<u8>, WriteKinds> {
        self.keys
            .as_ref()
            .map(|log| log.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default()
    }
}
