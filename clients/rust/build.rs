//! Generates the wire types from the repository's `proto/` directory at build time
//! (prost-build with Debian's `protoc`), so the crate always matches the protos it is
//! built with: every `.proto` of `proto/sepp/api/v1/` (whatever files and RPCs it holds)
//! plus Google's rich-error messages (`google/rpc/status.proto`, `error_details.proto`).

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let proto_root = manifest.join("../../proto");
    let api = proto_root.join("sepp/api/v1");
    println!("cargo:rerun-if-changed={}", api.display());
    println!("cargo:rerun-if-changed={}", proto_root.join("google/rpc").display());

    let mut files: Vec<PathBuf> = std::fs::read_dir(&api)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", api.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().map_or(false, |ext| ext == "proto"))
        .collect();
    files.sort();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    files.push(proto_root.join("google/rpc/status.proto"));
    files.push(proto_root.join("google/rpc/error_details.proto"));

    let mut config = prost_build::Config::new();
    // Ordered maps: deterministic encoding, and the validator walks keys in order.
    config.btree_map(["."]);
    config
        .compile_protos(&files, &[proto_root.clone()])
        .unwrap_or_else(|e| panic!("protoc failed on {}: {e}", proto_root.display()));
}
