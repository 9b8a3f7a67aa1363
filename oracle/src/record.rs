//! The oracle's persisted record: one meta key, written only by compare-and-swap.
//!
//! Layout (big-endian): `format: u8 = 1 | epoch: u64 | window_end: u64 | seq: u64 |
//! has_leader: u8 | [leader_id: u64 | addr_len: u16 | addr: utf-8]`.

/// Name of the oracle's meta record (see `percolator::KeyCodec::meta`).
pub const RECORD_NAME: &str = "oracle";

const FORMAT: u8 = 1;

/// Who serves, as written in the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// Random id of the serving process (instance), fixed for its lifetime.
    pub id: u64,
    /// The address clients should use to reach it (a hint for "not leader" replies).
    pub addr: String,
}

/// The decoded oracle record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OracleRecord {
    /// Raised by compare-and-swap by every leader before it answers anything.
    pub epoch: u64,
    /// No timestamp at or below this one has been or will be issued by an earlier epoch's
    /// leader; every timestamp ever issued is `<= window_end`.
    pub window_end: u64,
    /// Grows on every write, so the record's bytes never repeat (no ABA, and a retried CAS
    /// can recognise its own write).
    pub seq: u64,
    /// The current leader; `None` after a graceful release.
    pub leader: Option<LeaderInfo>,
}

/// A stored record that cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The bytes end before the field at `offset`.
    #[error("oracle record truncated at byte {offset} ({len} bytes)")]
    Truncated {
        /// Where the missing field starts.
        offset: usize,
        /// The record's length.
        len: usize,
    },
    /// The record was written by an unknown format version.
    #[error("oracle record has unknown format {0}")]
    UnknownFormat(u8),
    /// A flag byte holds something other than 0 or 1.
    #[error("oracle record has invalid leader flag {0}")]
    BadFlag(u8),
    /// The leader address is not UTF-8.
    #[error("oracle record has a non-UTF-8 leader address")]
    BadAddress,
    /// Bytes follow the last field.
    #[error("oracle record has {0} trailing bytes")]
    TrailingBytes(usize),
}

impl OracleRecord {
    /// Serialises the record.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40);
        out.push(FORMAT);
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.window_end.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        match &self.leader {
            None => out.push(0),
            Some(leader) => {
                out.push(1);
                out.extend_from_slice(&leader.id.to_be_bytes());
                let addr = leader.addr.as_bytes();
                let len = addr.len().min(u16::MAX as usize);
                out.extend_from_slice(&(len as u16).to_be_bytes());
                out.extend_from_slice(&addr[..len]);
            }
        }
        out
    }

    /// Parses stored bytes, refusing anything malformed.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let mut r = Reader { bytes, pos: 0 };
        let format = r.u8()?;
        if format != FORMAT {
            return Err(RecordError::UnknownFormat(format));
        }
        let epoch = r.u64()?;
        let window_end = r.u64()?;
        let seq = r.u64()?;
        let leader = match r.u8()? {
            0 => None,
            1 => {
                let id = r.u64()?;
                let len = r.u16()? as usize;
                let addr = r.take(len)?;
                let addr = std::str::from_utf8(addr)
                    .map_err(|_| RecordError::BadAddress)?
                    .to_string();
                Some(LeaderInfo { id, addr })
            }
            other => return Err(RecordError::BadFlag(other)),
        };
        if r.pos != bytes.len() {
            return Err(RecordError::TrailingBytes(bytes.len() - r.pos));
        }
        Ok(OracleRecord {
            epoch,
            window_end,
            seq,
            leader,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let out = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(RecordError::Truncated {
                offset: self.pos,
                len: self.bytes.len(),
            }),
        }
    }
    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, RecordError> {
        let mut b = [0u8; 2];
        b.copy_from_slice(self.take(2)?);
        Ok(u16::from_be_bytes(b))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        for leader in [
            None,
            Some(LeaderInfo {
                id: 7,
                addr: "127.0.0.1:7707".into(),
            }),
        ] {
            let rec = OracleRecord {
                epoch: 3,
                window_end: 1 << 40,
                seq: 9,
                leader,
            };
            let bytes = rec.encode();
            assert_eq!(OracleRecord::decode(&bytes), Ok(rec));
            for cut in 0..bytes.len() {
                assert!(OracleRecord::decode(&bytes[..cut]).is_err(), "cut {cut}");
            }
            let mut long = bytes.clone();
            long.push(0);
            assert_eq!(
                OracleRecord::decode(&long),
                Err(RecordError::TrailingBytes(1))
            );
            let mut bad = bytes;
            bad[0] = 2;
            assert_eq!(
                OracleRecord::decode(&bad),
                Err(RecordError::UnknownFormat(2))
            );
        }
    }
}
