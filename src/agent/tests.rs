use std::path::PathBuf;

use proptest::prelude::*;

use super::*;
use crate::error::ErrorKind;

const MINIMAL: &str = "apiVersion: kxen.ai/v1alpha1
kind: DCPAgent
metadata:
  name: test_agent
spec:
  objective: Test
  instructions: [Return]
  capabilities:
    required: [read]
";

/// The vector shared with other DCPAgent tooling (issue 2).
const MINIMAL_HASH: &str =
    "sha256:b0f8eed214bd25b7c59fd33f16974631b683a8c6ea7a68fe0b727074ad13ab4b";

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/agents")
}

#[track_caller]
fn invalid(yaml: &str) -> String {
    let err = parse_definition(yaml.as_bytes(), "a.yaml").unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput, "{}", err.message);
    assert_eq!(err.exit_code(), 4);
    assert!(err.message.starts_with("a.yaml"), "{}", err.message);
    err.message
}

fn minimal_in_memory() -> AgentDefinition {
    AgentDefinition {
        api_version: API_VERSION.into(),
        kind: KIND.into(),
        metadata: Metadata {
            name: "test_agent".into(),
            description: None,
        },
        spec: Spec {
            objective: "Test".into(),
            instructions: vec!["Return".into()],
            success_criteria: vec![],
            capabilities: Capabilities {
                required: vec!["read".into()],
                optional: vec![],
            },
            execution: Execution::default(),
            output: Output::default(),
        },
    }
}

#[test]
fn minimal_definition_hash_vector() {
    let def = parse_definition(MINIMAL.as_bytes(), "minimal.yaml").unwrap();
    assert_eq!(
        def.canonical_json(),
        r#"{"apiVersion":"kxen.ai/v1alpha1","kind":"DCPAgent","metadata":{"name":"test_agent"},"spec":{"objective":"Test","instructions":["Return"],"successCriteria":[],"capabilities":{"required":["read"],"optional":[]},"execution":{"modelRole":"execution","maxTurns":32,"maxPureRetries":1},"output":{"format":"text","requiredFields":[]}}}"#
    );
    assert_eq!(def.definition_hash(), MINIMAL_HASH);
    assert_eq!(def, minimal_in_memory());
    assert_eq!(minimal_in_memory().definition_hash(), MINIMAL_HASH);
    let from_file = load_definition(&fixtures().join("minimal.yaml")).unwrap();
    assert_eq!(from_file.definition_hash(), MINIMAL_HASH);
}

#[test]
fn explicit_defaults_hash_like_omitted_ones() {
    let explicit = format!(
        "{MINIMAL}    optional: []\n  successCriteria: []\n  execution:\n    modelRole: execution\n    maxTurns: 32\n    maxPureRetries: 1\n  output:\n    format: text\n    requiredFields: []\n"
    );
    let def = parse_definition(explicit.as_bytes(), "a.yaml").unwrap();
    assert_eq!(def.definition_hash(), MINIMAL_HASH);
}

#[test]
fn optional_fields_appear_in_schema_order_when_present() {
    let def = load_definition(&fixtures().join("full.yaml")).unwrap();
    let json = def.canonical_json();
    let order = [
        "\"apiVersion\"",
        "\"kind\"",
        "\"metadata\"",
        "\"name\"",
        "\"description\"",
        "\"spec\"",
        "\"objective\"",
        "\"instructions\"",
        "\"successCriteria\"",
        "\"capabilities\"",
        "\"required\"",
        "\"optional\"",
        "\"execution\"",
        "\"modelRole\"",
        "\"maxTurns\"",
        "\"maxWallClockMs\"",
        "\"maxPureRetries\"",
        "\"output\"",
        "\"format\"",
        "\"requiredFields\"",
    ];
    let positions: Vec<usize> = order.iter().map(|k| json.find(k).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{json}");
    assert_eq!(def.spec.execution.max_wall_clock_ms, Some(1_800_000));
    assert_eq!(def.spec.output.format, OutputFormat::Json);
    assert_ne!(def.definition_hash(), MINIMAL_HASH);
}

#[test]
fn yaml_round_trip_keeps_the_definition_and_hash() {
    for name in ["minimal.yaml", "full.yaml"] {
        let def = load_definition(&fixtures().join(name)).unwrap();
        let yaml = serde_norway::to_string(&def).unwrap();
        let again = parse_definition(yaml.as_bytes(), "round-trip.yaml").unwrap();
        assert_eq!(again, def);
        assert_eq!(again.definition_hash(), def.definition_hash());
        // The canonical JSON is itself a valid definition (JSON is YAML's flow style), as is
        // what a lock stores in session.json.
        let json = def.canonical_json();
        assert_eq!(parse_definition(json.as_bytes(), "x.json").unwrap(), def);
        let from_json: AgentDefinition = serde_json::from_str(&json).unwrap();
        assert_eq!(from_json, def);
        def.validate("in memory").unwrap();
    }
}

#[test]
fn the_starter_template_is_valid() {
    let def = parse_definition(crate::templates::AGENT_YAML.as_bytes(), "agent.yaml").unwrap();
    assert_eq!(def.metadata.name, "repository_fixer");
}

/// Every file in `fixtures/agents/invalid/` starts with `# expect: TEXT`; parsing it must fail
/// with exit 4 and a message holding TEXT.
#[test]
fn every_invalid_fixture_fails_with_its_message() {
    let dir = fixtures().join("invalid");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{} lacks an `# expect:` line", path.display()));
        let message = invalid(&text);
        assert!(
            message.contains(expect),
            "{}:\n  expected: {expect}\n  got:      {message}",
            path.display()
        );
        count += 1;
    }
    assert!(count >= 40, "only {count} invalid fixtures");
}

