//! The MCP conformance suite (npm `@modelcontextprotocol/conformance`) against kxen-agent: the
//! scenarios without authorization, the unattended OAuth one (`client_credentials`) and the
//! authorization-code one with discovery and dynamic registration (the driver also checks that
//! neither a secret nor a token reached the state dir), through the
//! repository's own driver
//! (tests/conformance/run.py, which `.ci/run` also runs for every client scenario). The driver
//! exits 0 only when each scenario passes or fails exactly as its EXPECTED_FAILURES says.
//! `.ci/deps` installs Node >= 22 and the suite; without them this test fails, unless
//! `KXEN_TEST_SKIP` names `conformance` (tests/it/needs.rs).

use std::path::Path;
use std::process::Command;

#[test]
fn the_core_client_scenarios_do_what_the_driver_expects() {
    // The driver finds Node >= 22 itself and fails naming it; the suite is checked here.
    let suite = crate::needs::needs("conformance", || {
        let path = match std::env::var_os("KXEN_CONFORMANCE") {
            Some(path) => std::path::PathBuf::from(path),
            None => crate::needs::npm_prefix()
                .join("node_modules/@modelcontextprotocol/conformance/dist/index.js"),
        };
        path.is_file()
            .then_some(())
            .ok_or_else(|| format!("{} is missing", path.display()))
    });
    if suite.is_none() {
        return;
    }
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/run.py");
    let out = Command::new("python3")
        .arg(&driver)
        .args([
            "initialize",
            "tools_call",
            "elicitation-sep1034-client-defaults",
            "sse-retry",
            "auth/client-credentials-basic",
            "auth/metadata-default",
        ])
        .env("KXEN_AGENT", env!("CARGO_BIN_EXE_kxen-agent"))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the conformance driver failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for scenario in [
        "initialize",
        "tools_call",
        "elicitation-sep1034-client-defaults",
        "sse-retry",
        "auth/client-credentials-basic",
        "auth/metadata-default",
    ] {
        assert!(stdout.contains(&format!("pass {scenario} ")), "{stdout}");
    }
}
