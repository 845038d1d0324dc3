//! Both binaries' `--help` exit-code tables are generated from `ErrorKind`
//! (`kxen::error::exit_code_table`); these goldens pin the text a user sees, and the book's
//! exit-code page (docs/reference/exit-codes.md) must list the same codes and meanings.

use crate::env::TestEnv;

/// The `Exit codes:` section at the end of `bin --help`.
fn exit_table(bin: &str) -> String {
    let run = TestEnv::new().run(bin, &["--help"]);
    run.expect(0);
    let start = run
        .stdout
        .find("Exit codes:")
        .unwrap_or_else(|| panic!("{bin} --help has no exit-code table:\n{}", run.stdout));
    run.stdout[start..].to_string()
}

#[test]
fn kxen_agent_help_exit_table_is_pinned() {
    assert_eq!(
        exit_table("kxen-agent"),
        include_str!("golden/kxen-agent-exit-codes.txt")
    );
}

#[test]
fn dwp_help_exit_table_is_pinned() {
    assert_eq!(exit_table("dwp"), include_str!("golden/dwp-exit-codes.txt"));
}

#[test]
fn the_exit_code_page_matches_the_help() {
    let page = include_str!("../../docs/reference/exit-codes.md");
    let section = &page[page
        .find("## kxen-agent")
        .expect("docs/reference/exit-codes.md has ## kxen-agent")..];
    let rows: Vec<String> = section
        .lines()
        .skip_while(|l| !l.starts_with("| 0 "))
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            format!("{:>4}  {}", cells[0], cells[1])
        })
        .collect();
    let help: Vec<String> = exit_table("kxen-agent")
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect();
    assert_eq!(rows, help);
}