#[test]
fn messages_carry_file_line_and_column() {
    let yaml = format!("{MINIMAL}  execution:\n    maxTurns: 0\n");
    let message = invalid(&yaml);
    assert!(
        message.starts_with("a.yaml:11:15: spec.execution.maxTurns: must be between 1 and 1024"),
        "{message}"
    );
    let err = invalid(&MINIMAL.replace("[Return]", "[Return, Return]"));
    assert!(
        err.starts_with("a.yaml:7:26: spec.instructions[1]: duplicate"),
        "{err}"
    );
}

#[test]
fn boundaries_are_accepted() {
    let yaml = format!(
        "{MINIMAL}  execution:\n    maxTurns: 1024\n    maxWallClockMs: 1\n    maxPureRetries: 0\n"
    );
    let def = parse_definition(yaml.as_bytes(), "a.yaml").unwrap();
    assert_eq!(def.spec.execution.max_turns, 1024);
    assert_eq!(def.spec.execution.max_pure_retries, 0);
    let yaml = format!("{MINIMAL}  execution:\n    maxTurns: 1\n    maxPureRetries: 255\n");
    parse_definition(yaml.as_bytes(), "a.yaml").unwrap();
    // 128 instructions, texts at their limits, a 128-character name, a 256-byte capability.
    let many: Vec<String> = (0..128).map(|i| format!("step {i}")).collect();
    let yaml = MINIMAL
        .replace("[Return]", &format!("[{}]", many.join(", ")))
        .replace(
            "objective: Test",
            &format!("objective: {}", "é".repeat(8000)),
        )
        .replace("test_agent", &"n".repeat(128))
        .replace("[read]", &format!("[{}]", "c".repeat(256)));
    let def = parse_definition(yaml.as_bytes(), "a.yaml").unwrap();
    assert_eq!(def.spec.instructions.len(), 128);
    // Optional-only capabilities are fine; unknown names (lsp, mcp__x__y) are valid here: the
    // policy decides whether they are granted.
    let yaml = MINIMAL.replace("required: [read]", "optional: [lsp, mcp__github__search]");
    let def = parse_definition(yaml.as_bytes(), "a.yaml").unwrap();
    assert!(def.spec.capabilities.required.is_empty());
}

#[test]
fn yaml_null_is_absent_where_optional_and_an_error_elsewhere() {
    let yaml = MINIMAL.replace(
        "  name: test_agent\n",
        "  name: test_agent\n  description: ~\n",
    );
    let yaml = format!("{yaml}  execution:\n    maxWallClockMs: null\n");
    let def = parse_definition(yaml.as_bytes(), "a.yaml").unwrap();
    assert_eq!(def.definition_hash(), MINIMAL_HASH);
    assert!(
        invalid(&MINIMAL.replace("objective: Test", "objective: ~"))
            .contains("a.yaml:6:3: spec: `objective` must not be null")
    );
    assert!(
        invalid(&MINIMAL.replace("[Return]", "[Return, null]"))
            .contains("spec.instructions: an instruction must not be null")
    );
    assert!(
        invalid(&MINIMAL.replace("test_agent", "")).contains("metadata: `name` must not be null")
    );
    // A null list is an empty list, which then meets the list's own rules.
    let yaml = format!("{MINIMAL}    optional: ~\n  successCriteria: ~\n");
    assert_eq!(
        parse_definition(yaml.as_bytes(), "a.yaml")
            .unwrap()
            .definition_hash(),
        MINIMAL_HASH
    );
    assert!(
        invalid(&MINIMAL.replace("[Return]", "~")).contains("must list at least one instruction")
    );
    assert!(
        invalid(&MINIMAL.replace("[Return]", "")).contains("must list at least one instruction")
    );
    // Quoted, they are text.
    let def = parse_definition(
        MINIMAL
            .replace("objective: Test", "objective: '~'")
            .as_bytes(),
        "a",
    )
    .unwrap();
    assert_eq!(def.spec.objective, "~");
    // Plain scalars that look like other types are text where text is expected.
    let def = parse_definition(MINIMAL.replace("test_agent", "123").as_bytes(), "a").unwrap();
    assert_eq!(def.metadata.name, "123");
}

