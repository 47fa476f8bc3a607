//! sysfs and sysctl access inside a network namespace.
//!
//! sysfs shows the network devices of the namespace of whoever mounted it, so
//! [`with_sysfs_in`] mounts a fresh sysfs from a thread that has entered the namespace and
//! unshared its mount namespace. `/proc/sys/net` follows the network namespace of the calling
//! thread (checked by the tests), so sysctls are read and written from a thread inside `ns`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};

use crate::netns::Netns;
use crate::Result;

/// Runs `f` with the root of a sysfs that shows the devices of `ns`.
///
/// `f` runs in a thread that has entered `ns` and has a private mount namespace of its own;
/// the sysfs mount is invisible to the rest of the system and is removed afterwards.
pub fn with_sysfs_in<F, R>(ns: &Netns, f: F) -> Result<R>
where
    F: FnOnce(&Path) -> Result<R> + Send,
    R: Send,
{
    ns.run(|| -> Result<R> {
        let tmp = make_temp_dir()?;
        let res = (|| -> Result<R> {
            unshare(CloneFlags::CLONE_NEWNS).context("unshare(CLONE_NEWNS)")?;
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .context("making / private")?;
            mount(
                Some("sysfs"),
                &tmp,
                Some("sysfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                None::<&str>,
            )
            .with_context(|| format!("mounting sysfs on {}", tmp.display()))?;
            let r = f(&tmp);
            let u = umount2(&tmp, MntFlags::MNT_DETACH);
            let r = r?;
            u.map_err(|e| anyhow!(e))
                .with_context(|| format!("unmounting {}", tmp.display()))?;
            Ok(r)
        })();
        let _ = fs::remove_dir(&tmp);
        res
    })?
}

fn make_temp_dir() -> Result<PathBuf> {
    let base = std::env::temp_dir();
    for i in 0..100u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = base.join(format!("pvnet-sysfs-{}-{nanos:x}-{i}", std::process::id()));
        match fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", p.display())),
        }
    }
    bail!(
        "could not create a temporary directory in {}",
        base.display()
    )
}

fn rps_path(root: &Path, ifname: &str, queue: u32) -> Result<PathBuf> {
    Ok(dev_path(root, ifname)?.join(format!("queues/rx-{queue}/rps_cpus")))
}

fn dev_path(root: &Path, ifname: &str) -> Result<PathBuf> {
    if ifname.is_empty() || ifname.contains('/') || ifname == "." || ifname == ".." {
        bail!("invalid interface name {ifname:?}");
    }
    let dev = root.join("class/net").join(ifname);
    if !dev.exists() {
        bail!("no such interface {ifname}");
    }
    Ok(dev)
}

fn parse_mask(s: &str) -> Result<u32> {
    let hex: String = s.trim().chars().filter(|&c| c != ',').collect();
    let hex = hex.trim_start_matches('0');
    if hex.is_empty() {
        return Ok(0);
    }
    u32::from_str_radix(hex, 16).with_context(|| format!("bad CPU mask {s:?}"))
}

/// Sets the RPS CPU mask of receive queue `queue` of `ifname` inside `ns`, and checks it by
/// reading it back.
pub fn set_rps_cpus(ns: &Netns, ifname: &str, queue: u32, mask: u32) -> Result<()> {
    with_sysfs_in(ns, |root| {
        let p = rps_path(root, ifname, queue)?;
        fs::write(&p, format!("{mask:x}\n"))
            .with_context(|| format!("writing rps_cpus of {ifname} rx-{queue}"))?;
        let got = parse_mask(&fs::read_to_string(&p)?)?;
        if got != mask {
            bail!("rps_cpus of {ifname} rx-{queue} reads back {got:#x}, wanted {mask:#x}");
        }
        Ok(())
    })
}

/// Reads the RPS CPU mask of receive queue `queue` of `ifname` inside `ns`.
pub fn get_rps_cpus(ns: &Netns, ifname: &str, queue: u32) -> Result<u32> {
    with_sysfs_in(ns, |root| {
        let p = rps_path(root, ifname, queue)?;
        parse_mask(&fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?)
    })
}

/// Makes the NAPI instances of `ifname` inside `ns` kernel threads
/// (`/sys/class/net/IF/threaded`), and checks it by reading it back.
pub fn set_napi_threaded(ns: &Netns, ifname: &str) -> Result<()> {
    with_sysfs_in(ns, |root| {
        let p = dev_path(root, ifname)?.join("threaded");
        fs::write(&p, "1\n").with_context(|| {
            format!(
                "writing {} (threaded NAPI needs Linux 5.12 or later)",
                p.display()
            )
        })?;
        let got = fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        // Newer kernels may report a mode: anything but "0" / "disabled" is threaded.
        if matches!(got.trim(), "0" | "disabled") {
            bail!("{} reads back {:?}, wanted 1", p.display(), got.trim());
        }
        Ok(())
    })
}

/// The pids of the kernel threads that run the threaded NAPI instances of `ifname`
/// (named `napi/IFNAME-NAPI_ID`; kernel thread names are not truncated in `/proc/PID/comm`).
pub fn napi_threads(ifname: &str) -> Result<Vec<i32>> {
    let prefix = format!("napi/{ifname}-");
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").context("reading /proc")? {
        let Ok(e) = e else { continue };
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        // The task may be gone by now: skip it.
        let Ok(comm) = fs::read_to_string(e.path().join("comm")) else {
            continue;
        };
        let comm = comm.trim_end();
        if comm
            .strip_prefix(&prefix)
            .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        {
            out.push(pid);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn sysctl_path(key: &str) -> Result<PathBuf> {
    let key = key.trim_start_matches('/');
    let rel = if key.contains('/') {
        key.to_string()
    } else {
        key.replace('.', "/")
    };
    if rel.is_empty() || rel.split('/').any(|c| c.is_empty() || c == "..") {
        bail!("invalid sysctl key {key:?}");
    }
    Ok(Path::new("/proc/sys").join(rel))
}

/// Writes sysctl `key` (e.g. `net/ipv4/tcp_rmem` or `net.ipv4.tcp_rmem`) inside `ns`.
pub fn write_sysctl_in(ns: &Netns, key: &str, value: &str) -> Result<()> {
    let p = sysctl_path(key)?;
    let v = value.to_string();
    ns.run(move || fs::write(&p, v).with_context(|| format!("writing {}", p.display())))?
        .with_context(|| format!("sysctl {key} in namespace {}", ns.name()))
}

/// Reads sysctl `key` inside `ns` (whitespace-trimmed).
pub fn read_sysctl_in(ns: &Netns, key: &str) -> Result<String> {
    let p = sysctl_path(key)?;
    let s = ns
        .run(move || fs::read_to_string(&p).with_context(|| format!("reading {}", p.display())))?
        .with_context(|| format!("sysctl {key} in namespace {}", ns.name()))?;
    Ok(s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_and_keys() {
        assert_eq!(parse_mask("1\n").unwrap(), 1);
        assert_eq!(parse_mask("00000000,00000003").unwrap(), 3);
        assert_eq!(parse_mask("0").unwrap(), 0);
        assert_eq!(
            sysctl_path("net.ipv4.ip_forward").unwrap(),
            Path::new("/proc/sys/net/ipv4/ip_forward")
        );
        assert_eq!(
            sysctl_path("net/ipv4/tcp_rmem").unwrap(),
            Path::new("/proc/sys/net/ipv4/tcp_rmem")
        );
        assert!(sysctl_path("net/../../etc").is_err());
    }
}
