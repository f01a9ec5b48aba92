//! The workspace's crates form layers, and a crate depends only on crates of lower layers: no
//! back-edge (a lower crate reaching up, as `load` once reached `diagnose` for the sweep), so
//! each layer builds and is tested without the ones above it. Read from `cargo metadata`, the
//! manifests themselves.

use std::collections::BTreeMap;

/// Each crate's layer (the README's architecture section lists them in this order).
const LAYERS: &[(&str, u32)] = &[
    ("headroom-core", 0),
    ("headroom-testkit", 0),
    ("headroom-signals", 1),
    ("headroom-sim", 1),
    ("headroom-wire", 1),
    ("headroom-diagnose", 2),
    ("headroom-load", 2),
    ("headroom-slo", 2),
    ("headroom-gateway", 2),
    ("headroom-sweep", 3),
    ("headroom-report", 3),
    ("headroom-plan", 4),
    ("headroom-cli", 5),
];

/// `(crate, [(workspace dependency, kind)])` of every workspace member, kind `normal`, `dev` or
/// `build`.
fn workspace_graph() -> Vec<(String, Vec<(String, String)>)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--manifest-path",
        ])
        .arg(manifest)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata JSON");
    let members: Vec<String> = m["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    m["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| {
                    let name = d["name"].as_str()?.to_string();
                    let kind = d["kind"].as_str().unwrap_or("normal").to_string();
                    members.contains(&name).then_some((name, kind))
                })
                .collect();
            (p["name"].as_str().unwrap_or_default().to_string(), deps)
        })
        .collect()
}

/// Every edge that breaks the layering, named: a normal or build dependency on a crate of the
/// same or a higher layer, a dev-dependency (tests) on a higher one, or a crate of no layer.
fn back_edges(graph: &[(String, Vec<(String, String)>)]) -> Vec<String> {
    let layer: BTreeMap<&str, u32> = LAYERS.iter().copied().collect();
    let mut bad = Vec::new();
    for (name, deps) in graph {
        let Some(&from) = layer.get(name.as_str()) else {
            bad.push(format!(
                "{name} has no layer: add it to LAYERS (and the README)"
            ));
            continue;
        };
        for (dep, kind) in deps {
            let Some(&to) = layer.get(dep.as_str()) else {
                continue; // reported as a crate of its own
            };
            let ok = if kind == "dev" { to <= from } else { to < from };
            if !ok {
                bad.push(format!(
                    "{name} (layer {from}) -> {dep} (layer {to}), a {kind} dependency"
                ));
            }
        }
    }
    bad
}

#[test]
fn the_crate_graph_has_no_back_edge() {
    let graph = workspace_graph();
    assert!(
        graph.iter().any(|(n, _)| n == "headroom-sweep"),
        "cargo metadata lists the workspace"
    );
    let bad = back_edges(&graph);
    assert!(
        bad.is_empty(),
        "edges against the layering:\n{}",
        bad.join("\n")
    );
}

/// The check itself names an upward edge (the one `load -> diagnose` was) and a crate it does
/// not know.
#[test]
fn an_upward_edge_is_named() {
    let g = |n: &str, deps: &[(&str, &str)]| {
        (
            n.to_string(),
            deps.iter()
                .map(|(d, k)| (d.to_string(), k.to_string()))
                .collect::<Vec<_>>(),
        )
    };
    let graph = vec![
        g(
            "headroom-load",
            &[("headroom-core", "normal"), ("headroom-diagnose", "normal")],
        ),
        g("headroom-signals", &[("headroom-core", "normal")]),
        g("headroom-new", &[]),
    ];
    assert_eq!(
        back_edges(&graph),
        vec![
            "headroom-load (layer 2) -> headroom-diagnose (layer 2), a normal dependency",
            "headroom-new has no layer: add it to LAYERS (and the README)",
        ]
    );
}
