//! Named network namespaces, managed the way `ip netns add/del/exec` does.

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use anyhow::{anyhow, bail, Context};
use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};

use crate::Result;

/// Where named namespaces are bound, as with iproute2.
pub const NETNS_RUN_DIR: &str = "/run/netns";

/// Serializes the one-time setup of `/run/netns` as a shared mount within this process.
static RUN_DIR_SETUP: Mutex<()> = Mutex::new(());

/// A named network namespace bound at `/run/netns/<name>`, with an open fd on it.
///
/// Dropping a `Netns` only closes the fd; [`Netns::delete`] removes the name. The namespace
/// itself lives as long as anything (this fd, a process, a thread, a bind mount) refers to it.
#[derive(Debug)]
pub struct Netns {
    name: String,
    fd: OwnedFd,
}

fn ns_path(name: &str) -> PathBuf {
    Path::new(NETNS_RUN_DIR).join(name)
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name == "."
        || name == ".."
        || name.len() > 255
        || name.contains('/')
        || name.contains('\0')
    {
        bail!("invalid namespace name {name:?}");
    }
    Ok(())
}

/// Makes `/run/netns` exist and be a shared mount point, so the bind mounts made under it
/// propagate to other mount namespaces (iproute2's netns_add does the same).
fn prepare_run_dir() -> Result<()> {
    let _guard = RUN_DIR_SETUP.lock().unwrap_or_else(|e| e.into_inner());
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(NETNS_RUN_DIR)
        .with_context(|| format!("creating {NETNS_RUN_DIR}"))?;
    let mut bound = false;
    loop {
        match mount(
            None::<&str>,
            NETNS_RUN_DIR,
            Some("none"),
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        ) {
            Ok(()) => return Ok(()),
            Err(Errno::EINVAL) if !bound => {
                // Not a mount point yet: bind it onto itself, then retry.
                mount(
                    Some(NETNS_RUN_DIR),
                    NETNS_RUN_DIR,
                    Some("none"),
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    None::<&str>,
                )
                .with_context(|| format!("bind-mounting {NETNS_RUN_DIR} on itself"))?;
                bound = true;
            }
            Err(e) => {
                return Err(anyhow!(e)).with_context(|| format!("making {NETNS_RUN_DIR} shared"))
            }
        }
    }
}

impl Netns {
    /// Creates a new network namespace named `name` (like `ip netns add`).
    ///
    /// Fails with "namespace X already exists" if the name is taken.
    pub fn create(name: &str) -> Result<Netns> {
        check_name(name)?;
        prepare_run_dir()?;
        let path = ns_path(name);
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o000)
            .open(&path)
        {
            Ok(f) => drop(f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                bail!("namespace {name} already exists")
            }
            Err(e) => {
                return Err(e).with_context(|| format!("creating {}", path.display()));
            }
        }
        let bind = || -> Result<()> {
            // A fresh thread, so the unshare cannot affect any thread of the caller.
            let p = path.clone();
            std::thread::spawn(move || -> Result<()> {
                unshare(CloneFlags::CLONE_NEWNET).context("unshare(CLONE_NEWNET)")?;
                mount(
                    Some("/proc/thread-self/ns/net"),
                    &p,
                    Some("none"),
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
                .with_context(|| format!("bind-mounting the new namespace on {}", p.display()))
            })
            .join()
            .map_err(|_| anyhow!("namespace creation thread panicked"))?
        };
        if let Err(e) = bind() {
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        match Netns::open(name) {
            Ok(ns) => Ok(ns),
            Err(e) => {
                let _ = umount2(&path, MntFlags::MNT_DETACH);
                let _ = fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Opens the existing namespace `name`.
    pub fn open(name: &str) -> Result<Netns> {
        check_name(name)?;
        let path = ns_path(name);
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => bail!("no such namespace {name}"),
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        let st = nix::sys::statfs::fstatfs(&file)
            .with_context(|| format!("fstatfs {}", path.display()))?;
        if st.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
            bail!("{} is not a namespace (not bound)", path.display());
        }
        Ok(Netns {
            name: name.to_string(),
            fd: file.into(),
        })
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path it is bound at.
    pub fn path(&self) -> PathBuf {
        ns_path(&self.name)
    }

    /// An fd referring to the namespace.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Removes the name (like `ip netns del`): lazy unmount, then unlink. Ok if already gone.
    pub fn delete(&self) -> Result<()> {
        delete_by_name(&self.name)
    }

    /// Moves the CALLING THREAD into this namespace (setns). Other threads are unaffected.
    pub fn enter(&self) -> Result<()> {
        setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET)
            .with_context(|| format!("setns into namespace {}", self.name))
    }

    /// Runs `f` in a scoped thread that has entered this namespace, and returns its result.
    /// A panic in `f` is propagated.
    pub fn run<F, R>(&self, f: F) -> Result<R>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        std::thread::scope(|s| {
            let h = s.spawn(|| -> Result<R> {
                self.enter()?;
                Ok(f())
            });
            match h.join() {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        })
    }

    /// A `Command` whose child joins this namespace before exec (like `ip netns exec`).
    ///
    /// The command holds its own duplicate of the namespace fd, so it stays valid even if
    /// this `Netns` is dropped before the child is spawned.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        let fd: Option<OwnedFd> = self.fd.try_clone().ok();
        let raw = fd.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe calls (setns and reading errno); it allocates nothing. The fd it
        // uses is owned by the closure (moved in below), so it is open in the child.
        unsafe {
            cmd.pre_exec(move || {
                let _keep = &fd;
                if raw < 0 {
                    return Err(io::Error::from_raw_os_error(libc::EBADF));
                }
                if libc::setns(raw, libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd
    }
}

/// Removes the name `name` from `/run/netns` (lazy unmount, then unlink). Ok if already gone.
pub fn delete_by_name(name: &str) -> Result<()> {
    check_name(name)?;
    let path = ns_path(name);
    match umount2(&path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(Errno::EINVAL) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(anyhow!(e)).with_context(|| format!("unmounting {}", path.display())),
    }
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

/// The names in `/run/netns`, sorted (empty if the directory does not exist).
pub fn list_netns() -> Vec<String> {
    let mut v: Vec<String> = match fs::read_dir(NETNS_RUN_DIR) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}