#[test]
fn bom_and_crlf_are_accepted() {
    let crlf = MINIMAL.replace('\n', "\r\n");
    let with_bom = format!("\u{feff}{crlf}");
    for text in [
        crlf.as_str(),
        with_bom.as_str(),
        &format!("\u{feff}{MINIMAL}"),
    ] {
        let def = parse_definition(text.as_bytes(), "a.yaml").unwrap();
        assert_eq!(def.definition_hash(), MINIMAL_HASH);
    }
}

#[test]
fn empty_and_garbage_input_is_invalid() {
    for text in ["", "   \n\n", "\u{feff}"] {
        assert!(invalid(text).contains("the file is empty"));
    }
    assert!(invalid("# nothing but a comment\n").contains("missing field"));
    assert!(invalid("just a string").contains("invalid type"));
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 256) as u8).collect();
    let err = parse_definition(&garbage, "a.yaml").unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput);
    let err = parse_definition(b"\xff\xfe\x00a\x00:", "a.yaml").unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput);
}

#[test]
fn oversized_input_is_refused_before_parsing() {
    let big = vec![b'#'; 10 * 1024 * 1024];
    let msg = invalid(std::str::from_utf8(&big).unwrap());
    assert!(msg.contains("limited to 4194304 bytes"), "{msg}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.yaml");
    std::fs::write(&path, &big).unwrap();
    let err = load_definition(&path).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput);
    assert!(err.message.contains("10485760 bytes"), "{}", err.message);
}

#[test]
fn directories_and_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        load_definition(dir.path()).unwrap_err().kind,
        ErrorKind::InvalidInput
    );
    assert_eq!(
        load_definition(&dir.path().join("nope.yaml"))
            .unwrap_err()
            .kind,
        ErrorKind::NotFound
    );
}

/// serde_norway counts alias expansions and stops at 100 per event ("repetition limit
/// exceeded"); our schema has no field that accepts a nested list, so a bomb aimed at the
/// definition is a type error before it expands at all. Both end quickly in exit 4.
#[test]
fn alias_bombs_are_refused() {
    let mut bomb = String::from("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for (prev, name) in "abcdefgh".chars().zip("bcdefghi".chars()) {
        let refs = vec![format!("*{prev}"); 9].join(", ");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
    }
    let generic = serde_norway::from_str::<serde_norway::Value>(&bomb).unwrap_err();
    assert!(generic.to_string().contains("repetition limit exceeded"));

    let aimed = MINIMAL.replace(
        "  instructions: [Return]\n",
        &format!(
            "  instructions: &i [Return]\n  successCriteria: {}\n",
            "[*i, *i, *i, *i, *i, *i, *i, *i]"
        ),
    );
    assert!(invalid(&aimed).contains("spec.successCriteria[0]: invalid type: sequence"));
    // Aliases of plain scalars are ordinary YAML and accepted.
    let scalar = MINIMAL.replace(
        "objective: Test",
        "objective: &o Test\n  successCriteria: [*o]",
    );
    let def = parse_definition(scalar.as_bytes(), "a.yaml").unwrap();
    assert_eq!(def.spec.success_criteria, vec!["Test".to_string()]);
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    let deep = MINIMAL.replace(
        "[Return]",
        &format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
    );
    let msg = invalid(&deep);
    assert!(
        msg.starts_with("a.yaml:7: `[`/`{` nested more than 128 levels deep"),
        "{msg}"
    );
    let deep = MINIMAL.replace("[Return]", &"{a: ".repeat(4000));
    invalid(&deep);
    // Brackets inside quoted text or comments do not count.
    let quoted = MINIMAL.replace(
        "objective: Test",
        &format!("objective: '{}' # {}", "[".repeat(500), "{".repeat(500)),
    );
    parse_definition(quoted.as_bytes(), "a.yaml").unwrap();
    let quoted = MINIMAL.replace(
        "objective: Test",
        &format!("objective: \"\\\" {}\"", "[".repeat(500)),
    );
    parse_definition(quoted.as_bytes(), "a.yaml").unwrap();
}

