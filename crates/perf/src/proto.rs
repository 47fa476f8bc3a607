//! The fixed 32-byte hello that opens every test connection.
//!
//! Layout (all integers little-endian):
//!
//! | bytes  | field                                                  |
//! |--------|--------------------------------------------------------|
//! | 0..8   | magic `b"PVNETPF1"`                                     |
//! | 8..12  | kind: 1 = stream, 2 = request/response, 3 = UDP stream, 4 = records |
//! | 12..16 | stream: bytes per write; rr: request size; udp: datagram size; records: record size |
//! | 16..20 | stream: 0; rr: response size; udp: test id; records: 0 |
//! | 20..24 | planned duration in milliseconds (informational; udp: 0 = none; records: 0) |
//! | 24..32 | stream: byte limit, 0 = none; rr: 0; udp: datagram limit, 0 = none; records: count |
//!
//! Stream: after the hello the client sends pattern bytes from stream offset 0 (see
//! [`crate::pattern`]), then shuts down its write side; the server answers with one JSON line
//! (a [`crate::StreamReport`]) and closes.
//!
//! RR: each request is `req_size` bytes whose first `min(8, req_size)` bytes are the
//! little-endian transaction sequence number (0, 1, 2, ...), the rest pattern bytes. The server
//! answers with `rsp_size` bytes whose first `min(8, req_size, rsp_size)` bytes echo the
//! sequence bytes of the request, the rest pattern bytes. The client closes to end the test.
//!
//! Records: paced records of one size, each acknowledged; see [`crate::records`].
//!
//! UDP: the TCP connection is the test's control channel; the datagrams and the rest of the
//! exchange (ready, stop, report) are described in [`crate::udp`].

/// Magic at the start of every hello.
pub const MAGIC: [u8; 8] = *b"PVNETPF1";
/// Size of the hello.
pub const HELLO_LEN: usize = 32;
/// Kind value of a stream test.
pub const KIND_STREAM: u32 = 1;
/// Kind value of a request/response test.
pub const KIND_RR: u32 = 2;
/// Kind value of a UDP stream test.
pub const KIND_UDP: u32 = 3;
/// Kind value of a records test.
pub const KIND_RECORDS: u32 = 4;
/// Largest accepted message, request or response size (16 MiB).
pub const MAX_MSG: u32 = 16 << 20;
/// Largest UDP payload over IPv4: 65535 (IP total length) - 20 (IP header) - 8 (UDP header).
pub const MAX_DATAGRAM: u32 = 65507;

/// A decoded hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hello {
    /// TCP_STREAM-like bulk transfer.
    Stream {
        msg_size: u32,
        duration_ms: u32,
        /// 0 = no limit.
        max_bytes: u64,
    },
    /// TCP_RR-like request/response.
    Rr {
        req_size: u32,
        rsp_size: u32,
        duration_ms: u32,
    },
    /// UDP stream of fixed-size datagrams, counted and verified by the receiver.
    Udp {
        /// Bytes per datagram (UDP payload), 1..=[`MAX_DATAGRAM`].
        size: u32,
        /// Carried in every datagram of at least 12 bytes; tells this test's datagrams apart.
        test_id: u32,
        /// 0 = no planned duration (the test is bounded by a datagram count).
        duration_ms: u32,
        /// 0 = no limit.
        max_datagrams: u64,
    },
    /// Records of one size, each acknowledged ([`crate::records`]).
    Records {
        /// Bytes per record, 1..=[`MAX_MSG`].
        size: u32,
        /// Records, 1..=[`crate::records::MAX_RECORDS`].
        count: u64,
    },
}

/// Why a hello was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HelloError {
    #[error("bad magic {0:02x?}")]
    BadMagic([u8; 8]),
    #[error("unknown test kind {0}")]
    UnknownKind(u32),
    #[error("size {0} out of range 1..={MAX_MSG}")]
    BadSize(u32),
    #[error("datagram size {0} out of range 1..={MAX_DATAGRAM}")]
    BadDatagramSize(u32),
    #[error("record count {0} out of range 1..={max}", max = crate::records::MAX_RECORDS)]
    BadRecordCount(u64),
}

fn check_size(v: u32) -> Result<u32, HelloError> {
    if v == 0 || v > MAX_MSG {
        Err(HelloError::BadSize(v))
    } else {
        Ok(v)
    }
}

