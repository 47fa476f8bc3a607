//! Offload switches through the legacy `SIOCETHTOOL` ioctl (`struct ethtool_value`).
//!
//! The ioctl goes through an AF_INET datagram socket opened in the calling thread's
//! network namespace, so it reaches the interfaces of that namespace.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use anyhow::{bail, Context};

use crate::Result;

const SIOCETHTOOL: libc::c_ulong = 0x8946;

/// An offload feature reachable with the legacy ethtool get/set commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// TCP segmentation offload.
    Tso,
    /// Generic segmentation offload.
    Gso,
    /// Generic receive offload.
    Gro,
    /// TX checksum offload.
    TxCsum,
    /// RX checksum offload.
    RxCsum,
    /// Scatter-gather.
    Sg,
}

impl Feature {
    /// (get command, set command).
    fn cmds(self) -> (u32, u32) {
        match self {
            Feature::Tso => (0x1e, 0x1f),
            Feature::Gso => (0x23, 0x24),
            Feature::Gro => (0x2b, 0x2c),
            Feature::TxCsum => (0x16, 0x17),
            Feature::RxCsum => (0x14, 0x15),
            Feature::Sg => (0x18, 0x19),
        }
    }
}

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// `struct ifreq` with the `ifr_data` member of its union (40 bytes on 64-bit Linux).
#[repr(C)]
struct IfReqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 24 - std::mem::size_of::<*mut libc::c_void>()],
}

fn ifname_bytes(ifname: &str) -> Result<[libc::c_char; libc::IFNAMSIZ]> {
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        bail!("invalid interface name {ifname:?}");
    }
    let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
    for (d, s) in name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(name)
}

fn ethtool_value(ifname: &str, cmd: u32, data: u32) -> Result<u32> {
    let name = ifname_bytes(ifname)?;
    // SAFETY: plain socket(2) call; the returned fd is checked and owned below.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error()).context("socket(AF_INET, SOCK_DGRAM)");
    }
    // SAFETY: `raw` is a fresh, valid fd that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut val = EthtoolValue { cmd, data };
    let mut ifr = IfReqData {
        name,
        data: (&mut val as *mut EthtoolValue).cast(),
        _pad: [0; 24 - std::mem::size_of::<*mut libc::c_void>()],
    };
    // SAFETY: SIOCETHTOOL reads an ifreq whose ifr_data points to an ethtool_value; both
    // live on this stack frame for the duration of the call and have the kernel's layout.
    let r = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            SIOCETHTOOL as _,
            &mut ifr as *mut IfReqData,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENODEV) {
            bail!("no such interface {ifname}");
        }
        return Err(e).with_context(|| format!("SIOCETHTOOL cmd {cmd:#x} on {ifname}"));
    }
    Ok(val.data)
}

/// Turns `f` on or off on `ifname` (in the calling thread's namespace).
pub fn set_feature(ifname: &str, f: Feature, on: bool) -> Result<()> {
    ethtool_value(ifname, f.cmds().1, u32::from(on)).with_context(|| {
        format!(
            "setting {f:?} {} on {ifname}",
            if on { "on" } else { "off" }
        )
    })?;
    Ok(())
}

/// Reads whether `f` is on for `ifname` (in the calling thread's namespace).
pub fn get_feature(ifname: &str, f: Feature) -> Result<bool> {
    Ok(ethtool_value(ifname, f.cmds().0, 0)? != 0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn ifreq_layout() {
        assert_eq!(std::mem::size_of::<super::IfReqData>(), 40);
        assert_eq!(
            std::mem::size_of::<super::IfReqData>(),
            std::mem::size_of::<libc::ifreq>()
        );
    }
}
