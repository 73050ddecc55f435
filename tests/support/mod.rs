//! Shared by every end-to-end test binary: the program under test, and the canary that fails
//! loudly when a test binary was built from another checkout than the one it runs in.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `sugarshack` program built from this checkout.
pub fn program() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sugarshack-e2e"))
}

/// The program, run in `dir` as a user would, with `env` set and none of the variables that
/// would point it at another lake, landing zone, parser set, token or injected failure.
pub fn command(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(program());
    cmd.current_dir(dir)
        .args(args)
        .env_remove("SUGARSHACK_FAILPOINT")
        .env_remove("SUGAR_PARSERS")
        .env_remove("SUGARSHACK_CATALOG")
        .env_remove("SUGARSHACK_WAREHOUSE")
        .env_remove("SUGARSHACK_LANDING")
        .env_remove("SUGARSHACK_REST_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// [`command`], run to the end.
pub fn sugarshack(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    command(dir, args, env).output().expect("run sugarshack")
}

/// This package's folder in the checkout the tests run in (cargo and nextest set it at run
/// time; the compile-time value is only compared against it, never used).
pub fn package_dir() -> PathBuf {
    match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            panic!("CARGO_MANIFEST_DIR is not set: run the tests with cargo test or cargo nextest")
        }
    }
}

/// The Python the interop and S3 tests run (pyiceberg, DuckDB, moto): `$SUGARSHACK_PYTHON`,
/// else the workspace's `.venv` (the README's set-up), else the venv `.ci/run` keeps in
/// `~/.cache/sugarshack/venv`.
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("SUGARSHACK_PYTHON") {
        return PathBuf::from(p);
    }
    let local = package_dir().join("../.venv/bin/python");
    if local.exists() {
        return local;
    }
    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
        .join(".cache/sugarshack/venv/bin/python")
}

/// The canary: the folder this test binary was compiled from must be the one it runs in. A
/// build directory shared by several checkouts once ran tests compiled from another checkout;
/// if that ever happens again, every test binary fails here, by name.
#[test]
fn built_from_this_checkout() {
    if let Some(problem) = checkout_problem() {
        panic!("{problem}");
    }
}

/// What [`built_from_this_checkout`] checks, for a test binary without libtest's harness.
pub fn checkout_problem() -> Option<String> {
    let compiled = std::fs::canonicalize(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let running = std::fs::canonicalize(package_dir()).unwrap_or_else(|_| package_dir());
    (compiled != running).then(|| {
        format!(
            "this test binary was compiled from {} but runs in {}: stale build from another checkout",
            compiled.display(),
            running.display()
        )
    })
}
