//! Benchmark: `dwp abilities` with all eight addons enabled and detected by command.
//!
//! Each addon's descriptor (through `DWP_ADDONS_DIR`) detects it with a fake command that sleeps
//! a known time (default 100 ms; `DWP_BENCH_SLEEP_MS` overrides) and prints `{"interface": N}` on
//! the pinned major, so every addon is detected and compatible. The floor is the sum of the
//! detect commands' own run times, each measured by running it directly. `dwp abilities` runs the
//! detect commands in parallel threads, so it should stay well under the target
//! `time ≤ 1.2 × floor + 5 ms`.
//!
//! Run: `cargo bench --bench dwp_abilities` (runs the real `dwp` binary, as a user would;
//! `DWP_BENCH_RUNS` sets the number of timed runs, default 10).

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kxen::dwp::addons::KEYS; // every addon a config file may enable
use serde_json::{Value, json};

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let sleep_ms = env_num("DWP_BENCH_SLEEP_MS", 100);
    let runs = env_num("DWP_BENCH_RUNS", 10).max(1) as usize;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (repo, bin, addons, home) = (
        root.join("repo"),
        root.join("bin"),
        root.join("addons"),
        root.join("home"),
    );
    for d in [&repo, &bin, &addons, &home] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::create_dir_all(repo.join(".git")).unwrap();

    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/addons");
    let mut registry = serde_json::Map::new();
    for key in KEYS {
        let text = std::fs::read_to_string(templates.join(key).join("addon.json")).unwrap();
        let mut desc: Value = serde_json::from_str(&text).unwrap();
        let major = desc["product"]["interface"].as_i64().unwrap_or(1);
        desc["product"] = json!({"repo": "bench/addon", "tag": "v1.0.0", "interface": major});
        desc["detect"] =
            json!({"command": format!("bench-{key} --json"), "interface_from": "json:interface"});
        std::fs::create_dir_all(addons.join(key)).unwrap();
        std::fs::write(addons.join(key).join("addon.json"), desc.to_string()).unwrap();
        let script = bin.join(format!("bench-{key}"));
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nsleep {}\necho '{{\"interface\": {major}, \"version\": \"1.0.0\"}}'\n",
                sleep_ms as f64 / 1000.0
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        registry.insert(key.into(), json!({"enabled": true}));
    }
    std::fs::create_dir_all(repo.join(".dwp")).unwrap();
    std::fs::write(
        repo.join(".dwp/config.json"),
        json!({"addons": registry}).to_string(),
    )
    .unwrap();

    // The floor: each detect command's own run time, summed.
    let mut floor_samples = Vec::new();
    for _ in 0..runs {
        let mut sum = Duration::ZERO;
        for key in KEYS {
            let start = Instant::now();
            let status = Command::new(bin.join(format!("bench-{key}")))
                .arg("--json")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .unwrap();
            sum += start.elapsed();
            assert!(status.success());
        }
        floor_samples.push(sum);
    }
    let floor = median(floor_samples);

    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut samples = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_dwp"))
            .args(["abilities", "--repo", repo.to_str().unwrap()])
            .env_clear()
            .env("PATH", &path)
            .env("HOME", &home)
            .env("DWP_ADDONS_DIR", &addons)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        samples.push(start.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        for key in KEYS {
            assert_eq!(
                doc["addons"][key]["compatible"],
                json!(true),
                "{key}: {doc}"
            );
        }
    }
    let time = median(samples);
    let target = floor.mul_f64(1.2) + Duration::from_millis(5);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "dwp_abilities: 8 addons enabled, each detected by a command sleeping {sleep_ms} ms ({runs} runs, medians)"
    );
    println!("  dwp abilities:               {:8.1} ms", ms(time));
    println!("  floor (sum of detect runs):  {:8.1} ms", ms(floor));
    println!(
        "  ratio:                       {:8.2}x",
        ms(time) / ms(floor)
    );
    println!(
        "  target (1.2 x floor + 5 ms): {:8.1} ms  -> {}",
        ms(target),
        if time <= target { "met" } else { "MISSED" }
    );
}
