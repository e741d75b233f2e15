//! `BENCH_BASELINE=<rev>`: an earlier revision of the worker, built once in
//! release and kept, so a change's effect is measured side by side on the
//! same machine state, never assumed.
//!
//! The revision is checked out with `git worktree add --detach` under
//! `target/bench-baseline/src-<sha>`, built with
//! `CARGO_TARGET_DIR=target/bench-baseline/target` (shared by every
//! baseline, so dependencies are built once), and its binary and
//! `config/default.toml` are copied to `target/bench-baseline/<sha>/`; the
//! worktree is then removed. A later run finds the copy and builds nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A built baseline.
pub struct Build {
    /// As given (`0ec0ae5`).
    pub rev: String,
    pub sha: String,
    pub binary: PathBuf,
    /// Its own `config/default.toml`: it knows its own keys only.
    pub config: PathBuf,
}

/// Builds `rev` (or finds it built).
pub fn build(rev: &str) -> Build {
    let repo = crate::manifest_dir();
    let sha = git(
        &repo,
        &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
    );
    let root = crate::target_dir().join("bench-baseline");
    let kept = root.join(&sha);
    let binary = kept.join("invoice-reminder");
    let config = kept.join("default.toml");
    if !(binary.is_file() && config.is_file()) {
        std::fs::create_dir_all(&kept).expect("baseline dir");
        let src = root.join(format!("src-{sha}"));
        if !src.join("Cargo.toml").is_file() {
            git(
                &repo,
                &["worktree", "add", "--detach", &src.to_string_lossy(), &sha],
            );
        }
        println!(
            "building baseline {rev} ({sha}) in {} (release; the first build takes minutes)",
            src.display()
        );
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "build",
                "--release",
                "--locked",
                "--bin",
                "invoice-reminder",
            ])
            .current_dir(&src)
            .env("CARGO_TARGET_DIR", root.join("target"))
            .status()
            .expect("start cargo");
        assert!(status.success(), "building baseline {rev} failed");
        std::fs::copy(root.join("target/release/invoice-reminder"), &binary)
            .expect("keep the baseline binary");
        std::fs::copy(src.join("config/default.toml"), &config)
            .expect("keep the baseline's default.toml");
        git(
            &repo,
            &["worktree", "remove", "--force", &src.to_string_lossy()],
        );
    }
    Build {
        rev: rev.to_owned(),
        sha,
        binary,
        config,
    }
}

/// Runs git in `dir`; its trimmed stdout (panics on failure).
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("start git");
    assert!(
        out.status.success(),
        "git {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
