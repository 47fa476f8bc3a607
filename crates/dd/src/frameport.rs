//! The driver domain's packet frames: a pool of machine frames ([`pvnet_hv::frames`]) that
//! the physical port receives into ([`pvnet_pnic::Pnic::open_frames`]) and that netback's
//! `flip` mechanism hands to guests.
//!
//! In Xen the NIC wrote each packet into a page of the driver domain; netback then chose to
//! copy it into the guest's page (grant copy) or to give the page away (page flip). The pool
//! gives pvnet the same starting point for both, so neither is charged a copy Xen did not
//! make: a run whose port is in frame mode receives every frame into one of these pages, and
//! `copy` then grant-copies out of it while `flip` transfers it.
//!
//! The pool is the driver domain's flip window: pfn `i` of [`DomId::DRIVER`]'s P2M is buffer
//! `i`. A flip exchanges the frame behind a buffer for one of the guest's, in place, so the
//! buffer id stays valid: when the packet that held it is dropped, the buffer (now backed by
//! the guest's old frame) is free again.

use std::io;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use pvnet_hv::frames::{FrameWindow, Machine};
use pvnet_hv::grant::Hypervisor;
use pvnet_hv::{DomId, Pfn};
use pvnet_pnic::FrameSource;

/// Default number of driver-domain frames: a port batch for every slot of two RX rings, and
/// room for the packets waiting in the guests' queues.
pub const DEFAULT_POOL_FRAMES: u32 = 2048;

/// The driver domain's pool of packet frames.
pub struct FramePool {
    window: FrameWindow,
    free: Mutex<Vec<u32>>,
}

impl std::fmt::Debug for FramePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramePool")
            .field("frames", &self.window.pages())
            .field("free", &self.free())
            .finish()
    }
}

impl FramePool {
    /// Gives the driver domain `frames` machine frames of `hv`'s machine and maps them.
    pub fn new(hv: &Hypervisor, frames: u32) -> io::Result<Arc<FramePool>> {
        let m: &Arc<Machine> = hv
            .machine()
            .ok_or_else(|| io::Error::other("the hypervisor has no machine frames"))?;
        let p2m = m
            .add_domain(DomId::DRIVER, 0, frames)
            .map_err(io::Error::other)?;
        let window = FrameWindow::new(m.fd(), 0, &p2m)?;
        Ok(Arc::new(FramePool {
            window,
            free: Mutex::new((0..frames).rev().collect()),
        }))
    }

    /// The driver domain's window (what [`Hypervisor::transfer`] gives from).
    pub fn window(&self) -> &FrameWindow {
        &self.window
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a free frame for a packet that did not arrive in one (netback copies it in
    /// before a flip).
    pub fn take_frame(&self) -> Option<(u32, *mut u8)> {
        let id = self.lock().pop()?;
        Some((id, self.window.ptr(Pfn(id)).expect("ids are window pfns")))
    }
}

impl FrameSource for FramePool {
    fn take(&self) -> Option<(u32, NonNull<u8>)> {
        let (id, p) = self.take_frame()?;
        Some((id, NonNull::new(p).expect("mapped page")))
    }

    fn give_back(&self, id: u32) {
        debug_assert!(id < self.window.pages());
        self.lock().push(id);
    }

    fn free(&self) -> usize {
        self.lock().len()
    }

    fn total(&self) -> usize {
        self.window.pages() as usize
    }
}
