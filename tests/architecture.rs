//! The architecture invariants of `docs/ARCHITECTURE.md`, checked against the real crate graph
//! (`cargo metadata`). Each invariant is an absence: an edge that must not exist.

use std::collections::{BTreeMap, BTreeSet};

use cargo_metadata::{DependencyKind, MetadataCommand};

/// Normal (non-dev, non-build) dependencies of every workspace crate, by name.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let metadata = MetadataCommand::new()
        .manifest_path(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
        .no_deps()
        .exec()
        .expect("cargo metadata");
    metadata
        .workspace_packages()
        .into_iter()
        .map(|p| {
            let deps =
                p.dependencies.iter().filter(|d| d.kind == DependencyKind::Normal).map(|d| d.name.clone()).collect();
            (p.name.to_string(), deps)
        })
        .collect()
}

fn assert_absent(graph: &BTreeMap<String, BTreeSet<String>>, krate: &str, forbidden: &[&str], why: &str) {
    let deps = graph.get(krate).unwrap_or_else(|| panic!("crate {krate} is missing from the workspace"));
    let found: Vec<&&str> = forbidden.iter().filter(|f| deps.contains(**f)).collect();
    assert!(found.is_empty(), "{krate} must not depend on {found:?}: {why}");
}

const OURS: &[&str] = &[
    "gateway-core",
    "gateway-auth",
    "gateway-limits",
    "gateway-domain",
    "gateway-store",
    "gateway-redis",
    "gateway-httpsig",
    "gateway-fuzz",
    "gateway-http",
    "gateway-ws",
    "gateway-client",
    "gatewayd",
    "gatewayctl",
];

const TRANSPORT: &[&str] = &["axum", "hyper", "http", "tower", "tower-http", "tokio-tungstenite", "utoipa"];

#[test]
fn http_has_one_serving_path() {
    let g = graph();
    assert_absent(
        &g,
        "gateway-http",
        &["httparse", "axum-server"],
        "requests are parsed by hyper alone, and one accept loop serves TCP and TLS",
    );
    assert_absent(&g, "gateway-http", &["gateway-ws", "gatewayd", "gatewayctl"], "dependencies point inward");
    for krate in OURS {
        let deps = g.get(*krate).unwrap_or_else(|| panic!("crate {krate} is missing from the workspace"));
        assert!(!deps.contains("axum-server"), "{krate}: TLS is served by gateway-http's own accept loop");
    }
}

#[test]
fn core_depends_on_no_crate_of_ours() {
    assert_absent(&graph(), "gateway-core", OURS, "it is the shared vocabulary at the centre");
}

#[test]
fn limits_stands_alone_without_axum() {
    let g = graph();
    assert_absent(&g, "gateway-limits", OURS, "other services embed it on its own");
    assert_absent(&g, "gateway-limits", &["axum", "hyper"], "it is usable outside axum");
}

#[test]
fn domain_knows_nothing_of_transport_or_sql() {
    let g = graph();
    assert_absent(&g, "gateway-domain", TRANSPORT, "the domain knows nothing of HTTP or WebSockets");
    assert_absent(&g, "gateway-domain", &["sqlx", "rusqlite", "redis"], "storage is reached through ports");
    assert_absent(
        &g,
        "gateway-domain",
        &["gateway-http", "gateway-ws", "gateway-store", "gatewayd"],
        "dependencies point inward",
    );
}

#[test]
fn auth_knows_nothing_of_transport_or_storage() {
    let g = graph();
    assert_absent(&g, "gateway-auth", TRANSPORT, "login is transport-independent");
    assert_absent(
        &g,
        "gateway-auth",
        &["sqlx", "rusqlite", "gateway-domain", "gateway-store", "gateway-http", "gateway-ws"],
        "it sees membership through a trait",
    );
}

#[test]
fn only_the_transport_crates_know_the_wire() {
    let g = graph();
    for krate in ["gateway-core", "gateway-auth", "gateway-limits", "gateway-domain", "gateway-store"] {
        assert_absent(
            &g,
            krate,
            &["axum", "utoipa", "tokio-tungstenite"],
            "only gateway-http and gateway-ws know the wire format",
        );
    }
}

#[test]
fn transport_reaches_storage_only_through_the_domain() {
    let g = graph();
    for krate in ["gateway-http", "gateway-ws"] {
        assert_absent(
            &g,
            krate,
            &["gateway-store", "sqlx", "rusqlite", "gatewayd"],
            "handlers call domain ports, never SQL",
        );
    }
    assert_absent(
        &g,
        "gateway-store",
        &["gateway-http", "gateway-ws", "axum", "gatewayd"],
        "the store is below the transport",
    );
}

#[test]
fn only_gateway_redis_knows_redis() {
    let g = graph();
    for (krate, deps) in &g {
        if krate != "gateway-redis" {
            assert!(!deps.contains("redis"), "{krate} depends on redis: cluster state lives in gateway-redis");
        }
    }
    assert_absent(
        &g,
        "gateway-redis",
        &["gateway-domain", "gateway-store", "gateway-http", "gateway-ws", "gatewayd", "axum", "sqlx"],
        "it implements the limiter's and the login's storage traits, and knows nothing of HTTP or the domain",
    );
}

#[test]
fn the_signing_profile_is_pure_and_shared_by_server_and_clients() {
    let g = graph();
    let ours_but_core: Vec<&str> = OURS.iter().copied().filter(|c| *c != "gateway-core").collect();
    assert_absent(&g, "gateway-httpsig", &ours_but_core, "the SDK and the server both sign and verify with it");
    assert_absent(&g, "gateway-httpsig", TRANSPORT, "it works on request parts, not on an HTTP library's types");
}