#[test]
fn definitions_never_hold_wrong_types() {
    assert!(
        invalid(&MINIMAL.replace("test_agent", "[a, b]")).contains("metadata.name: invalid type")
    );
    assert!(
        invalid(&MINIMAL.replace("objective: Test", "objective: {a: 1}"))
            .contains("spec.objective: invalid type")
    );
    assert!(
        invalid(&format!("{MINIMAL}  execution:\n    maxTurns: 1.5\n"))
            .contains("spec.execution.maxTurns: invalid type")
    );
    assert!(
        invalid(&format!("{MINIMAL}  execution: [1]\n")).contains("spec.execution: invalid type")
    );
    assert!(
        invalid(&format!(
            "{MINIMAL}  execution:\n    maxTurns: 99999999999999999999999\n"
        ))
        .contains("spec.execution.maxTurns")
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Err(e) = parse_definition(&bytes, "fuzz.yaml") {
            prop_assert_eq!(e.kind, ErrorKind::InvalidInput);
        }
    }

    /// Random text over YAML's structural alphabet reaches far deeper into the parser than
    /// random bytes: anchors, aliases, tags, flow and block collections, quotes, documents.
    #[test]
    fn yaml_shaped_noise_never_panics(
        text in "(apiVersion|kind|metadata|spec|name|objective|instructions|capabilities|required|optional|execution|maxTurns|output|format|&a|\\*a|!!str|!!null|!!map|!!seq|<<|---|\\.\\.\\.|[-:,?|>#'\"\\[\\]{} \n\t~0-9a-z]){0,120}"
    ) {
        if let Err(e) = parse_definition(text.as_bytes(), "fuzz.yaml") {
            prop_assert_eq!(e.kind, ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn mutated_definitions_never_panic(
        flips in proptest::collection::vec((0usize..400, any::<u8>()), 1..8)
    ) {
        let mut bytes = std::fs::read(fixtures().join("full.yaml")).unwrap();
        for (at, byte) in flips {
            let at = at % bytes.len();
            bytes[at] = byte;
        }
        match parse_definition(&bytes, "fuzz.yaml") {
            // Whatever survives the mutation is a valid definition, so it round-trips.
            Ok(def) => prop_assert_eq!(def.validate("again"), Ok(())),
            Err(e) => prop_assert_eq!(e.kind, ErrorKind::InvalidInput),
        }
    }

    #[test]
    fn generated_definitions_round_trip(
        name in "[A-Za-z0-9_-]{1,40}",
        objective in "\\PC{1,60}",
        instructions in proptest::collection::btree_set("[a-z][a-z ]{0,30}", 1..6),
        required in proptest::collection::btree_set("[a-z_]{1,12}", 0..4),
        max_turns in 1u32..=1024,
        wall in proptest::option::of(1u64..10_000_000),
        retries in 0u32..=255,
    ) {
        prop_assume!(!objective.trim().is_empty());
        prop_assume!(instructions.iter().all(|i| !i.trim().is_empty()));
        let mut def = minimal_in_memory();
        def.metadata.name = name;
        def.spec.objective = objective;
        def.spec.instructions = instructions.into_iter().collect();
        if !required.is_empty() {
            def.spec.capabilities.required = required.into_iter().collect();
        }
        def.spec.execution.max_turns = max_turns;
        def.spec.execution.max_wall_clock_ms = wall;
        def.spec.execution.max_pure_retries = retries;
        let yaml = serde_norway::to_string(&def).unwrap();
        let again = parse_definition(yaml.as_bytes(), "gen.yaml").unwrap();
        prop_assert_eq!(again.definition_hash(), def.definition_hash());
        prop_assert_eq!(again, def);
    }
}

#[test]
fn max_repeated_calls_is_optional_and_left_out_of_the_hash_when_absent() {
    let plain = parse_definition(MINIMAL.as_bytes(), "a.yaml").unwrap();
    assert_eq!(plain.spec.execution.max_repeated_calls, None);
    assert!(!plain.canonical_json().contains("maxRepeatedCalls"));
    assert_eq!(plain.definition_hash(), MINIMAL_HASH);
    let yaml = format!("{MINIMAL}  execution:\n    maxRepeatedCalls: 0\n");
    let off = parse_definition(yaml.as_bytes(), "a.yaml").unwrap();
    assert_eq!(off.spec.execution.max_repeated_calls, Some(0));
    assert!(
        off.canonical_json()
            .ends_with("\"maxPureRetries\":1,\"maxRepeatedCalls\":0},\"output\":{\"format\":\"text\",\"requiredFields\":[]}}}"),
        "{}",
        off.canonical_json()
    );
    assert_ne!(off.definition_hash(), MINIMAL_HASH);
    let yaml = format!("{MINIMAL}  execution:\n    maxRepeatedCalls: ~\n");
    let null = parse_definition(yaml.as_bytes(), "a.yaml").unwrap();
    assert_eq!(null.definition_hash(), MINIMAL_HASH);
    let err = invalid(&format!(
        "{MINIMAL}  execution:\n    maxRepeatedCalls: 101\n"
    ));
    assert!(
        err.contains("maxRepeatedCalls") && err.contains("between 0 (off) and 100"),
        "{err}"
    );
}
