//! The per-frame paths of the switching alternatives allocate nothing: `Filter::check` with the
//! default rule set, `RouteTable::lookup`, and `Switch::input` in every mode once the bridge has
//! learned the addresses. Counted by a global allocator that counts this thread's allocations
//! (it is the only test in this binary, so nothing else allocates on its thread meanwhile).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use pvnet_dd::bridge::{BridgeConfig, Decision};
use pvnet_dd::nf::{Action, Filter};
use pvnet_dd::packet::Packet;
use pvnet_dd::route::RouteTable;
use pvnet_dd::switch::{vif_port, Mode, Switch, PORT_OWN, PORT_PHYSICAL};
use pvnet_wire::ethernet::MacAddr;
use pvnet_wire::VirtioNetHdr;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is passed to the system allocator unchanged; the wrapper only counts
// (in a const-initialized thread-local `Cell`, which itself never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller upholds `alloc`'s contract, which we pass on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (via `alloc` above).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocations_in(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(Cell::get);
    f();
    ALLOCS.with(Cell::get) - before
}

const REMOTE: [u8; 6] = [0x02, 0x70, 0x76, 0, 0, 0x01];
const OWN: [u8; 6] = [0x02, 0x70, 0x76, 0, 0, 0x02];
const GUEST1: [u8; 6] = [0x02, 0x70, 0x76, 0, 0, 0x0a];

/// Ethernet + IPv4 + TCP (20-byte header) + 1000 bytes of payload.
fn tcp_frame(
    dst: [u8; 6],
    src: [u8; 6],
    sip: [u8; 4],
    dip: [u8; 4],
    sport: u16,
    dport: u16,
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = 20 + 20 + 1000u16;
    f.extend_from_slice(&[
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ]);
    f.extend_from_slice(&sip);
    f.extend_from_slice(&dip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    f.extend_from_slice(&[0xab; 1000]);
    f
}

#[test]
fn per_frame_paths_do_not_allocate() {
    let to_guest = tcp_frame(GUEST1, REMOTE, [10, 77, 0, 1], [10, 77, 0, 10], 40000, 5201);
    let from_guest = tcp_frame(REMOTE, GUEST1, [10, 77, 0, 10], [10, 77, 0, 1], 5201, 40000);
    let vif1 = vif_port(1);

    let mut f = Filter::default_rules();
    let n = allocations_in(|| {
        for _ in 0..1000 {
            assert_eq!(
                f.check(PORT_PHYSICAL, vif1, &to_guest, to_guest.len())
                    .action,
                Action::Accept
            );
            assert_eq!(
                f.check(vif1, PORT_PHYSICAL, &from_guest, from_guest.len())
                    .action,
                Action::Accept
            );
        }
    });
    assert_eq!(n, 0, "Filter::check allocated");

    let mut r = RouteTable::new();
    r.set_physical(PORT_PHYSICAL).unwrap();
    r.set_own(PORT_OWN, MacAddr(OWN)).unwrap();
    r.add_vif(vif1, MacAddr(GUEST1)).unwrap();
    let n = allocations_in(|| {
        for _ in 0..1000 {
            assert_eq!(r.lookup(PORT_PHYSICAL, &to_guest), Decision::Forward(vif1));
            assert_eq!(
                r.lookup(vif1, &from_guest),
                Decision::Forward(PORT_PHYSICAL)
            );
        }
    });
    assert_eq!(n, 0, "RouteTable::lookup allocated");

    let to_guest = Packet::linear(VirtioNetHdr::default(), to_guest);
    let from_guest = Packet::linear(VirtioNetHdr::default(), from_guest);
    for mode in Mode::ALL {
        let mut s = Switch::new(mode, BridgeConfig::default());
        s.add_physical(PORT_PHYSICAL).unwrap();
        s.add_own(PORT_OWN, MacAddr(OWN)).unwrap();
        s.add_vif(vif1, MacAddr(GUEST1)).unwrap();
        s.set_static(MacAddr(GUEST1), vif1);
        // The bridge learns the remote host's MAC (an allocation the first time, as any
        // table insert); from then on nothing allocates.
        s.input(PORT_PHYSICAL, &to_guest, 0);
        let n = allocations_in(|| {
            for t in 1..1000 {
                assert_eq!(
                    s.input(PORT_PHYSICAL, &to_guest, t),
                    Decision::Forward(vif1)
                );
                assert_eq!(
                    s.input(vif1, &from_guest, t),
                    Decision::Forward(PORT_PHYSICAL)
                );
            }
        });
        assert_eq!(n, 0, "Switch::input allocated in {mode}");
    }
    // The counter does count: a Vec allocates.
    assert_eq!(
        allocations_in(|| drop(std::hint::black_box(vec![1u8; 10]))),
        1
    );
}
