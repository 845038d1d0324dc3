//! The `dwp` binary: everything lives in the library.
fn main() {
    std::process::exit(kxen::cli::dwp::main());
}
