//! The wire protocol: a handshake, then length-prefixed binary frames over TCP.
//!
//! Handshake (both directions, 8 bytes): `b"PTSO" | version: u16 | flags: u16 = 0`. A server
//! that does not speak the client's version answers with its own hello and closes.
//!
//! Frames: `len: u32 | kind: u8 | body`, big-endian, `len` counting `kind` and body, at most
//! [`MAX_FRAME`]. Kinds: `0x01` get (`req_id: u64, count: u32`); replies `0x81` timestamps
//! (`req_id, first: u64, count: u32`: the range `first..first+count`), `0x82` not leader
//! (`req_id, hint_len: u16, hint`), `0x83` error (`req_id, len: u16, message`).

/// First bytes of every handshake.
pub const MAGIC: [u8; 4] = *b"PTSO";
/// The protocol version spoken here.
pub const VERSION: u16 = 1;
/// Length of the handshake.
pub const HELLO_LEN: usize = 8;
/// Largest frame (after the length prefix) either side accepts.
pub const MAX_FRAME: usize = 1024;
/// Most timestamps one request may ask for.
pub const MAX_COUNT: u32 = 1 << 16;

const KIND_GET: u8 = 0x01;
const KIND_TIMESTAMPS: u8 = 0x81;
const KIND_NOT_LEADER: u8 = 0x82;
const KIND_ERROR: u8 = 0x83;

/// The handshake bytes for `version`.
pub fn hello(version: u16) -> [u8; HELLO_LEN] {
    let mut out = [0u8; HELLO_LEN];
    out[..4].copy_from_slice(&MAGIC);
    out[4..6].copy_from_slice(&version.to_be_bytes());
    out
}

/// Checks a received handshake; returns the peer's version.
pub fn parse_hello(bytes: &[u8; HELLO_LEN]) -> Result<u16, ProtocolError> {
    if bytes[..4] != MAGIC {
        return Err(ProtocolError::BadMagic);
    }
    Ok(u16::from_be_bytes([bytes[4], bytes[5]]))
}

/// A protocol violation; the connection is closed with this as the logged reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The handshake does not start with [`MAGIC`].
    #[error("bad handshake magic")]
    BadMagic,
    /// The peer speaks another protocol version.
    #[error("unsupported protocol version {0} (this side speaks {VERSION})")]
    UnsupportedVersion(u16),
    /// A frame longer than [`MAX_FRAME`] or shorter than its kind needs.
    #[error("bad frame length {0}")]
    BadLength(usize),
    /// An unknown frame kind.
    #[error("unknown frame kind {0:#04x}")]
    UnknownKind(u8),
    /// A count outside `1..=MAX_COUNT`.
    #[error("invalid timestamp count {0}")]
    BadCount(u32),
    /// The connection ended inside a frame or handshake.
    #[error("truncated frame ({0} bytes pending at end of stream)")]
    Truncated(usize),
    /// A string field is not UTF-8.
    #[error("non-UTF-8 text in a frame")]
    BadText,
}

/// A request for `count` consecutive timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetRequest {
    /// Chosen by the client, echoed in the reply.
    pub req_id: u64,
    /// How many timestamps, `1..=MAX_COUNT`.
    pub count: u32,
}

/// A server reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The timestamps `first .. first + count`.
    Timestamps {
        /// The request's id.
        req_id: u64,
        /// The first timestamp.
        first: u64,
        /// How many.
        count: u32,
    },
    /// This server is not the leader; `hint` is the leader's address if it knows one.
    NotLeader {
        /// The request's id.
        req_id: u64,
        /// The leader's address, or empty.
        hint: String,
    },
    /// The server could not answer (e.g. the store is unavailable); retry.
    Error {
        /// The request's id.
        req_id: u64,
        /// What went wrong.
        message: String,
    },
}

/// Appends the frame of `req` to `out`.
pub fn encode_request(req: GetRequest, out: &mut Vec<u8>) {
    out.extend_from_slice(&13u32.to_be_bytes());
    out.push(KIND_GET);
    out.extend_from_slice(&req.req_id.to_be_bytes());
    out.extend_from_slice(&req.count.to_be_bytes());
}

/// Appends the frame of `reply` to `out`.
pub fn encode_reply(reply: &Reply, out: &mut Vec<u8>) {
    match reply {
        Reply::Timestamps {
            req_id,
            first,
            count,
        } => {
            out.extend_from_slice(&21u32.to_be_bytes());
            out.push(KIND_TIMESTAMPS);
            out.extend_from_slice(&req_id.to_be_bytes());
            out.extend_from_slice(&first.to_be_bytes());
            out.extend_from_slice(&count.to_be_bytes());
        }
        Reply::NotLeader { req_id, hint: text }
        | Reply::Error {
            req_id,
            message: text,
        } => {
            let kind = if matches!(reply, Reply::NotLeader { .. }) {
                KIND_NOT_LEADER
            } else {
                KIND_ERROR
            };
            let mut end = text.len().min(MAX_FRAME - 11);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let text = &text.as_bytes()[..end];
            out.extend_from_slice(&(11 + text.len() as u32).to_be_bytes());
            out.push(kind);
            out.extend_from_slice(&req_id.to_be_bytes());
            out.extend_from_slice(&(text.len() as u16).to_be_bytes());
            out.extend_from_slice(text);
        }
    }
}

