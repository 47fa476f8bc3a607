//! The merge rules, one named predicate per line (after Linux `tcp_gro_receive`,
//! `net/ipv4/tcp_offload.c`, and `inet_gro_receive` / `ipv6_gro_receive`), and the flush
//! reasons they share with the policies.
//!
//! Three tables, applied in this order to a TCP frame that parsed:
//! 1. [`FRAME_RULES`]: properties of the frame alone. A frame failing one is never merged: its
//!    flow's held aggregate leaves first, then the frame passes through exactly as it came.
//! 2. [`MATCH_RULES`]: the frame against its flow's held aggregate. The first failing rule
//!    flushes the aggregate; the frame then starts a new one.
//! 3. [`END_RULES`]: after the frame merged, these end the aggregate (it leaves at once).
//!
//! Frames that do not parse are refused before the tables, by the parser's verdict
//! ([`Reason::of_parse_error`]).

use pvnet_wire::checksum;
use pvnet_wire::flow::TcpMeta;
use pvnet_wire::vnet::{VirtioNetHdr, GSO_NONE};
use std::net::IpAddr;

use pvnet_wire::{ipv4, Error, TcpFlags};
use serde::Serialize;

use super::agg::Agg;

/// Defines [`Reason`], its names and [`FlushCounts`] (one `u64` per reason, serialized under
/// the reason's name) from a single list, so that they cannot drift apart.
macro_rules! reasons {
    ($($(#[doc = $doc:literal])* $var:ident => $name:ident,)*) => {
        /// Why a frame was not merged or why an aggregate left the flow table.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $($(#[doc = $doc])* $var,)*
        }

        impl Reason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [Reason] = &[$(Reason::$var,)*];

            /// The counter name (as in `pvnet stat` and the benchmark JSON).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Reason::$var => stringify!($name),)*
                }
            }
        }

        /// One counter per [`Reason`]. A merge rule counts the frames it refused or that broke
        /// an aggregate there (one event, whatever was flushed with it); a policy reason counts
        /// the aggregates that left for it.
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct FlushCounts {
            $(pub $name: u64,)*
        }

        impl FlushCounts {
            pub(crate) fn from_array(a: &[u64; N_REASONS]) -> FlushCounts {
                let mut i = 0..;
                let mut next = || a[i.next().unwrap_or(0)];
                FlushCounts { $($name: next(),)* }
            }

            /// The counter of `r`.
            pub fn get(&self, r: Reason) -> u64 {
                match r {
                    $(Reason::$var => self.$name,)*
                }
            }
        }
    };
}

reasons! {
    // ---- frames that never merge (pass through)
    /// Truncated, a length field past the frame, IHL or TCP data offset below 5.
    Malformed => malformed,
    /// Not IP (ARP, VLAN-tagged, ...) or not TCP.
    NotTcp => not_tcp,
    /// An IPv4 fragment.
    IpFragment => ip_fragment,
    /// IPv4 header options.
    IpOptions => ip_options,
    /// An IPv6 extension header that Linux GRO does not walk over (fragment, AH, ESP,
    /// mobility, ...) before TCP.
    Ipv6ExtHeader => ipv6_ext_header,
    /// The port handed over a frame that already is a GSO packet.
    GsoInput => gso_input,
    /// Bytes after the IP packet (Ethernet padding of a short frame, a trailer): the IP length
    /// is not the frame's.
    IpLength => ip_length,
    /// The IPv4 reserved flag bit is set.
    IpReservedBit => ip_reserved_bit,
    /// SYN, RST or URG.
    TcpFlags => tcp_flags,
    /// No payload (pure ACK).
    NoPayload => no_payload,
    /// Bad IPv4 header checksum, or bad TCP checksum where the metadata does not vouch for it.
    BadChecksum => bad_checksum,
    // ---- a segment that does not continue its flow's aggregate (flush, start a new one)
    /// Different Ethernet header (MAC addresses).
    EthHeader => eth_header,
    /// Different IPv6 flow label or extension header bytes.
    Ipv6Headers => ipv6_headers,
    /// Different TTL / hop limit.
    Ttl => ttl,
    /// Different TOS / traffic class (ECN bits included).
    Tos => tos,
    /// Different DF bit.
    Df => df,
    /// IPv4 ID neither the previous + 1 nor (with DF) fixed.
    IpId => ip_id,
    /// CWR set: a segment with CWR never joins an aggregate (it may start one).
    Cwr => cwr,
    /// Different TCP flags (other than FIN and PSH), reserved bits or data offset.
    FlagsDiffer => flags_differ,
    /// Different TCP window.
    Window => window,
    /// Different TCP option bytes.
    TcpOptions => tcp_options,
    /// Different ACK number.
    Ack => ack,
    /// Not the next sequence number (gap, duplicate, reordering).
    Seq => seq,
    /// More payload than the aggregate's segment size (its first segment's).
    SegmentSize => segment_size,
    /// The aggregate's IP packet would pass [`super::MAX_IP_PACKET`] bytes or the aggregate
    /// [`super::MAX_SEGS`] segments (and, with the adaptive policy, an aggregate without room
    /// for another segment).
    SizeLimit => size_limit,
    // ---- a segment that merges and ends its aggregate
    /// PSH set.
    Psh => psh,
    /// FIN set.
    Fin => fin,
    /// Less payload than the aggregate's segment size.
    ShortSegment => short_segment,
    // ---- policies
    /// End of a poll (`poll`).
    Poll => poll,
    /// Every N-th poll (`every:N`).
    Every => every,
    /// The first segment waited the policy's timeout (`timeout:USEC`).
    Timeout => timeout,
    /// The adaptive policy let it go (flow not streaming, or its next segment is late).
    Adaptive => adaptive,
    /// Held for [`super::HOLD_LIMIT_US`].
    HoldLimit => hold_limit,
    /// The port was not polled for [`super::IDLE_FLUSH_US`].
    Idle => idle,
    /// Flow table full: the oldest aggregate made room for a new flow.
    Eviction => eviction,
    /// `set_mode`.
    Reconfigure => reconfigure,
    /// `flush_all`.
    Shutdown => shutdown,
}

