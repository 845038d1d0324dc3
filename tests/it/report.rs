//! `session report`: the offline HTML page, opened in headless Chromium (Debian's `chromium`,
//! installed by `.ci/run`): the DOM shows the runs, calls, diffs and children; a hostile tool
//! output is text; the page loads nothing.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::run_support::*;
use crate::task::{child, tasks};

/// Counts connections to a loopback port: anything the page would load points here.
struct Listener {
    port: u16,
    hits: Arc<AtomicUsize>,
}

fn listener() -> Listener {
    let socket = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&hits);
    std::thread::spawn(move || {
        for stream in socket.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    Listener { port, hits }
}

/// Chromium, found; `None` only when `KXEN_TEST_SKIP` names `chromium`.
fn chromium() -> Option<std::path::PathBuf> {
    crate::needs::needs("chromium", || crate::needs::on_path("chromium"))
}

/// The DOM of `page` after Chromium loaded it (headless, no network services, fresh profile).
pub fn chromium_dom(env: &TestEnv, page: &Path) -> String {
    let profile = env.path().join("chromium-profile");
    std::fs::create_dir_all(&profile).unwrap();
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium (Debian package `chromium`, installed by .ci/run)");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut dom = String::new();
        stdout.read_to_string(&mut dom).unwrap();
        dom
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// An agent that reads, writes, edits, executes and delegates.
fn reporter(env: &TestEnv) -> PathBuf {
    agent(
        env,
        "reporter",
        "read",
        "edit, write, exec, task",
        "{format: text, requiredFields: []}",
    )
}

fn top_session(env: &TestEnv) -> String {
    let list = env.run("kxen-agent", &["session", "list"]);
    list.expect(0);
    list.jsonl()
        .into_iter()
        .find(|s| s["parentId"].is_null())
        .and_then(|s| s["id"].as_str().map(str::to_string))
        .expect("a top-level Session")
}

#[test]
fn report_in_chromium_shows_runs_calls_diffs_children_and_hostile_output_as_text() {
    if chromium().is_none() {
        return;
    }
    let env = TestEnv::new();
    let net = listener();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let hostile = format!(
        "</script><script>document.title='pwned'</script><b>bold</b><img src=\"http://127.0.0.1:{}/pixel\">",
        net.port
    );
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "write",
                json!({"path": "a.txt", "content": "one\ntwo\nthree\n"}),
            ),
            call(
                "c2",
                "edit",
                json!({"path": "a.txt", "oldString": "two", "newString": "TWO"}),
            ),
            call(
                "c3",
                "exec",
                json!({"command": format!("printf '%s' '{hostile}'")}),
            ),
            tasks(&[("t1", "check a", "Check a, then say a-ok")]),
            child("check a", answer("a-ok")),
            answer("all done"),
            // The second run (a resume with a new task).
            call("c4", "read", json!({"path": "a.txt"})),
            answer("read it"),
        ],
    );
    let agent = reporter(&env);
    run_new(
        &env,
        &repo,
        "make a.txt",
        &agent,
        &config,
        &["--allow-shell"],
    )
    .expect(0);
    let ses = top_session(&env);
    env.run(
        "kxen-agent",
        &[
            "--resume",
            &ses,
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "read a.txt",
            "--allow-shell",
            "--config",
            config.to_str().unwrap(),
        ],
    )
    .expect(0);
    // The price makes the cost visible (in the page and the summary).
    let priced = env.path().join("priced.toml");
    std::fs::write(
        &priced,
        format!(
            "{}\n[providers.script.price]\ninput_per_million = 3.0\noutput_per_million = 15.0\ncurrency = \"USD\"\n",
            std::fs::read_to_string(&config)
                .unwrap()
                .replace("path = \"turns.jsonl\"", &format!("path = {:?}", env.path().join("model/turns.jsonl")))
        ),
    )
    .unwrap();

    let page = env.path().join("out/report.html");
    std::fs::create_dir_all(page.parent().unwrap()).unwrap();
    let summary = env.path().join("out/summary.md");
    let made = env.run(
        "kxen-agent",
        &[
            "session",
            "report",
            &ses,
            "--output",
            page.to_str().unwrap(),
            "--summary",
            summary.to_str().unwrap(),
            "--config",
            priced.to_str().unwrap(),
        ],
    );
    made.expect(0);
    let line = &made.jsonl()[0];
    assert_eq!(line["type"], "sessionReport");
    assert_eq!(line["verified"], true);
    let html = std::fs::read_to_string(&page).unwrap();

    // Nothing in the file can load anything: no script, link, image, style import or URL
    // attribute; the only URL is the escaped hostile text itself.
    for banned in [
        "<script", "<img", "<link", "<iframe", "<object", "src=\"", "href=\"", "url(", "@import",
    ] {
        assert!(!html.contains(banned), "the page holds {banned}");
    }
    let escaped_url = format!("http://127.0.0.1:{}/pixel", net.port);
    assert!(html.contains(&escaped_url));
    let rest = html.replace(&escaped_url, "");
    // (`http-equiv` is the CSP's own attribute name, not a URL.)
    if let Some(at) = rest
        .find("http:")
        .or(rest.find("https:"))
        .or(rest.find("//"))
    {
        panic!(
            "a URL besides the tool's text: {}",
            &rest[at.saturating_sub(200)..at + 100]
        );
    }
    assert!(
        html.contains("&lt;/script&gt;&lt;script&gt;"),
        "hostile output not escaped"
    );

    let dom = chromium_dom(&env, &page);
    assert!(dom.contains("</html>"), "no DOM: {dom}");
    // The hostile output is text, not markup: no element came out of it.
    assert!(dom.contains("&lt;b&gt;bold&lt;/b&gt;"), "{dom}");
    assert!(!dom.contains("<b>bold</b>") && !dom.contains("<img") && !dom.contains("<script"));
    assert!(
        dom.contains(&format!("<title>kxen-agent session {ses}</title>")),
        "a script ran"
    );
    assert_eq!(
        net.hits.load(Ordering::SeqCst),
        0,
        "the page made a network request"
    );

    // The runs (both, with ids), their calls with outcomes, the diff, the child, the checks.
    let shown = env
        .run("kxen-agent", &["session", "show", &ses])
        .jsonl()
        .remove(0);
    let runs: Vec<&str> = shown["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 2);
    for run in &runs {
        assert!(dom.contains(&format!("id=\"{run}\"")), "run {run} missing");
        let ops = env
            .run("kxen-agent", &["run", "show", &ses, run])
            .jsonl()
            .remove(0);
        for op in ops["operations"].as_array().unwrap() {
            assert!(
                dom.contains(op["opId"].as_str().unwrap()),
                "operation {op} missing"
            );
        }
    }
    for tool in ["write", "edit", "exec", "task", "read"] {
        assert!(
            dom.contains(&format!("<code class=\"tool\">{tool}</code>")),
            "{tool} call missing"
        );
    }
    assert!(
        dom.contains("<span class=\"del\">-two</span>"),
        "edit diff missing: {dom}"
    );
    assert!(dom.contains("<span class=\"add\">+TWO</span>"));
    assert!(
        dom.contains("<span class=\"add\">+three</span>"),
        "write diff missing"
    );
    let child_id = shown["lineage"]["tasks"][0]["sessionId"].as_str().unwrap();
    assert!(
        dom.contains(&format!("<li class=\"child\"><code>{child_id}</code>")),
        "child missing"
    );
    assert!(dom.contains("verified</span>"));
    assert_eq!(
        dom.matches("start</span> attempt 1").count(),
        2,
        "each run's start"
    );
    assert!(dom.contains("<svg"), "the chart");
    // 8 model calls (the child's included? no: the child's calls are in its own Session).
    let calls = dom.matches("<b>model call ").count();
    assert_eq!(calls, 7, "{calls} model calls shown");

    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.contains(&format!("### kxen-agent Session `{ses}`")),
        "{md}"
    );
    assert!(md.contains("**status:** `completed`"), "{md}");
    assert!(md.contains("**cost:** $0.00"), "{md}");
    assert!(md.contains("**tool calls:** 5 (5 ok)"), "{md}");
    assert!(!md.contains("bold"), "tool text in the summary: {md}");
}