/// A frame's kind, its body, and the bytes it took in the buffer.
type RawFrame<'a> = (u8, &'a [u8], usize);

/// Splits one frame off the front of `buf`: `Ok(None)` if more bytes are needed.
fn split_frame(buf: &[u8]) -> Result<Option<RawFrame<'_>>, ProtocolError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(ProtocolError::BadLength(len));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some((buf[4], &buf[5..4 + len], 4 + len)))
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Decodes one request frame from the front of `buf` (server side).
pub fn decode_request(buf: &[u8]) -> Result<Option<(GetRequest, usize)>, ProtocolError> {
    let Some((kind, body, used)) = split_frame(buf)? else {
        return Ok(None);
    };
    if kind != KIND_GET {
        return Err(ProtocolError::UnknownKind(kind));
    }
    if body.len() != 12 {
        return Err(ProtocolError::BadLength(body.len() + 1));
    }
    let req = GetRequest {
        req_id: be_u64(body),
        count: be_u32(&body[8..]),
    };
    if req.count == 0 || req.count > MAX_COUNT {
        return Err(ProtocolError::BadCount(req.count));
    }
    Ok(Some((req, used)))
}

/// Decodes one reply frame from the front of `buf` (client side).
pub fn decode_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, ProtocolError> {
    let Some((kind, body, used)) = split_frame(buf)? else {
        return Ok(None);
    };
    let bad_len = || ProtocolError::BadLength(body.len() + 1);
    let reply = match kind {
        KIND_TIMESTAMPS => {
            if body.len() != 20 {
                return Err(bad_len());
            }
            Reply::Timestamps {
                req_id: be_u64(body),
                first: be_u64(&body[8..]),
                count: be_u32(&body[16..]),
            }
        }
        KIND_NOT_LEADER | KIND_ERROR => {
            if body.len() < 10 {
                return Err(bad_len());
            }
            let req_id = be_u64(body);
            let n = u16::from_be_bytes([body[8], body[9]]) as usize;
            if body.len() != 10 + n {
                return Err(bad_len());
            }
            let text = std::str::from_utf8(&body[10..])
                .map_err(|_| ProtocolError::BadText)?
                .to_string();
            if kind == KIND_NOT_LEADER {
                Reply::NotLeader { req_id, hint: text }
            } else {
                Reply::Error {
                    req_id,
                    message: text,
                }
            }
        }
        other => return Err(ProtocolError::UnknownKind(other)),
    };
    Ok(Some((reply, used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_garbage() {
        let mut buf = Vec::new();
        let req = GetRequest {
            req_id: 5,
            count: 64,
        };
        encode_request(req, &mut buf);
        assert_eq!(decode_request(&buf), Ok(Some((req, buf.len()))));
        for cut in 0..buf.len() {
            assert_eq!(decode_request(&buf[..cut]), Ok(None));
        }
        for reply in [
            Reply::Timestamps {
                req_id: 1,
                first: 99,
                count: 3,
            },
            Reply::NotLeader {
                req_id: 2,
                hint: "127.0.0.1:1".into(),
            },
            Reply::Error {
                req_id: 3,
                message: "é".repeat(2000),
            },
        ] {
            let mut buf = Vec::new();
            encode_reply(&reply, &mut buf);
            let (got, used) = decode_reply(&buf).unwrap().unwrap();
            assert_eq!(used, buf.len());
            if !matches!(reply, Reply::Error { .. }) {
                assert_eq!(got, reply);
            }
        }
        assert_eq!(
            decode_request(&[0, 0, 0xff, 0xff]),
            Err(ProtocolError::BadLength(0xffff))
        );
        assert_eq!(
            decode_request(&[0, 0, 0, 1, 0x42]),
            Err(ProtocolError::UnknownKind(0x42))
        );
        let mut zero = Vec::new();
        encode_request(
            GetRequest {
                req_id: 1,
                count: 0,
            },
            &mut zero,
        );
        assert_eq!(decode_request(&zero), Err(ProtocolError::BadCount(0)));
        assert_eq!(parse_hello(b"GET / HT"), Err(ProtocolError::BadMagic));
        assert_eq!(parse_hello(&hello(7)), Ok(7));
    }
}
