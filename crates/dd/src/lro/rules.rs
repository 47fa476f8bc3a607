//! The merge rules, one named predicate per line (after Linux `tcp_gro_receive`,
//! `net/ipv4/tcp_offload.c`, and `inet_gro_receive` / `ipv6_gro_receive`), and the flush
//! reasons they share with the policies.
//!
//! Three tables, applied in this order to a TCP frame that parsed:
//! 1. [`FRAME_RULES`]: properties of the frame alone. A frame failing one is never merged: its
//!    flow's held aggregate leaves first, then the frame passes through exactly as it came.
//! 2. [`MATCH_RULES`]: the frame against its flow's held aggregate. The first failing rule
//!    flushes the aggregate; the frame then starts a new one.
//! 3. [`END_RULES`]: after the frame merged, these end the aggregate (it leaves at once). A
//!    segment that would end an aggregate of its own (PSH, FIN) is not held either.
//!
//! Frames that do not parse are refused before the tables, by the parser's verdict
//! ([`Reason::of_parse_error`]); they belong to no flow, so nothing held leaves for them.
//!
//! # Parity with Linux GRO
//!
//! Reference: Linux 6.1 and mainline (6.17): `net/core/gro.c` (`dev_gro_receive`,
//! `gro_list_prepare`, `skb_gro_receive`), `net/ipv4/af_inet.c` (`inet_gro_receive`),
//! `net/ipv6/ip6_offload.c` (`ipv6_gro_receive`, `ipv6_gro_pull_exthdrs`),
//! `net/ipv6/exthdrs_offload.c`, `net/ipv4/tcp_offload.c` and `tcp_ipv6`'s `tcp6_gro_receive`
//! (`tcp_gro_receive`, `tcp[46]_gro_receive`), `include/net/gro.h` (`inet_gro_flush`,
//! `ipv6_gro_flush`, the checksum helpers). Linux's vocabulary: *flush* a held packet `p` (it
//! is completed and goes up), *not the same flow* (`p` stays held, the new packet is compared
//! with the others or held on its own), the new packet *normal* (it goes up unmerged, after
//! any `p` flushed for it).
//!
//! Where Linux merges, pvnet merges; where Linux refuses, pvnet refuses. Case by case, with
//! the counter that moves and the crafted-frame tests in `tests/lro_rules.rs`:
//!
//! | Case | Linux | pvnet |
//! |---|---|---|
//! | IPv4 options (IHL > 5) | `inet_gro_receive`: not `0x45`, normal | refused, `ip_options` (test `ip_options`) |
//! | IPv4 fragment (MF, offset) | normal | refused, no flow, `ip_fragment` (test `ip_fragment`) |
//! | IPv4 reserved flag bit | frag word `& ~DF` flushes | refused, `ip_reserved_bit` (test `ip_reserved_bit`) |
//! | IPv4 header checksum bad | normal | refused, `bad_checksum` (test `bad_ip_header_checksum`) |
//! | IP length ≠ frame (Ethernet padding, trailer) | `tot_len` / `payload_len` ≠ packet length flushes | refused, `ip_length` (test `ip_length_padded_frames_are_refused`) |
//! | IPv6 hop-by-hop, routing, destination options (any number, any order) | walked over (`INET6_PROTO_GSO_EXTHDR`, hop-by-hop since 6.0) | walked over (test `ipv6_ext_headers_merge_and_resegment_byte_for_byte`) |
//! | IPv6 fragment, AH, ESP, mobility, other next headers | no TCP handler behind them: normal | refused, no flow, `ipv6_ext_header` (test `ipv6_ext_header`) |
//! | IPv6 jumbogram (payload length 0) | `payload_len` ≠ length flushes | refused, no flow, `malformed` (test `ipv6_jumbogram_is_malformed`) |
//! | SYN, RST, URG | never held, so the flag comparison fails; `out_check_final` flushes | refused, `tcp_flags` (test `tcp_flags`) |
//! | No payload (pure ACK, pure FIN) | `(len - 1) >= mss` flushes | refused, `no_payload` (tests `no_payload`, `lone_fin_leaves_at_once_and_pure_fin_is_refused`) |
//! | TCP checksum | verified unless `CHECKSUM_UNNECESSARY` or `CHECKSUM_PARTIAL` from the TCP header on; bad: normal | same with `DATA_VALID` / `NEEDS_CSUM` (`csum_start` ≥ TCP), `bad_checksum` (tests `bad_tcp_checksum`, `trusted_checksums_merge_unverified`, `needs_csum_before_the_tcp_header_is_verified`) |
//! | MAC addresses differ | `gro_list_prepare`: not the same flow | flush, `eth_header` (test `eth_header`) |
//! | IPv6 flow label or extension header bytes differ | not the same flow (`memcmp` of the chain) | flush, `ipv6_headers` (test `ipv6_headers_*`) |
//! | TTL / hop limit differs | flush (IPv6 in some versions: not the same flow) | flush, `ttl` (test `ttl`) |
//! | TOS / traffic class differs (ECN bits too) | flush | flush, `tos` (test `tos`) |
//! | DF differs | flush | flush, `df` (test `df`) |
//! | IPv4 ID | first + count, or (DF, chosen by the second segment) fixed | the same, `ip_id` (tests `ip_id`, `ip_id_fixed_with_df_merges_without_df_breaks`, `ip_id_step_is_kept`) |
//! | CWR on the new segment | flush; it may be held on its own | flush, held alone, `cwr` (tests `cwr`, `cwr_segment_is_held_alone`) |
//! | Flag word: data offset, reserved bits (AE), flags but FIN and PSH | differ: flush | flush, `flags_differ` (tests `flags_differ_*`, `equal_unusual_flags_merge`) |
//! | Window | part of the flag word: flush | flush, `window` (test `window`) |
//! | TCP options | compared word by word: flush | flush, `tcp_options` (test `tcp_options`) |
//! | ACK number | flush | flush, `ack` (test `ack`) |
//! | Sequence number not the next | flush | flush, `seq` (tests `seq_gap`, `seq_duplicate`) |
//! | Payload larger than the first segment's | `(len - 1) >= mss` flushes | flush, `segment_size` (test `segment_size`) |
//! | IP packet would exceed 65535 bytes | `skb_gro_receive`: `p->len + len >= gro_max_size` (65536) | flush, `size_limit` (tests `size_limit_exact_boundary`, `size_limit_64k`) |
//! | PSH | merged, then flushed | merged, ends, `psh` (tests `psh_merges_then_ends`, `lone_psh_leaves_at_once`) |
//! | FIN (with data) | merged (FIN ORed into the head), then flushed | merged, ends, `fin` (tests `fin_merges_then_ends`, `lone_fin_leaves_at_once_and_pure_fin_is_refused`) |
//! | Payload shorter than the first segment's | merged, then flushed | merged, ends, `short_segment` (test `short_segment`) |
//!
//! The size boundary in bytes: `p->len` is the held IP packet (from the first byte of the IP
//! header; the MAC header was pulled), `len` the new segment's TCP payload, and the merge is
//! refused when their sum reaches `gro_max_size` (`gro_ipv4_max_size` for IPv4), both 65536
//! (`GRO_LEGACY_MAX_SIZE`) by default. So an aggregate's IP packet may be 65535 bytes and not
//! one more, with IPv4 or IPv6, options or extension headers included: an IPv6 aggregate's
//! payload length is at most 65495 (65535 − 40).
//!
//! ## Remaining differences, and why
//!
//! | Case | Linux | pvnet | Why |
//! |---|---|---|---|
//! | A refused packet of a flow with a held aggregate, refused before the flow lookup (IPv4 options, bad IPv4 header or TCP checksum) | the held packet stays; the refused one goes up first (the flow is reordered) | the aggregate leaves first | The contract keeps per-flow order; TCP would count the reordering as a duplicate ACK / loss hint. Tests: `ip_options`, `bad_tcp_checksum` |
//! | Same 4-tuple, different MACs, flow label or extension headers | not the same flow: both stay held side by side | the held aggregate leaves, the new segment starts one | One aggregate per 4-tuple (the flow table is keyed by it); the merges Linux could still make after such a segment are rare (the next segment of the old one has the wrong sequence number anyway). Tests: `eth_header`, `ipv6_headers_*` |
//! | A CWR segment followed by segments without CWR | 6.1 merges them behind it (CWR masked from the comparison, the aggregate marked `SKB_GSO_TCP_ECN`); mainline (with AccECN GSO) compares CWR: no merge | no merge (as mainline) | `virtio_net_hdr` output would need the ECN GSO bit and every consumer to honour it; the CWR segment stays as sent. Test: `cwr_segment_is_held_alone` |
//! | Segment count | no limit but the size (beyond `MAX_SKB_FRAGS` a frag list) | at most [`super::MAX_SEGS`] (64): binds only below 1023 payload bytes per segment | One fragment per segment, bounded per packet: the aggregate's fragment vector is sized once. Test: `size_limit_segment_count` |
//! | Already a GSO packet | a TCP GSO packet not marked `DODGY` is merged when its `gso_size` equals the aggregate's; `DODGY` ones (what TAP and packet sockets inject, `virtio_net_hdr_to_skb`) flush | refused, `gso_input` | The port's GSO frames are aggregates already (the kernel built them); merging aggregates would need per-packet segment counts. Test: `gso_input` |
//! | BIG TCP (`gro_max_size` raised above 65536) | IPv6 aggregates up to that size, with a jumbo hop-by-hop header | never above 65535 | The guest path (netif, `virtio_net_hdr`) carries 16-bit lengths; no jumbograms. |
//! | IPv4 fixed-ID aggregates | marked `SKB_GSO_TCP_FIXEDID`: re-segmentation keeps the ID | no such bit in `virtio_net_hdr`: [`super::segment`] numbers IDs + 1 | With DF set (the only case a fixed ID merges) the ID carries nothing (RFC 6864). |
//! | 802.1Q-tagged frames in the data | `vlan_gro_receive` merges them | refused, no flow, `not_tcp` | The ports are untagged; a tag is the bridge's business. Test: `flow::tests::reject_vlan` |
//! | UDP | `udp_gro_receive` for sockets with `UDP_GRO` and tunnels | refused, no flow, `not_tcp` | LRO here is TCP only. Test: `not_tcp_udp` |
//! | How many flows are held | 8 per hash bucket, 8 buckets; the oldest of a full bucket is flushed | [`super::Config::max_flows`] (32); the oldest is evicted, `eviction` | One table, no receive hash; see `tests/lro_policy.rs` |
//! | When held packets leave | at the end of the NAPI poll, or by `gro_flush_timeout` | the policies of the module documentation | Not a merge rule. |
//! | TLS device offload, socket / conntrack / TC metadata (`slow_gro`) | compared | not present | No such state on a driver domain port. |
//!
//! A routing header with segments left is merged like any other chain, as in Linux; the TCP
//! checksum is checked (and the aggregate's seed computed) with the IPv6 header's destination,
//! as `tcp6_gro_receive` / `tcp6_gro_complete` do, not with the final address in the routing
//! header.

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