/// Number of reasons.
pub const N_REASONS: usize = Reason::ALL.len();

impl Reason {
    /// The reason for a frame that `parse_tcp` rejected.
    pub fn of_parse_error(e: Error) -> Reason {
        match e {
            Error::Vlan | Error::NotIp | Error::NotTcp => Reason::NotTcp,
            Error::Fragment => Reason::IpFragment,
            Error::Ipv6ExtHeader => Reason::Ipv6ExtHeader,
            Error::Truncated
            | Error::BadIpVersion
            | Error::BadIhl
            | Error::BadTotalLen
            | Error::BadTcpHeaderLen
            | Error::ChecksumOutOfRange => Reason::Malformed,
        }
    }
}

/// A received frame that parsed as TCP, with its receive metadata.
pub struct Seg<'a> {
    pub meta: TcpMeta,
    pub frame: &'a [u8],
    pub vnet: VirtioNetHdr,
}

/// `true` when the frame passes the rule.
pub type FrameRule = fn(&Seg) -> bool;
/// `true` when the segment may continue the aggregate.
pub type MatchRule = fn(&Agg, &Seg) -> bool;
/// `true` when the aggregate must end with this (merged) segment.
pub type EndRule = fn(&Agg, &Seg) -> bool;

/// Flags that keep a segment from merging and from being held (`tcp_gro_receive`: a held
/// packet never has them, so the flag comparison fails, and `out_check_final` flushes).
const FORBIDDEN: TcpFlags =
    TcpFlags(TcpFlags::SYN.bits() | TcpFlags::RST.bits() | TcpFlags::URG.bits());

/// Flags that may differ between the segments of an aggregate (`tcp_gro_receive` masks them
/// out of the flag word comparison and ORs them into the head).
const MAY_DIFFER: u8 = TcpFlags::FIN.bits() | TcpFlags::PSH.bits();

/// IPv4 reserved flag bit (byte 6 of the header).
const IP_RESERVED_BIT: u8 = 0x80;

/// Rules on the frame alone, cheapest first (the checksum, which may sum the payload, last).
pub const FRAME_RULES: &[(Reason, FrameRule)] = &[
    (Reason::GsoInput, |s| s.vnet.gso_type == GSO_NONE),
    (Reason::IpOptions, |s| !s.meta.ip_options),
    (Reason::IpLength, |s| s.frame.len() == s.meta.l3_end()),
    (Reason::IpReservedBit, |s| {
        s.meta.is_ipv6() || s.frame[s.meta.l3_off + 6] & IP_RESERVED_BIT == 0
    }),
    (Reason::TcpFlags, |s| !s.meta.flags.intersects(FORBIDDEN)),
    (Reason::NoPayload, |s| s.meta.payload_len > 0),
    (Reason::BadChecksum, checksums_ok),
];

/// Rules of a segment against its flow's held aggregate, in `tcp_gro_receive` order.
pub const MATCH_RULES: &[(Reason, MatchRule)] = &[
    (Reason::EthHeader, |a, s| {
        a.macs() == s.frame.get(..12).unwrap_or(&[])
    }),
    (Reason::Ipv6Headers, |a, s| {
        a.flow_label == s.meta.flow_label && a.ip6_ext() == s.meta.ip6_ext_bytes(s.frame)
    }),
    (Reason::Ttl, |a, s| a.ttl == s.meta.ttl),
    (Reason::Tos, |a, s| a.tos == s.meta.tos),
    (Reason::Df, |a, s| a.df == s.meta.df),
    (Reason::IpId, |a, s| {
        a.ip_id_continues(s.meta.ip_ident, s.meta.df)
    }),
    (Reason::Cwr, |_, s| !s.meta.flags.contains(TcpFlags::CWR)),
    (Reason::FlagsDiffer, |a, s| {
        let [off, flags] = a.tcp_word();
        let l4 = s.meta.l4_off;
        off == s.frame[l4 + 12] && (flags ^ s.frame[l4 + 13]) & !MAY_DIFFER == 0
    }),
    (Reason::Window, |a, s| a.window == s.meta.window),
    (Reason::TcpOptions, |a, s| {
        a.options() == s.meta.options(s.frame)
    }),
    (Reason::Ack, |a, s| a.ack == s.meta.ack),
    (Reason::Seq, |a, s| a.next_seq == s.meta.seq),
    (Reason::SegmentSize, |a, s| s.meta.payload_len <= a.mss),
    (Reason::SizeLimit, |a, s| a.fits(s.meta.payload_len)),
];

