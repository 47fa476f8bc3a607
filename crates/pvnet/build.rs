//! Embeds the git revision the binary is built from (`PVNET_REVISION`), for the bench report;
//! "unknown" outside a git checkout. A tree with uncommitted changes gets a `-dirty` suffix.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
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
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=../../crates");
    println!("cargo:rerun-if-changed=../../Cargo.toml");
}
