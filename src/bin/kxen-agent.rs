//! The `kxen-agent` binary: everything lives in the library.
fn main() {
    std::process::exit(kxen::cli::kxen::main());
}
