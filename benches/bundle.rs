//! Benchmark: `session export` and `session import` of a ~100 MB Session vs the floor of copying
//! and hashing the same bytes (`cp -r` of the Session directory and its blobs + `sha256sum` of
//! every file). Target: each ≤ 2× (cp + sha256), with bounded memory (streamed; the bundle is
//! never held twice), reported as the peak RSS of the `kxen-agent` child process.
//!
//! The Session is built with the same writers the agent loop uses (`tests/it/session_builder.rs`):
//! tool calls whose outputs are ~100 KB each, every third one stored as a blob. Size:
//! `KXEN_BENCH_MB` (default 100). Each command runs `KXEN_BENCH_REPS` times (default 3); the
//! fastest run is reported.
//!
//! Run: `cargo bench --bench bundle` (data under `CARGO_TARGET_TMPDIR`, or `KXEN_BENCH_DIR`).

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

#[path = "../tests/it/session_builder.rs"]
#[allow(dead_code)]
mod session_builder;

const OUTPUT_BYTES: usize = 100 * 1024;

fn main() {
    let mb: usize = env_num("KXEN_BENCH_MB", 100);
    let reps: usize = env_num("KXEN_BENCH_REPS", 3);
    let base = std::env::var_os("KXEN_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let root = tmp.path();
    let bin = env!("CARGO_BIN_EXE_kxen-agent");

    // Inline calls store the output twice (journal + tool message), blob calls once (the blob).
    let calls = mb * 1024 * 1024 * 3 / (OUTPUT_BYTES * 5);
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("a.txt"), "a\n").unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@example.com",
            "commit",
            "-q",
            "-m",
            "b",
        ],
    ] {
        assert!(
            Command::new("git")
                .args(args)
                .current_dir(&repo)
                .status()
                .unwrap()
                .success()
        );
    }
    let state_a = root.join("state-a");
    let built = session_builder::build(
        &state_a,
        &session_builder::Shape {
            workspace: &repo,
            task: "benchmark",
            tool_calls: calls,
            output_bytes: OUTPUT_BYTES,
            blob_every: 3,
        },
    );
    let ses = built.session_id;
    // A child's peak RSS (wait4) starts from this process's own peak when it is spawned (Linux
    // carries the pre-exec high-water mark over exec), and building the Session peaks high:
    // return the freed heap and reset this process's high-water mark (clear_refs 5), so the
    // figures below are the children's own.
    // SAFETY: malloc_trim only returns free heap pages to the OS.
    unsafe { libc::malloc_trim(0) };
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let session_dir = state_a.join("sessions").join(&ses);
    let blobs_dir = state_a.join("blobs");
    let files: Vec<PathBuf> = [&session_dir, &blobs_dir]
        .iter()
        .flat_map(|d| walkdir::WalkDir::new(d).into_iter().map(|e| e.unwrap()))
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect();
    let total: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();

    let mut cp = f64::MAX;
    let mut sha = f64::MAX;
    let mut export = (f64::MAX, 0u64);
    let mut import = (f64::MAX, 0u64);
    let bundle = root.join("ses.bundle.json");
    for rep in 0..reps {
        let dest = root.join(format!("cp-{rep}"));
        std::fs::create_dir_all(&dest).unwrap();
        cp = cp.min(
            timed(
                Command::new("cp")
                    .arg("-r")
                    .arg(&session_dir)
                    .arg(&blobs_dir)
                    .arg(&dest),
            )
            .0,
        );
        sha = sha.min(
            timed(
                Command::new("sha256sum")
                    .args(&files)
                    .stdout(std::process::Stdio::null()),
            )
            .0,
        );
        std::fs::remove_dir_all(&dest).unwrap();

        let e = timed(
            Command::new(bin)
                .arg("--state-dir")
                .arg(&state_a)
                .args(["session", "export", &ses, "--output"])
                .arg(&bundle)
                .stdout(std::process::Stdio::null()),
        );
        if e.0 < export.0 {
            export = e;
        }
        let state_b = root.join(format!("state-b-{rep}"));
        let i = timed(
            Command::new(bin)
                .arg("--state-dir")
                .arg(&state_b)
                .args(["session", "import"])
                .arg(&bundle)
                .arg("--workspace")
                .arg(&repo)
                .stdout(std::process::Stdio::null()),
        );
        if i.0 < import.0 {
            import = i;
        }
        std::fs::remove_dir_all(&state_b).unwrap();
    }
    let bundle_bytes = std::fs::metadata(&bundle).unwrap().len();
    let floor = cp + sha;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "bundle: a Session of {:.1} MiB in {} files ({calls} tool calls, 1/3 in blobs); bundle {:.1} MiB",
        mib(total),
        files.len(),
        mib(bundle_bytes)
    );
    println!("  disk: {}", root.display());
    println!("  cp -r:     {cp:.3} s");
    println!("  sha256sum: {sha:.3} s");
    println!("  floor (cp + sha256): {floor:.3} s");
    println!(
        "  export: {:.3} s = {:.2}x the floor (target <= 2x), peak RSS {:.1} MiB",
        export.0,
        export.0 / floor,
        export.1 as f64 / 1024.0
    );
    println!(
        "  import: {:.3} s = {:.2}x the floor (target <= 2x), peak RSS {:.1} MiB",
        import.0,
        import.0 / floor,
        import.1 as f64 / 1024.0
    );
}

/// Runs `cmd` to success; returns (seconds, peak RSS of the child in KiB via getrusage).
fn timed(cmd: &mut Command) -> (f64, u64) {
    let start = Instant::now();
    let child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for the child we just spawned.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(rc, pid, "wait4 failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?} failed"
    );
    // The child was reaped by wait4; dropping the handle does not wait again.
    drop(child);
    (secs, usage.ru_maxrss as u64)
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
