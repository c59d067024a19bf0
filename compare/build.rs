//! `cfg(rig)` for this package's targets: the demo's tests it compiles again
//! (`Cargo.toml`'s `[[test]]`s from `../tests`) run against the async twin
//! (`tests/common/either.rs`).

fn main() {
    println!("cargo:rustc-check-cfg=cfg(rig)");
    println!("cargo:rustc-cfg=rig");
}
