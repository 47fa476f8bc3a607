//! TapBatch against a real TAP: needs root (a namespace and a TAP); skips otherwise.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use pvnet_guest::netfront::RxPacket;
use pvnet_guest::tapbatch::TapBatch;
use pvnet_pnic::{Pnic, PnicConfig};
use pvnet_testbed::{link, Netns, Tap};
use pvnet_wire::vnet::VirtioNetHdr;

static N: AtomicU32 = AtomicU32::new(0);

struct NsGuard(String);
impl Drop for NsGuard {
    fn drop(&mut self) {
        let _ = pvnet_testbed::netns::delete_by_name(&self.0);
    }
}

/// An Ethernet frame of a local experimental ethertype (the stack ignores it) carrying `i`.
fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![
        0x02, 0x70, 0x76, 0, 0, 2, 0x02, 0x70, 0x76, 0, 0, 1, 0x88, 0xb5,
    ];
    f.extend_from_slice(&i.to_be_bytes());
    f.extend((0..len - f.len()).map(|k| (k as u32 ^ i) as u8));
    f
}

/// Frames of the experimental ethertype the physical-port reader (`Pnic`, an AF_PACKET ring
/// on the TAP) sees, until `want` or 2 s.
fn receive(port: &mut Pnic, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.len() < want && Instant::now() < deadline {
        let n = port.poll(256, |f| {
            if !f.truncated && f.data().len() >= 14 && f.data()[12..14] == [0x88, 0xb5] {
                got.push(f.data().to_vec());
            }
        });
        if n == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    got
}

#[test]
fn a_batch_enters_the_tap_whole_and_in_order() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipping a_batch_enters_the_tap_whole_and_in_order: needs root");
        return;
    }
    let name = format!(
        "pvnet-tb{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let _g = NsGuard(name.clone());
    let ns = Netns::create(&name).unwrap();
    let tap = ns.run(|| Tap::open("pvtap0", true).unwrap()).unwrap();
    ns.run(|| link::set_up("pvtap0", true).unwrap()).unwrap();
    let mut port = ns
        .run(|| Pnic::open(&PnicConfig::new("pvtap0")).unwrap())
        .unwrap();
    let mut batch = TapBatch::new(&tap);

    // 100 frames, some in one piece, some split in three, one with a header TUN refuses.
    let frames: Vec<Vec<u8>> = (0..100)
        .map(|i| frame(i, 60 + (i as usize * 13) % 1400))
        .collect();
    let bad = VirtioNetHdr {
        gso_type: 0x7f, // no such GSO type: the write fails with EINVAL
        ..VirtioNetHdr::default()
    };
    let splits: Vec<Vec<&[u8]>> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if i % 3 == 0 {
                let (a, rest) = f.split_at(14);
                let (b, c) = rest.split_at(rest.len() / 2);
                vec![a, b, c]
            } else {
                vec![f.as_slice()]
            }
        })
        .collect();
    let pkts: Vec<RxPacket<'_>> = splits
        .iter()
        .enumerate()
        .map(|(i, p)| RxPacket {
            hdr: if i == 50 {
                bad
            } else {
                VirtioNetHdr::default()
            },
            pieces: p,
        })
        .collect();
    let mut ok = vec![false; pkts.len()];
    batch.write(&pkts, &mut ok);
    assert!(!ok[50], "the refused header is reported");
    assert!(ok.iter().enumerate().all(|(i, o)| *o || i == 50), "{ok:?}");
    if let Some(why) = &batch.fallback {
        println!("io_uring not used here ({why}): checked the writev fallback");
    } else {
        assert_eq!((batch.batches, batch.batched_packets), (1, 100));
    }
    let got = receive(&mut port, 99);
    let want: Vec<&Vec<u8>> = frames
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 50)
        .map(|(_, f)| f)
        .collect();
    assert_eq!(got.len(), 99, "frames seen on the TAP");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, *w, "frame {k} differs or is out of order");
    }

    // A batch of one takes the plain writev path.
    let one = frame(1000, 200);
    assert!(write_alone(&mut batch, &[one.as_slice()]));
    assert_eq!(receive(&mut port, 1), vec![one]);

    // So does a packet of more pieces than its on-stack iovec holds (an aggregate the relay
    // passes as a chain: a head and up to 45 segments).
    let long = frame(1001, 1400);
    let pieces: Vec<&[u8]> = std::iter::once(&long[..14])
        .chain(long[14..].chunks(30))
        .collect();
    assert!(pieces.len() > 24, "{} pieces", pieces.len());
    assert!(
        write_alone(&mut batch, &pieces),
        "a packet of {} pieces went in",
        pieces.len()
    );
    assert_eq!(receive(&mut port, 1), vec![long]);
}

/// Writes one packet of `pieces` as a batch of its own; whether it went in whole.
fn write_alone(batch: &mut TapBatch<&Tap>, pieces: &[&[u8]]) -> bool {
    let mut ok = [false];
    batch.write(
        &[RxPacket {
            hdr: VirtioNetHdr::default(),
            pieces,
        }],
        &mut ok,
    );
    ok[0]
}
