//! Generates the protobuf messages (prost) from the vendored TiKV protos and the two gRPC
//! services minitikv serves (tonic, declared here with only the methods it implements).

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "kvrpcpb.proto",
    "pdpb.proto",
    "metapb.proto",
    "errorpb.proto",
    "deadlock.proto",
    "tracepb.proto",
    "resource_manager.proto",
    "replication_modepb.proto",
    "encryptionpb.proto",
    "raft_serverpb.proto",
    "disk_usage.proto",
    "include/eraftpb.proto",
];

/// PD methods served: (Rust method name, gRPC route name, request, response, streaming).
const PD_METHODS: &[(&str, &str, &str, &str, bool)] = &[
    (
        "get_members",
        "GetMembers",
        "GetMembersRequest",
        "GetMembersResponse",
        false,
    ),
    ("tso", "Tso", "TsoRequest", "TsoResponse", true),
    (
        "get_store",
        "GetStore",
        "GetStoreRequest",
        "GetStoreResponse",
        false,
    ),
    (
        "get_all_stores",
        "GetAllStores",
        "GetAllStoresRequest",
        "GetAllStoresResponse",
        false,
    ),
    (
        "get_region",
        "GetRegion",
        "GetRegionRequest",
        "GetRegionResponse",
        false,
    ),
    (
        "get_prev_region",
        "GetPrevRegion",
        "GetRegionRequest",
        "GetRegionResponse",
        false,
    ),
    (
        "scan_regions",
        "ScanRegions",
        "ScanRegionsRequest",
        "ScanRegionsResponse",
        false,
    ),
    (
        "get_region_by_id",
        "GetRegionByID",
        "GetRegionByIdRequest",
        "GetRegionResponse",
        false,
    ),
    (
        "get_gc_safe_point",
        "GetGCSafePoint",
        "GetGcSafePointRequest",
        "GetGcSafePointResponse",
        false,
    ),
    (
        "update_gc_safe_point",
        "UpdateGCSafePoint",
        "UpdateGcSafePointRequest",
        "UpdateGcSafePointResponse",
        false,
    ),
];

/// TiKV raw methods served: (Rust method name, gRPC route name, message prefix).
const TIKV_METHODS: &[(&str, &str, &str)] = &[
    ("raw_get", "RawGet", "RawGet"),
    ("raw_batch_get", "RawBatchGet", "RawBatchGet"),
    ("raw_put", "RawPut", "RawPut"),
    ("raw_batch_put", "RawBatchPut", "RawBatchPut"),
    ("raw_delete", "RawDelete", "RawDelete"),
    ("raw_batch_delete", "RawBatchDelete", "RawBatchDelete"),
    ("raw_scan", "RawScan", "RawScan"),
    ("raw_batch_scan", "RawBatchScan", "RawBatchScan"),
    ("raw_delete_range", "RawDeleteRange", "RawDeleteRange"),
    ("raw_compare_and_swap", "RawCompareAndSwap", "RawCas"),
];

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let proto_dir = dir.join("proto");
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=build.rs");

    let protoc = protoc_bin_vendored::protoc_bin_path().expect("vendored protoc binary");
    let files: Vec<PathBuf> = PROTOS.iter().map(|f| proto_dir.join(f)).collect();
    // `include/` first, so include/eraftpb.proto is known by its import name "eraftpb.proto".
    let includes = [proto_dir.join("include"), proto_dir.clone()];
    // prost-build 0.12 finds protoc through $PROTOC: use the vendored binary, never a
    // system one.
    std::env::set_var("PROTOC", protoc);
    prost_build::Config::new()
        .compile_protos(&files, &includes)
        .expect("compile the vendored TiKV protos");

    let codec = "tonic::codec::ProstCodec";
    let mut pd = tonic_build::manual::Service::builder()
        .name("PD")
        .package("pdpb");
    for &(name, route, req, resp, streaming) in PD_METHODS {
        let mut method = tonic_build::manual::Method::builder()
            .name(name)
            .route_name(route)
            .input_type(format!("crate::proto::pdpb::{req}"))
            .output_type(format!("crate::proto::pdpb::{resp}"))
            .codec_path(codec);
        if streaming {
            method = method.client_streaming().server_streaming();
        }
        pd = pd.method(method.build());
    }
    let mut tikv = tonic_build::manual::Service::builder()
        .name("Tikv")
        .package("tikvpb");
    for &(name, route, msg) in TIKV_METHODS {
        tikv = tikv.method(
            tonic_build::manual::Method::builder()
                .name(name)
                .route_name(route)
                .input_type(format!("crate::proto::kvrpcpb::{msg}Request"))
                .output_type(format!("crate::proto::kvrpcpb::{msg}Response"))
                .codec_path(codec)
                .build(),
        );
    }
    tonic_build::manual::Builder::new().compile(&[pd.build(), tikv.build()]);
}
