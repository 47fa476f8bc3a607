//! Embeds the git revision the binary is built from (`PVNET_REVISION`), for the bench report;
//! "unknown" outside a git checkout. A tree with uncommitted changes gets a `-dirty` suffix.

use std::path::PathBuf;
use std::process::Command;

/// The package's directory, as cargo tells this run of the script: read at run time, not
/// compiled in, so a build script binary reused from another checkout (a worktree whose target
/// directory was seeded from another's) still asks git about this checkout.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git")
        .args(args)
        .current_dir(manifest_dir())
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn main() {
    let rev = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(r) if !r.is_empty() => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{r}-dirty")
            } else {
                r
            }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=PVNET_REVISION={rev}");
    // Rebuild when HEAD moves (a commit, a checkout) or the sources change.
    for p in ["HEAD", "logs/HEAD", "index"] {
        if let Some(path) = git(&["rev-parse", "--git-path", p]) {
            let path = manifest_dir().join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=../../crates");
    println!("cargo:rerun-if-changed=../../Cargo.toml");
}