#[test]
fn report_of_a_run_stopped_for_approval_names_the_commands() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let policy = env.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allowShell": true, "mcpTools": {"exec": "ask"}}"#,
    )
    .unwrap();
    let config = script_config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo hi"})),
            answer("done"),
        ],
    );
    let agent = fixer(&env);
    run_new(
        &env,
        &repo,
        "count",
        &agent,
        &config,
        &["--policy", policy.to_str().unwrap()],
    )
    .expect(7);
    let ses = top_session(&env);
    let run = env.run("kxen-agent", &["session", "show", &ses]).jsonl()[0]["runs"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = env
        .run("kxen-agent", &["run", "show", &ses, &run])
        .jsonl()
        .remove(0);
    let pending = &shown["pendingApprovals"][0];
    let command = format!(
        "kxen-agent run approve {ses} {run} {} --arguments-hash {}",
        pending["opId"].as_str().unwrap(),
        pending["argumentsHash"].as_str().unwrap()
    );
    // Without --output and with stdout a pipe, the page goes to stdout.
    let page = env.run(
        "kxen-agent",
        &["session", "report", &ses, "--summary", "s.md"],
    );
    page.expect(0);
    assert!(
        page.stdout.starts_with("<!DOCTYPE html>"),
        "{}",
        page.stdout
    );
    assert!(page.stdout.contains(&command), "approval command missing");
    assert!(page.stdout.contains("awaiting approval</span>"));
    let md = std::fs::read_to_string(env.path().join("s.md")).unwrap();
    assert!(md.contains(&format!("`{command}`")), "{md}");
    assert!(md.contains("**status:** `inputRequired`"), "{md}");
    assert!(md.contains("cost:** unknown"), "{md}");

    // Approved and resumed: the run's second attempt is a resume, and nothing waits any more.
    env.run(
        "kxen-agent",
        &[
            "run",
            "approve",
            &ses,
            &run,
            pending["opId"].as_str().unwrap(),
        ],
    )
    .expect(0);
    env.run(
        "kxen-agent",
        &[
            "--resume",
            &ses,
            "--workspace",
            repo.to_str().unwrap(),
            "--policy",
            policy.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
    )
    .expect(0);
    let page = env.run("kxen-agent", &["session", "report", &ses, "--output", "-"]);
    page.expect(0);
    assert!(
        page.stdout.contains("resume</span> attempt 2"),
        "{}",
        page.stdout
    );
    assert!(!page.stdout.contains("run approve"));
    assert!(
        page.stdout.contains("(rule <code>exec</code>: approved)"),
        "{}",
        page.stdout
    );
}

#[test]
fn report_errors_have_their_exit_codes() {
    let env = TestEnv::new();
    let unknown = env.run(
        "kxen-agent",
        &["session", "report", "ses_0000000000aaaaaaaaaaaaaaaa"],
    );
    unknown.expect(3);
    assert_eq!(unknown.jsonl()[0]["kind"], "notFound");
    env.run("kxen-agent", &["session", "report", "../etc"])
        .expect(4);
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(&env, &[answer("done")]);
    run_new(&env, &repo, "nothing", &fixer(&env), &config, &[]).expect(0);
    let ses = top_session(&env);
    let dir = env.path().to_str().unwrap().to_string();
    env.run("kxen-agent", &["session", "report", &ses, "--output", &dir])
        .expect(2);
    env.run(
        "kxen-agent",
        &["session", "report", &ses, "--output", "no/such/dir/r.html"],
    )
    .expect(3);
    // A Session that reads but fails verification (its final message is gone: the run's
    // record names it) still gets its report, and exit 10 says it failed verification.
    let messages = env
        .state_dir()
        .join("sessions")
        .join(&ses)
        .join("messages.jsonl");
    let text = std::fs::read_to_string(&messages).unwrap();
    let kept: Vec<&str> = text.lines().collect();
    std::fs::write(
        &messages,
        format!("{}\n", kept[..kept.len() - 1].join("\n")),
    )
    .unwrap();
    let damaged = env.run(
        "kxen-agent",
        &["session", "report", &ses, "--output", "r.html"],
    );
    damaged.expect(10);
    let html = std::fs::read_to_string(env.path().join("r.html")).unwrap();
    assert!(html.contains("verification failed"), "{html}");
    let _: Value = damaged.jsonl()[0].clone();
}

/// The report reads a live Session (no lease, a torn last line ignored): made again and again
/// while a run works, every one exits 0, verifies and is a whole page.
#[test]
fn report_during_an_active_run_is_whole_and_verified() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    // Distinct arguments: identical calls would end the run `loopDetected` first.
    let mut turns: Vec<Value> = (0..300)
        .map(|i| {
            call(
                &format!("c{i}"),
                "read",
                json!({"path": "README", "limit": i + 1}),
            )
        })
        .collect();
    turns.push(answer("done"));
    let config = script_config(&env, &turns);
    let yaml = std::fs::read_to_string(&agent)
        .unwrap()
        .replace("maxTurns: 16", "maxTurns: 400");
    std::fs::write(&agent, yaml).unwrap();
    let mut child = spawn_new(&env, &repo, "Read", &agent, &config, &[]);
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            if let Some(mut pipe) = pipe {
                let _ = std::io::copy(&mut pipe, &mut std::io::sink());
            }
        })
    };
    drain(child.stdout.take().map(|p| Box::new(p) as _));
    drain(child.stderr.take().map(|p| Box::new(p) as _));
    let sessions = env.state_dir().join("sessions");
    let ses = loop {
        let found = std::fs::read_dir(&sessions).ok().and_then(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .find(|n| n.starts_with("ses_"))
        });
        if let Some(id) = found {
            break id;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (mut made, mut running) = (0, 0);
    while child.try_wait().unwrap().is_none() {
        let page = env.run("kxen-agent", &["session", "report", &ses, "--output", "-"]);
        assert_eq!(
            page.code, 0,
            "report {made} during the run\n{}",
            page.stderr
        );
        assert!(page.stdout.ends_with("</html>\n"), "a partial page");
        assert!(page.stdout.contains("verified</span>"));
        // Mid-run: some calls recorded, not all (and the run not settled).
        let calls = page.stdout.matches("<li class=\"call\">").count();
        if calls < 300 && page.stdout.contains("(not settled)</span></h3>") {
            running += 1;
        }
        made += 1;
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(
        running >= 2,
        "only {running} of {made} reports saw the run running"
    );
    let page = env.run("kxen-agent", &["session", "report", &ses, "--output", "-"]);
    assert_eq!(page.stdout.matches("<li class=\"call\">").count(), 300);
}
