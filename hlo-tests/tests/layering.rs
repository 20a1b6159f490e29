//! The workspace's shape, checked: every library crate stays under 15k lines, no two
//! modules of a crate import each other (directly or around a cycle), and only the compile
//! driver sequences phases (no other library or tool code calls the optimizer's default
//! pipeline, the TPU lowering or the partitioner directly).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library crates: name and source directory, from the workspace root.
const LIBRARIES: [(&str, &str); 11] = [
    ("hlo-ir", "ir/src"),
    ("hlo-check", "ir/check/src"),
    ("hlo-io", "ir/io/src"),
    ("hlo-interp", "compiler/interp/src"),
    ("hlo-passes", "compiler/passes/src"),
    ("hlo-spmd", "compiler/spmd/src"),
    ("hlo-tpu", "compiler/tpu/src"),
    ("hlo-driver", "compiler/driver/src"),
    ("hlo-runtime", "runtime/src"),
    ("hlo-kernels", "runtime/kernels/src"),
    ("hlo-fuzz", "tools/fuzz/src"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The text before the first `#[cfg(test)]` item, without line comments.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// Names following `prefix` (`crate::` or `super::`) in `code`.
fn paths_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn every_library_crate_stays_under_15k_lines() {
    let mut report = Vec::new();
    for (name, dir) in LIBRARIES {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        let lines: usize = files
            .iter()
            .map(|f| std::fs::read_to_string(f).expect("readable").lines().count())
            .sum();
        report.push(format!("{name}: {lines} lines in {} files", files.len()));
        assert!(lines > 0, "{name}: no source found in {dir}");
        assert!(lines <= 15_000, "{name} has {lines} lines (over 15k): split it by role");
    }
    println!("{}", report.join("\n"));
}

/// The top-level modules of a crate and the top-level modules each one names.
fn module_graph(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(dir).expect("under the crate");
        let parts: Vec<String> =
            rel.with_extension("").iter().map(|s| s.to_string_lossy().into_owned()).collect();
        let top = parts[0].clone();
        if parts.len() == 1 && matches!(top.as_str(), "lib" | "main") {
            continue; // the crate root declares every module
        }
        if top == "tests" {
            continue; // white-box tests see everything
        }
        let code = code_of(&std::fs::read_to_string(f).expect("readable"));
        let mut deps = paths_after(&code, "crate::");
        // `super::` in a top-level module's own file names the crate root's items.
        let top_level_file = parts.len() == 1 || (parts.len() == 2 && parts[1] == "mod");
        if top_level_file {
            deps.extend(paths_after(&code, "super::"));
        }
        graph.entry(top.clone()).or_default().extend(deps.into_iter().filter(|d| *d != top));
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((node, path)) = stack.pop() {
        for next in graph.get(&node).into_iter().flatten() {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut p = path.clone();
                p.push(next.clone());
                stack.push((next.clone(), p));
            }
        }
    }
    None
}

#[test]
fn no_import_cycle_between_the_modules_of_a_crate() {
    let mut cycles = Vec::new();
    for (name, dir) in LIBRARIES.iter().chain(&[("hlo-tools", "tools/src")]) {
        let graph = module_graph(&root().join(dir));
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        assert!(!files.is_empty(), "{name}: no source found in {dir}");
        for module in graph.keys() {
            if let Some(c) = cycle_from(&graph, module) {
                cycles.push(format!("{name}: {}", c.join(" -> ")));
                break;
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycle_from(&g, "a"), Some(vec!["a".into(), "b".into(), "a".into()]));
    assert_eq!(cycle_from(&g, "c"), None);
    let code = code_of("use crate::x::Y;\n// crate::comment\nfn f() { super::z(); }\n");
    assert_eq!(paths_after(&code, "crate::"), BTreeSet::from(["x".to_string()]));
    assert_eq!(paths_after(&code, "super::"), BTreeSet::from(["z".to_string()]));
}

/// Calls that run a compile phase; outside the driver (and the phase's own crate) they
/// would sequence phases a second way.
const PHASE_CALLS: [(&str, &str); 4] = [
    ("default_pipeline()", "the optimize phase"),
    ("lower::lower(", "the lower phase"),
    ("devices::plan(", "the partition phase"),
    ("check::check(", "the check phase"),
];

#[test]
fn only_the_driver_sequences_phases() {
    // The driver (`compiler/driver`) and the crates that define the phases
    // (`compiler/passes`, `ir`, `ir/check`) are not scanned.
    let mut found = Vec::new();
    for dir in [
        "runtime/src",
        "tools/src",
        "tools/fuzz/src",
        "tools/python/src",
        "compiler/tpu/src",
        "compiler/spmd/src",
        "compiler/interp/src",
    ] {
        let mut files = Vec::new();
        rust_files(&root().join(dir), &mut files);
        for f in files {
            let code = code_of(&std::fs::read_to_string(&f).expect("readable"));
            for (call, phase) in PHASE_CALLS {
                // The partitioner's own `plan` and the lowering's `lower` are defined in
                // their crates; a call from inside those files is the phase itself.
                let defining = (call == "devices::plan(" && f.ends_with("devices.rs"))
                    || (call == "lower::lower(" && f.ends_with("lower.rs"));
                if code.contains(call) && !defining {
                    found.push(format!("{}: {phase} (`{call}`)", f.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "phases sequenced outside hlo-driver:\n{}", found.join("\n"));
}
