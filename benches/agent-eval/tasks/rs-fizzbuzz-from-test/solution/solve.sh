python3 - <<'PY'
src = open("src/lib.rs").read()
src = src.replace("    unimplemented!()\n", """\
    match (n % 3, n % 5) {
        (0, 0) => "FizzBuzz".to_string(),
        (0, _) => "Fizz".to_string(),
        (_, 0) => "Buzz".to_string(),
        _ => n.to_string(),
    }
""", 1)
open("src/lib.rs", "w").write(src)
PY
