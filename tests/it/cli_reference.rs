//! The book's CLI reference (docs/reference/kxen-agent.md, docs/reference/dwp.md) is generated
//! from the clap definitions, and its exit-code page (docs/reference/exit-codes.md) from the
//! error kinds, so neither can drift from the binaries: every command and subcommand, depth
//! first, with its whole `--help` text. The tests fail when a committed page differs from what
//! the code renders and print the command that rewrites it.

use clap::CommandFactory;

/// Help wraps at this width whatever the terminal, so the pages are the same on every machine.
const WIDTH: usize = 100;

/// The markdown page for one binary's command tree.
fn render(root: clap::Command, title: &str, intro: &str) -> String {
    let mut root = root.term_width(WIDTH);
    root.build();
    let mut commands = Vec::new();
    collect(&mut root, &mut commands);

    let mut page = format!(
        "<!-- Generated from the clap definitions by tests/it/cli_reference.rs; do not edit.\n     \
         Regenerate: KXEN_BLESS=1 cargo test --all-features --test it cli_reference -->\n\n\
         # {title}\n\n{intro}\n\n"
    );
    for (name, about, _) in &commands {
        let anchor = name.replace(' ', "-");
        page.push_str(&format!("- [`{name}`](#{anchor}) — {about}\n"));
    }
    for (name, _, help) in &commands {
        page.push_str(&format!(
            "\n## {name}\n\n```text\n{}\n```\n",
            help.trim_end()
        ));
    }
    page
}

/// `(full name, one-line about, long help)` of `cmd` and of every visible subcommand below it.
fn collect(cmd: &mut clap::Command, out: &mut Vec<(String, String, String)>) {
    let name = cmd.get_bin_name().unwrap_or(cmd.get_name()).to_string();
    // The index shows the first sentence; the section below has all of it.
    let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
    let about = about.split(". ").next().unwrap_or("").replace('\n', " ");
    let help = cmd.render_long_help().to_string();
    out.push((name, about, help));
    for sub in cmd.get_subcommands_mut() {
        if sub.get_name() != "help" && !sub.is_hide_set() {
            collect(sub, out);
        }
    }
}

fn check(path: &str, generated: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("KXEN_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let diff = similar::TextDiff::from_lines(committed.as_str(), generated)
            .unified_diff()
            .header("committed", "generated")
            .to_string();
        panic!(
            "{} is not what the clap definitions generate:\n{diff}\nregenerate it with: \
             KXEN_BLESS=1 cargo test --all-features --test it cli_reference",
            path.display()
        );
    }
}

#[test]
fn the_kxen_agent_reference_matches_the_clap_definitions() {
    let page = render(
        kxen::cli::kxen::Cli::command(),
        "`kxen-agent` command reference",
        "Every `kxen-agent` command with its `--help` text. How the commands fit together: \
         [Running agents](../running-agents.md).",
    );
    check("docs/reference/kxen-agent.md", &page);
}

#[test]
fn the_dwp_reference_matches_the_clap_definitions() {
    let page = render(
        kxen::cli::dwp::Cli::command(),
        "`dwp` command reference",
        "Every `dwp` command with its `--help` text. What they do: [dwp](../dwp.md).",
    );
    check("docs/reference/dwp.md", &page);
}

#[test]
fn the_exit_code_reference_matches_the_error_kinds() {
    use kxen::error::ErrorKind;
    let mut page = String::from(
        "<!-- Generated from the error kinds by tests/it/cli_reference.rs; do not edit.\n     \
         Regenerate: KXEN_BLESS=1 cargo test --all-features --test it cli_reference -->\n\n\
         # Exit codes\n\n\
         Every failure a user can cause has one clear message and one of these codes; a panic is \
         a bug. `kxen-agent --help` and `dwp --help` end with the same tables.\n\n\
         ## kxen-agent\n\n| code | meaning |\n|---:|---|\n| 0 | success (run completed) |\n",
    );
    for kind in ErrorKind::ALL {
        page.push_str(&format!("| {} | {} |\n", kind.exit_code(), kind.meaning()));
    }
    page.push_str(
        "\nErrors print `error: …` (and `hint: …` with the next step) on stderr; with \
         `--format jsonl` (the default) an `{\"type\":\"error\",\"kind\":…,\"message\":…}` line \
         also goes to stdout. The exit code of `run` and `--resume` follows the run: 0 only for \
         `completed`.\n\n## dwp\n\n```text\n",
    );
    page.push_str(&kxen::cli::dwp::exit_code_table());
    page.push_str("\n```\n");
    check("docs/reference/exit-codes.md", &page);
}