impl Hello {
    /// The 32 bytes on the wire.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let (kind, a, b, dur, lim) = match *self {
            Hello::Stream {
                msg_size,
                duration_ms,
                max_bytes,
            } => (KIND_STREAM, msg_size, 0, duration_ms, max_bytes),
            Hello::Rr {
                req_size,
                rsp_size,
                duration_ms,
            } => (KIND_RR, req_size, rsp_size, duration_ms, 0),
            Hello::Udp {
                size,
                test_id,
                duration_ms,
                max_datagrams,
            } => (KIND_UDP, size, test_id, duration_ms, max_datagrams),
            Hello::Records { size, count } => (KIND_RECORDS, size, 0, 0, count),
        };
        let mut h = [0u8; HELLO_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&kind.to_le_bytes());
        h[12..16].copy_from_slice(&a.to_le_bytes());
        h[16..20].copy_from_slice(&b.to_le_bytes());
        h[20..24].copy_from_slice(&dur.to_le_bytes());
        h[24..32].copy_from_slice(&lim.to_le_bytes());
        h
    }

    /// Parse and validate 32 bytes received from an untrusted peer.
    pub fn decode(h: &[u8; HELLO_LEN]) -> Result<Hello, HelloError> {
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&h[0..8]);
        if magic != MAGIC {
            return Err(HelloError::BadMagic(magic));
        }
        let mut lim = [0u8; 8];
        lim.copy_from_slice(&h[24..32]);
        match u32_at(8) {
            KIND_STREAM => Ok(Hello::Stream {
                msg_size: check_size(u32_at(12))?,
                duration_ms: u32_at(20),
                max_bytes: u64::from_le_bytes(lim),
            }),
            KIND_RR => Ok(Hello::Rr {
                req_size: check_size(u32_at(12))?,
                rsp_size: check_size(u32_at(16))?,
                duration_ms: u32_at(20),
            }),
            KIND_UDP => {
                let size = u32_at(12);
                if size == 0 || size > MAX_DATAGRAM {
                    return Err(HelloError::BadDatagramSize(size));
                }
                Ok(Hello::Udp {
                    size,
                    test_id: u32_at(16),
                    duration_ms: u32_at(20),
                    max_datagrams: u64::from_le_bytes(lim),
                })
            }
            KIND_RECORDS => {
                let count = u64::from_le_bytes(lim);
                if !(1..=crate::records::MAX_RECORDS).contains(&count) {
                    return Err(HelloError::BadRecordCount(count));
                }
                Ok(Hello::Records {
                    size: check_size(u32_at(12))?,
                    count,
                })
            }
            k => Err(HelloError::UnknownKind(k)),
        }
    }
}

/// Saturating conversion of a duration to whole milliseconds for the hello.
pub(crate) fn duration_ms(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        for h in [
            Hello::Stream {
                msg_size: 65536,
                duration_ms: 1000,
                max_bytes: 1 << 40,
            },
            Hello::Rr {
                req_size: 1,
                rsp_size: 1,
                duration_ms: 500,
            },
            Hello::Udp {
                size: MAX_DATAGRAM,
                test_id: 0xdead_beef,
                duration_ms: 0,
                max_datagrams: 12345,
            },
            Hello::Records {
                size: MAX_MSG,
                count: crate::records::MAX_RECORDS,
            },
        ] {
            assert_eq!(Hello::decode(&h.encode()), Ok(h));
        }
        let mut b = Hello::Rr {
            req_size: 1,
            rsp_size: 1,
            duration_ms: 0,
        }
        .encode();
        b[16..20].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(Hello::decode(&b), Err(HelloError::BadSize(0)));
        let mut u = Hello::Udp {
            size: 1,
            test_id: 7,
            duration_ms: 0,
            max_datagrams: 0,
        }
        .encode();
        for bad in [0, MAX_DATAGRAM + 1] {
            u[12..16].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(Hello::decode(&u), Err(HelloError::BadDatagramSize(bad)));
        }
        let mut rec = Hello::Records { size: 1, count: 1 }.encode();
        for bad in [0, crate::records::MAX_RECORDS + 1] {
            rec[24..32].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(Hello::decode(&rec), Err(HelloError::BadRecordCount(bad)));
        }
        rec[24..32].copy_from_slice(&1u64.to_le_bytes());
        rec[12..16].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(Hello::decode(&rec), Err(HelloError::BadSize(0)));
        b[8] = 9;
        assert_eq!(Hello::decode(&b), Err(HelloError::UnknownKind(9)));
        b[0] = b'X';
        assert!(matches!(Hello::decode(&b), Err(HelloError::BadMagic(_))));
    }
}
