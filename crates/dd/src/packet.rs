//! A packet inside the driver domain: a `virtio_net_hdr` worth of offload metadata plus the
//! frame bytes, either in one buffer or as a chain of buffers (seed 000's skb-mode aggregate,
//! Fig. 2(a)). The baseline bridge linearizes a chain (Fig. 2(b)); BO forwards it as is.

use pvnet_wire::vnet::VirtioNetHdr;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    /// Offload state: checksum (NEEDS_CSUM / DATA_VALID) and GSO type and size.
    pub vnet: VirtioNetHdr,
    /// The first buffer: holds at least the Ethernet header.
    pub head: Vec<u8>,
    /// Further buffers of a chained packet, in order (empty for a linear packet).
    pub chain: Vec<Vec<u8>>,
}

impl Packet {
    pub fn linear(vnet: VirtioNetHdr, data: Vec<u8>) -> Packet {
        Packet {
            vnet,
            head: data,
            chain: Vec::new(),
        }
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.head.len() + self.chain.iter().map(Vec::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_chained(&self) -> bool {
        !self.chain.is_empty()
    }

    /// The buffers in order.
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(self.head.as_slice()).chain(self.chain.iter().map(Vec::as_slice))
    }

    /// Copies a chained packet into one contiguous buffer (the baseline bridge's copy).
    /// Returns the number of bytes copied (0 for a packet that already was linear).
    pub fn linearize(&mut self) -> usize {
        if self.chain.is_empty() {
            return 0;
        }
        let total = self.len();
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&self.head);
        for c in self.chain.drain(..) {
            out.extend_from_slice(&c);
        }
        self.head = out;
        total
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linearize_keeps_bytes_and_order() {
        let mut p = Packet {
            vnet: VirtioNetHdr::default(),
            head: vec![1, 2, 3],
            chain: vec![vec![4, 5], vec![], vec![6]],
        };
        assert!(p.is_chained());
        assert_eq!(p.len(), 6);
        assert_eq!(p.linearize(), 6);
        assert_eq!(p.head, vec![1, 2, 3, 4, 5, 6]);
        assert!(!p.is_chained());
        assert_eq!(p.linearize(), 0);
    }

    #[test]
    fn macs_need_a_full_header() {
        let p = Packet::linear(VirtioNetHdr::default(), vec![0xff; 6]);
        assert_eq!(p.dst_mac(), Some([0xff; 6]));
        assert_eq!(p.src_mac(), None);
    }
}