#[test]
fn the_client_sdk_depends_on_no_server_crate() {
    assert_absent(
        &graph(),
        "gateway-client",
        &[
            "gateway-auth",
            "gateway-limits",
            "gateway-domain",
            "gateway-store",
            "gateway-redis",
            "gateway-http",
            "gateway-ws",
            "gatewayd",
            "axum",
            "sqlx",
        ],
        "clients embed the SDK without the server",
    );
}

#[test]
fn nothing_depends_on_the_fuzzing_properties() {
    let g = graph();
    for (krate, deps) in &g {
        assert!(!deps.contains("gateway-fuzz"), "{krate} depends on gateway-fuzz, which holds tests only");
    }
}

#[test]
fn nothing_depends_on_the_binary() {
    let g = graph();
    for (krate, deps) in &g {
        assert!(!deps.contains("gatewayd"), "{krate} depends on the gatewayd binary");
    }
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|name| name == "target") {
                continue;
            }
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// `unsafe_code` is denied across the workspace; the one place allowed to lift it is the
/// `sched_setattr(2)` call in `bins/gatewayd/src/workers.rs`, which nothing safe wraps. Any
/// mention of the lint in a source (an `allow`, an `expect`, a `cfg_attr`, a crate-wide `#!`)
/// counts; this file, which names it, is left out.
#[test]
fn unsafe_code_is_allowed_in_one_function_only() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["crates", "bins", "xtask", "tests", "fuzz"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "the walk found the sources: {}", files.len());
    let lint = concat!("unsafe", "_code");
    let mut mentions = Vec::new();
    for path in &files {
        let name = path.strip_prefix(&root).expect("under the root").display().to_string();
        if name == "tests/architecture.rs" {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("source");
        for (at, _) in text.match_indices(lint) {
            let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let rest = &text[line_start..];
            let two_lines: String = rest.lines().take(2).collect::<Vec<_>>().join("\n");
            mentions.push((name.clone(), two_lines));
        }
    }
    assert_eq!(
        mentions,
        [(
            "bins/gatewayd/src/workers.rs".to_owned(),
            format!(
                "#[allow({lint})]\nfn sched_setattr(policy: u32, nice: i32, runtime_ns: u64) -> std::io::Result<()> {{"
            )
        )],
        "where the unsafe_code lint is mentioned"
    );
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("workspace manifest");
    assert!(manifest.contains(&format!("{lint} = \"deny\"")), "the workspace denies unsafe code");
}

/// The error body (`{"error", "code", "details"}`) is written in one place,
/// `gateway-http`'s `ApiError`: the router's answers, the answers the connection writes itself
/// and the WebSocket upgrade's refusals all go through it. A server source that spells the
/// body's `"code"` key in a string, or declares a body type of its own, is a second renderer.
#[test]
fn the_error_body_has_one_renderer() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["crates", "bins"] {
        rust_files(&root.join(dir), &mut files);
    }
    let key = concat!("\"", "code", "\":");
    let declared = concat!("struct ", "ErrorBody");
    let mut renderers = Vec::new();
    for path in &files {
        let name = path.strip_prefix(&root).expect("under the root").display().to_string();
        // The SDK parses bodies (its tests spell them), the fuzz crate checks their shape, and
        // tests are readers; only server sources are renderers.
        if name.starts_with("crates/gateway-client/")
            || name.starts_with("crates/gateway-fuzz/")
            || !name.contains("/src/")
        {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("source");
        let source = text.split("#[cfg(test)]").next().unwrap_or_default();
        if source.contains(key) || source.contains(declared) {
            renderers.push(name);
        }
    }
    renderers.sort();
    assert_eq!(
        renderers,
        ["crates/gateway-http/src/error.rs", "crates/gateway-http/src/openapi.rs"],
        "where the error body is written (openapi.rs declares its schema only)"
    );
}

/// `gateway-limits` is a crate another service can embed: nothing in it names this gateway's
/// metrics (`icn_…`); the gateway gives its names with `set_metric_names`.
#[test]
fn the_limiter_crate_names_no_metric_of_the_gateway() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/gateway-limits");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 5, "the walk found the crate: {}", files.len());
    let prefix = concat!("icn", "_");
    let mut named = Vec::new();
    for path in files.iter().chain([root.join("README.md")].iter()) {
        let text = std::fs::read_to_string(path).expect("source");
        if text.contains(prefix) {
            named.push(path.display().to_string());
        }
    }
    assert!(named.is_empty(), "gateway metric names in gateway-limits: {named:?}");
}

/// Every file of the repository a clone has (sources, docs, configuration, CI, fixtures).
fn repository_files(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if path.is_dir() {
            if !matches!(name, "target" | ".git" | "corpus" | "artifacts" | "node_modules") {
                repository_files(&path, found);
            }
        } else {
            found.push(path);
        }
    }
}

/// The repository stands alone: docs/INTERFACE.md is the reference of the interface, and no
/// file sends its reader to a document a clone does not have (the sibling directory the
/// interface was first written in, or its files).
#[test]
fn the_repository_cites_no_document_outside_it() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut files = Vec::new();
    repository_files(root, &mut files);
    assert!(files.iter().any(|f| f.ends_with("docs/INTERFACE.md")), "docs/INTERFACE.md is the interface's reference");
    // Spelled in pieces so that this file does not match itself.
    let outside = [["..", "/shared"].concat(), ["CONTRACT", ".md"].concat(), ["shared/", "spec"].concat()];
    let mut found = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        for (number, line) in text.lines().enumerate() {
            if outside.iter().any(|o| line.contains(o.as_str())) {
                found.push(format!("{}:{}: {}", file.display(), number + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "files that cite a document outside the repository:\n{}", found.join("\n"));
}
