//! Read-only views: `session list`, `session show`, `run show` never write.

use crate::env::TestEnv;

#[test]
fn read_only_commands_on_an_empty_state_dir_write_nothing() {
    let env = TestEnv::new();
    let run = env.run("kxen-agent", &["session", "list"]);
    run.expect(0);
    assert_eq!(run.stdout, "");
    assert!(
        !env.state_dir().exists(),
        "session list created the state dir"
    );
    let run = env.run(
        "kxen-agent",
        &["session", "show", "ses_0000000000aaaaaaaaaaaaaaaa"],
    );
    run.expect(3);
    assert_eq!(run.jsonl()[0]["kind"], "notFound");
    assert!(run.stderr.contains("session list"), "{}", run.stderr);
    let run = env.run("kxen-agent", &["run", "show", "../etc", "run_x"]);
    run.expect(4);
    assert!(!env.state_dir().exists());
}
