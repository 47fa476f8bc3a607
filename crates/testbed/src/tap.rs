//! TAP devices (`/dev/net/tun`), optionally with `virtio_net_hdr` in front of each frame.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;

use anyhow::{bail, Context};

use crate::Result;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const TUNGETVNETHDRSZ: libc::c_ulong = 0x8004_54d7;
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;

const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
/// `IFF_NAPI` (Linux 4.15): frames written into the TAP go through a NAPI instance of the
/// device, so the kernel's GRO runs on them, as on a NIC's receive path.
const IFF_NAPI: libc::c_short = 0x0010;

/// Offload flags handed to TUNSETOFFLOAD.
pub const TUN_F_CSUM: libc::c_uint = 0x01;
/// TSO over IPv4.
pub const TUN_F_TSO4: libc::c_uint = 0x02;
/// TSO over IPv6.
pub const TUN_F_TSO6: libc::c_uint = 0x04;

/// Size of `struct virtio_net_hdr` (without `num_buffers`).
pub const VNET_HDR_LEN: usize = 10;

/// `struct ifreq` with the `ifr_flags` member of its union.
#[repr(C)]
struct IfReqFlags {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open, non-blocking TAP device; it disappears when dropped (not persistent).
#[derive(Debug)]
pub struct Tap {
    file: File,
    name: String,
    vnet_hdr: bool,
    napi: bool,
}

impl Tap {
    /// Creates (or attaches to) TAP `name` in the calling thread's namespace.
    ///
    /// `IFF_TAP | IFF_NO_PI`, plus `IFF_VNET_HDR` with offloads CSUM|TSO4|TSO6 when
    /// `vnet_hdr`; the vnet header size is set to 10. A name such as `tap%d` is completed by
    /// the kernel; [`Tap::name`] gives the result.
    pub fn open(name: &str, vnet_hdr: bool) -> Result<Tap> {
        Tap::open_with(name, vnet_hdr, false)
    }

    /// [`Tap::open`], with `IFF_NAPI` when `napi`: what is written into the TAP then passes
    /// the device's NAPI instance and its GRO (coalesced with what else that poll finds
    /// queued). A kernel without `IFF_NAPI` refuses it (EINVAL from TUNSETIFF).
    pub fn open_with(name: &str, vnet_hdr: bool, napi: bool) -> Result<Tap> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            bail!("invalid interface name {name:?}");
        }
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                bail!("no /dev/net/tun: load the tun module")
            }
            Err(e) => return Err(e).context("opening /dev/net/tun"),
        };
        let mut ifr = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags: IFF_TAP
                | IFF_NO_PI
                | if vnet_hdr { IFF_VNET_HDR } else { 0 }
                | if napi { IFF_NAPI } else { 0 },
            _pad: [0; 22],
        };
        for (d, s) in ifr.name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        let fd = file.as_raw_fd();
        // SAFETY: TUNSETIFF reads and writes back a struct ifreq; `ifr` has its layout and
        // lives across the call.
        if unsafe { libc::ioctl(fd, TUNSETIFF as _, &mut ifr as *mut IfReqFlags) } < 0 {
            return Err(io::Error::last_os_error()).with_context(|| format!("TUNSETIFF {name}"));
        }
        let len = ifr
            .name
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(libc::IFNAMSIZ);
        let actual: String = ifr.name[..len].iter().map(|&c| c as u8 as char).collect();

        let sz: libc::c_int = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which is valid.
        if unsafe { libc::ioctl(fd, TUNSETVNETHDRSZ as _, &sz as *const libc::c_int) } < 0 {
            return Err(io::Error::last_os_error()).context("TUNSETVNETHDRSZ");
        }
        if vnet_hdr {
            let off: libc::c_ulong = (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6).into();
            // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is accessed.
            if unsafe { libc::ioctl(fd, TUNSETOFFLOAD as _, off) } < 0 {
                return Err(io::Error::last_os_error()).context("TUNSETOFFLOAD");
            }
        }
        Ok(Tap {
            file,
            name: actual,
            vnet_hdr,
            napi,
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether frames carry a `virtio_net_hdr` in front.
    pub fn vnet_hdr(&self) -> bool {
        self.vnet_hdr
    }

    /// Whether the TAP was opened with `IFF_NAPI`.
    pub fn napi(&self) -> bool {
        self.napi
    }

    /// The vnet header size the kernel uses (TUNGETVNETHDRSZ).
    pub fn vnet_hdr_size(&self) -> io::Result<usize> {
        let mut sz: libc::c_int = 0;
        // SAFETY: TUNGETVNETHDRSZ writes one int through the pointer, which is valid.
        let r = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                TUNGETVNETHDRSZ as _,
                &mut sz as *mut libc::c_int,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sz as usize)
    }

    /// The device's fd (non-blocking), e.g. for epoll.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// Reads one frame (`WouldBlock` when none is queued).
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.file).read(buf)
    }

    /// Reads one frame scattered over `bufs`.
    pub fn readv(&self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&self.file).read_vectored(bufs)
    }

    /// Writes one frame gathered from `bufs`.
    pub fn writev(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&self.file).write_vectored(bufs)
    }

    /// Writes one frame.
    pub fn write(&self, buf: &[u8]) -> io::Result<usize> {
        (&self.file).write(buf)
    }
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ifreq_layout() {
        assert_eq!(
            std::mem::size_of::<super::IfReqFlags>(),
            std::mem::size_of::<libc::ifreq>()
        );
    }
}
