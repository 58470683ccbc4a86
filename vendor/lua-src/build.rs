//! Cargo fingerprints a path crate by the files rustc reads, and the Lua sources are not
//! among them: without this an edit to a C file left mlua's build of Lua as it was. The
//! build scripts that compile Lua with this crate rerun when it is rebuilt.
fn main() {
    println!("cargo:rerun-if-changed=lua-5.1.5");
}