/// Rules that end an aggregate after a segment merged into it.
pub const END_RULES: &[(Reason, EndRule)] = &[
    (Reason::Psh, |_, s| s.meta.flags.contains(TcpFlags::PSH)),
    (Reason::Fin, |_, s| s.meta.flags.contains(TcpFlags::FIN)),
    (Reason::ShortSegment, |a, s| s.meta.payload_len < a.mss),
];

/// The first frame rule that `s` fails.
pub fn refuse(s: &Seg) -> Option<Reason> {
    FRAME_RULES.iter().find(|(_, ok)| !ok(s)).map(|&(r, _)| r)
}

/// The first match rule that `s` fails against `a`.
pub fn mismatch(a: &Agg, s: &Seg) -> Option<Reason> {
    MATCH_RULES
        .iter()
        .find(|(_, ok)| !ok(a, s))
        .map(|&(r, _)| r)
}

/// The first end rule that fires for `s`, merged into `a`.
pub fn ends(a: &Agg, s: &Seg) -> Option<Reason> {
    END_RULES.iter().find(|(_, end)| end(a, s)).map(|&(r, _)| r)
}

/// The TCP checksum needs no verification here: `DATA_VALID` (verified by the kernel), or
/// `NEEDS_CSUM` starting at or after the TCP header (a local sender's partial checksum: the
/// field holds only the pseudo-header seed). Linux `__skb_gro_checksum_validate_needed`
/// (`CHECKSUM_UNNECESSARY`, or `CHECKSUM_PARTIAL` with `csum_start` not before the transport
/// header).
pub fn trusted(vnet: &VirtioNetHdr, meta: &TcpMeta) -> bool {
    vnet.data_valid() || (vnet.needs_csum() && usize::from(vnet.csum_start) >= meta.l4_off)
}

/// The IPv4 header checksum always (as `inet_gro_receive` does), the TCP checksum unless
/// [`trusted`]. The TCP pseudo-header has the addresses of the IP header (for IPv6 the
/// destination field, as `tcp6_gro_receive` computes it, whatever a routing header holds).
fn checksums_ok(s: &Seg) -> bool {
    let m = &s.meta;
    let Some(tcp) = s.frame.get(m.l4_off..m.l3_end()) else {
        return false;
    };
    let Ok(len) = u32::try_from(tcp.len()) else {
        return false;
    };
    let sum_ok =
        |pseudo: u32| checksum::fold(checksum::combine(pseudo, checksum::sum(tcp))) == 0xffff;
    let trusted = trusted(&s.vnet, m);
    match (m.key.src, m.key.dst) {
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            trusted || sum_ok(checksum::pseudo_header_v6(src, dst, ipv4::PROTO_TCP, len))
        }
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let ip = s.frame.get(m.l3_off..m.l3_end()).unwrap_or(&[]);
            ipv4::Packet::new_checked(ip).is_ok_and(|p| p.verify_checksum())
                && (trusted || sum_ok(checksum::pseudo_header_v4(src, dst, ipv4::PROTO_TCP, len)))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_counts_round_trip() {
        let mut names: Vec<_> = Reason::ALL.iter().map(|r| r.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), N_REASONS);
        let mut a = [0u64; N_REASONS];
        for (i, v) in a.iter_mut().enumerate() {
            *v = i as u64 + 1;
        }
        let c = FlushCounts::from_array(&a);
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(c.get(*r), i as u64 + 1, "{}", r.name());
        }
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["bad_checksum"], serde_json::json!(c.bad_checksum));
        assert_eq!(json.as_object().unwrap().len(), N_REASONS);
    }

    #[test]
    fn parse_errors_map_to_reasons() {
        assert_eq!(Reason::of_parse_error(Error::NotIp), Reason::NotTcp);
        assert_eq!(Reason::of_parse_error(Error::Vlan), Reason::NotTcp);
        assert_eq!(Reason::of_parse_error(Error::Fragment), Reason::IpFragment);
        assert_eq!(
            Reason::of_parse_error(Error::Ipv6ExtHeader),
            Reason::Ipv6ExtHeader
        );
        assert_eq!(Reason::of_parse_error(Error::BadIhl), Reason::Malformed);
        assert_eq!(
            Reason::of_parse_error(Error::BadTcpHeaderLen),
            Reason::Malformed
        );
    }
}
