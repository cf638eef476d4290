//! Link options of the `agentmesh` binary, where Rust links with its own lld
//! (x86_64-unknown-linux-gnu). Set here because a profile cannot carry `rustflags` without
//! nightly, and target `rustflags` in `.cargo/config.toml` would rebuild every crate.
//!
//! - `--icf=all` folds functions whose code is identical (0.4 MB): sound for Rust, which does
//!   not promise distinct addresses for distinct functions.
//!
//! Not `-z pack-relative-relocs` (2.1 MB less): the binary would then need glibc ≥ 2.36 where
//! it runs, 2.34 without it.
//!
//! BENCHMARKS.md "The shipped binary" has the figures.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
    }
}
