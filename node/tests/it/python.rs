//! The Python package (python/): its pytest suite, run with the real
//! `amos` binary cargo built for these tests.
//!
//! The suite needs the `amos` extension and pytest importable by `python3`
//! (or `$AMOS_PYTHON`): `.ci/run` builds and installs both before the test
//! command (docs/python.md, "Tests"). Where they are not, this test says a
//! loud SKIPPED on stderr and passes; a suite that runs and fails, or runs
//! no test, fails it.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn python() -> String {
    std::env::var("AMOS_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

#[test]
fn the_python_package_passes_its_pytest_suite() {
    let py = python();
    let probe = Command::new(&py)
        .args(["-c", "import amos, pytest"])
        .stdin(Stdio::null())
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "\n**************** SKIPPED python::the_python_package_passes_its_pytest_suite: \
                 {py} cannot import amos and pytest (pip install pytest ./python; .ci/run does): {} \
                 ****************\n",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            eprintln!(
                "\n**************** SKIPPED python::the_python_package_passes_its_pytest_suite: \
                 no {py} ({e}) ****************\n"
            );
            return;
        }
    }
    // From inside tests/: `python -m` puts its working directory first on
    // sys.path, and from python/ the source folder `amos/` (no compiled
    // extension in it) would hide the installed package.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../python/tests");
    let out = Command::new(&py)
        .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "."])
        .current_dir(&dir)
        .env("AMOS_BIN", crate::common::amos_bin())
        .env_remove("AMOS_HOME")
        .env_remove("AMOS_AGENT")
        .stdin(Stdio::null())
        .output()
        .expect("spawn pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "pytest failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        summary.contains(" passed") && !summary.contains("failed"),
        "pytest ran no test:\n{stdout}\n{stderr}"
    );
    // Shown with --nocapture (and kept in the log when a later assert fails).
    eprintln!("python/tests: {summary}");
}
