//! A packet inside the driver domain: a `virtio_net_hdr` worth of offload metadata plus the
//! frame bytes, in one buffer or chained. The LRO paper (Nakanjima and Oi) knows two chained forms of an LRO aggregate:
//!
//! - **skb-mode** ([`Chain::FragList`], Fig. 2(a)): the head is the first received frame, each
//!   further frame stays in its own receive buffer with its data start moved past its headers.
//!   The baseline bridge linearizes such a chain (Fig. 2(b)); BO forwards it as is.
//! - **page-mode** ([`Chain::PageFrags`]): the head holds only the headers, every segment's
//!   payload (the first one's too) is a fragment of its receive buffer. Backends have always
//!   taken fragments, so nothing linearizes it.

pub use pvnet_pnic::Buf;
use pvnet_wire::vnet::VirtioNetHdr;

/// How the buffers after the head hang together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Chain {
    /// skb-mode: a list of whole receive buffers (Linux `frag_list`).
    #[default]
    FragList,
    /// page-mode: payload fragments of receive pages (Linux `skb_shinfo()->frags`).
    PageFrags,
}

/// One buffer after the head: `buf[start..]` belongs to the packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frag {
    pub buf: Buf,
    pub start: usize,
}

impl Frag {
    pub fn whole(buf: impl Into<Buf>) -> Frag {
        Frag {
            buf: buf.into(),
            start: 0,
        }
    }

    pub fn data(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or(&[])
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    /// Offload state: checksum (NEEDS_CSUM / DATA_VALID) and GSO type and size.
    pub vnet: VirtioNetHdr,
    /// The first buffer: holds at least the Ethernet header. Buffers straight from the
    /// physical port may still sit in its ring slot ([`Buf`]).
    pub head: Buf,
    /// Further buffers of a chained packet, in order (empty for a linear packet).
    pub frags: Vec<Frag>,
    /// The form of the chain (meaningless for a linear packet).
    pub chain: Chain,
}

impl Packet {
    pub fn linear(vnet: VirtioNetHdr, data: impl Into<Buf>) -> Packet {
        Packet {
            vnet,
            head: data.into(),
            frags: Vec::new(),
            chain: Chain::FragList,
        }
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.head.len() + self.frags.iter().map(|f| f.data().len()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_chained(&self) -> bool {
        !self.frags.is_empty()
    }

    /// The buffers in order.
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.head.as_slice()).chain(self.frags.iter().map(Frag::data))
    }

    /// The whole packet as one vector (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        for p in self.pieces() {
            out.extend_from_slice(p);
        }
        out
    }

    /// Copies a chained packet into one contiguous buffer (the baseline bridge's copy).
    /// Returns the number of bytes copied (0 for a packet that already was linear).
    pub fn linearize(&mut self) -> usize {
        if self.frags.is_empty() {
            return 0;
        }
        let total = self.len();
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&self.head);
        for f in self.frags.drain(..) {
            out.extend_from_slice(f.data());
        }
        self.head = out.into();
        total
    }

    /// Moves every buffer still leased from the port's ring to the heap, handing the slots
    /// back (for a packet that is about to wait). Returns how many buffers it copied.
    pub fn detach(&mut self) -> usize {
        detach_all(&mut self.head, &mut self.frags)
    }

    /// Moves the buffer of the packet's newest frame to the heap if it is leased; returns how
    /// many buffers it copied (0 or 1). Frames join a packet in arrival order, so the newest
    /// is the last fragment, or the head when there is none: in a BO chain of 40 segments
    /// this copies one segment, not 40.
    pub fn detach_newest(&mut self) -> usize {
        usize::from(detach_newest(&mut self.head, &mut self.frags))
    }

    /// Destination MAC, when the head holds an Ethernet header.
    pub fn dst_mac(&self) -> Option<[u8; 6]> {
        self.head.get(0..6).map(|b| b.try_into().expect("6 bytes"))
    }

    /// Source MAC, when the head holds an Ethernet header.
    pub fn src_mac(&self) -> Option<[u8; 6]> {
        self.head.get(6..12).map(|b| b.try_into().expect("6 bytes"))
    }
}

/// Moves `head` and every buffer of `frags` that is still leased to the heap; returns how many
/// it copied.
pub(crate) fn detach_all(head: &mut Buf, frags: &mut [Frag]) -> usize {
    usize::from(head.detach())
        + frags
            .iter_mut()
            .map(|f| usize::from(f.buf.detach()))
            .sum::<usize>()
}

/// Moves the newest buffer (the last of `frags`, or `head` when there is none) to the heap if
/// it is leased; returns whether it did.
pub(crate) fn detach_newest(head: &mut Buf, frags: &mut [Frag]) -> bool {
    match frags.last_mut() {
        Some(f) => f.buf.detach(),
        None => head.detach(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detach_newest_copies_only_the_newest_frame() {
        use pvnet_pnic::fixture_lease;
        let leased = |p: &Packet| -> Vec<bool> {
            std::iter::once(p.head.is_leased())
                .chain(p.frags.iter().map(|f| f.buf.is_leased()))
                .collect()
        };
        // A BO chain: the first frame as head, later frames as fragments past their headers.
        let mut chain = Packet {
            vnet: VirtioNetHdr::default(),
            head: fixture_lease(b"h-first"),
            frags: vec![
                Frag {
                    buf: fixture_lease(b"hh-second"),
                    start: 3,
                },
                Frag {
                    buf: fixture_lease(b"hh-third"),
                    start: 3,
                },
            ],
            chain: Chain::FragList,
        };
        assert_eq!(chain.detach_newest(), 1);
        assert_eq!(leased(&chain), [true, true, false]);
        assert_eq!(
            chain.frags[1].data(),
            b"third",
            "the bytes survive the copy"
        );
        assert_eq!(
            chain.detach_newest(),
            0,
            "the newest frame is on the heap already"
        );
        assert_eq!(chain.detach(), 2, "detach takes the rest");
        assert_eq!(leased(&chain), [false, false, false]);
        assert_eq!(chain.linearize(), 7 + 6 + 5);
        assert_eq!(chain.head, b"h-firstsecondthird".to_vec());

        let mut linear = Packet::linear(VirtioNetHdr::default(), fixture_lease(b"frame"));
        assert_eq!(linear.detach_newest(), 1);
        assert!(!linear.head.is_leased());
        assert_eq!(linear.head, b"frame".to_vec());
    }

    #[test]
    fn linearize_keeps_bytes_and_order() {
        let mut p = Packet {
            vnet: VirtioNetHdr::default(),
            head: vec![1, 2, 3].into(),
            frags: vec![
                Frag::whole(vec![4, 5]),
                Frag::whole(vec![]),
                Frag {
                    buf: vec![9, 9, 6].into(),
                    start: 2,
                },
            ],
            chain: Chain::FragList,
        };
        assert!(p.is_chained());
        assert_eq!(p.len(), 6);
        assert_eq!(p.to_vec(), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(p.linearize(), 6);
        assert_eq!(p.head, vec![1, 2, 3, 4, 5, 6]);
        assert!(!p.is_chained());
        assert_eq!(p.linearize(), 0);
    }

    #[test]
    fn a_start_past_the_end_is_empty_not_a_panic() {
        let f = Frag {
            buf: vec![1, 2].into(),
            start: 7,
        };
        assert_eq!(f.data(), &[] as &[u8]);
    }

    #[test]
    fn macs_need_a_full_header() {
        let p = Packet::linear(VirtioNetHdr::default(), vec![0xff; 6]);
        assert_eq!(p.dst_mac(), Some([0xff; 6]));
        assert_eq!(p.src_mac(), None);
    }
}
