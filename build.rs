//! Link options of the `agentmesh` binary, where Rust links with its own lld
//! (x86_64-unknown-linux-gnu). Set here because a profile cannot carry `rustflags` without
//! nightly, and target `rustflags` in `.cargo/config.toml` would rebuild every crate.
//!
//! - `--icf=all` folds functions whose code is identical (0.4 MB): sound for Rust, which does
//!   not promise distinct addresses for distinct functions.
//! - `-z pack-relative-relocs` stores the 2.1 MB of relative relocations of a position-
//!   independent binary as a 30 KB bitmap (`.relr.dyn`); the binary then needs glibc ≥ 2.36.
//!
//! BENCHMARKS.md "The shipped binary" has the figures.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
