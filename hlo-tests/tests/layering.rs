//! The workspace's shape, checked:
//! - every library crate (every workspace member with a `src/lib.rs`, read from the
//!   manifests) stays under 15k lines, and every source file under 2,000 (over 1,500 only
//!   with a written reason at its top);
//! - the modules of a folder (the crate root's modules, a folder module's files) do not
//!   import each other around a cycle, at every depth;
//! - the crates that are kept small by what they depend on stay so: the chip model
//!   depends on no crate of the workspace, the host runtime reaches neither the TPU
//!   lowering nor the chip model, the partitioner does not reach the interpreter;
//! - only the compile driver sequences phases (no other library or tool code calls the
//!   optimizer's default pipeline, the TPU lowering or the partitioner directly).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `members` of the workspace's `Cargo.toml`, as written (`compiler/spmd`, ...).
fn workspace_members() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).expect("the workspace manifest");
    let list = text
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("a `members = [...]` list in the workspace manifest");
    list.lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim().trim_end_matches(','))
        .filter(|l| !l.is_empty())
        .map(|l| l.trim_matches('"').to_string())
        .collect()
}

/// The text of a member's `Cargo.toml`.
fn manifest(member: &str) -> String {
    let path = root().join(member).join("Cargo.toml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `name` of a member's `[package]`.
fn package_name(member: &str) -> String {
    manifest(member)
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "name").then(|| value.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| panic!("{member}/Cargo.toml: no package name"))
}

/// The library crates: every workspace member with a `src/lib.rs` (so a crate is checked
/// from the day it joins the workspace), by name, with its source directory.
fn libraries() -> Vec<(String, String)> {
    let libs: Vec<(String, String)> = workspace_members()
        .into_iter()
        .filter(|m| root().join(m).join("src/lib.rs").is_file())
        .map(|m| (package_name(&m), format!("{m}/src")))
        .collect();
    for known in ["hlo-ir", "hlo-fabric", "hlo-interp", "hlo-spmd", "hlo-devices", "hlo-runtime"] {
        assert!(libs.iter().any(|(n, _)| n == known), "{known} is not among {libs:?}");
    }
    libs
}

/// Every `.rs` file under `dir`, in order (build outputs and hidden folders left out).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if p.is_dir() {
            if name != "target" && !name.starts_with('.') {
                rust_files(&p, out);
            }
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

#[test]
fn every_library_crate_stays_under_15k_lines() {
    let mut report = Vec::new();
    for (name, dir) in libraries() {
        let mut files = Vec::new();
        rust_files(&root().join(&dir), &mut files);
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

/// What a file over this many lines must say at its top, in its leading comments.
const WHY_ONE_FILE: &str = "Why one file:";

/// Why `text` (the file `name`) is too long, if it is: over 2,000 lines, or over 1,500
/// without a line containing [`WHY_ONE_FILE`] among its leading comment lines.
fn length_problem(name: &str, text: &str) -> Option<String> {
    let lines = text.lines().count();
    if lines > 2_000 {
        return Some(format!("{name}: {lines} lines (over 2,000): split it along a seam"));
    }
    let header = text.lines().take_while(|l| {
        l.trim().is_empty() || l.trim_start().starts_with("//") || l.starts_with("#!")
    });
    if lines > 1_500 && !header.into_iter().any(|l| l.contains(WHY_ONE_FILE)) {
        return Some(format!(
            "{name}: {lines} lines (over 1,500): split it, or say `{WHY_ONE_FILE} ...` in its top comment"
        ));
    }
    None
}

#[test]
fn every_source_file_stays_under_2000_lines_and_says_why_over_1500() {
    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    assert!(files.len() > 100, "only {} .rs files found under {}", files.len(), root().display());
    let problems: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let name = f.strip_prefix(root()).unwrap_or(f).display().to_string();
            length_problem(&name, &std::fs::read_to_string(f).expect("readable"))
        })
        .collect();
    assert!(problems.is_empty(), "files too long:\n{}", problems.join("\n"));
}

#[test]
fn the_length_check_finds_long_files() {
    let body = "fn f() {}\n".repeat(1_600);
    assert!(length_problem("a.rs", &body).is_some());
    let why =
        format!("//! A model.\n//!\n//! {WHY_ONE_FILE} it mirrors one upstream file.\n\n{body}");
    assert_eq!(length_problem("a.rs", &why), None);
    // The reason counts only at the top, and nothing excuses 2,000 lines.
    assert!(length_problem("a.rs", &format!("{body}// {WHY_ONE_FILE} no\n")).is_some());
    assert!(length_problem("a.rs", &format!("{why}{}", "fn g() {}\n".repeat(500))).is_some());
    assert_eq!(length_problem("a.rs", &"fn f() {}\n".repeat(1_500)), None);
}

/// The module paths `code` names through `crate::`, `super::` (any number of them) and
/// `self::`, made absolute within the crate, for code in module `module` (`["a", "b"]` is
/// `crate::a::b`). `use` groups are expanded: `super::{a, b::c}` names `a` and `b::c`.
fn absolute_paths(code: &str, module: &[String]) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    for prefix in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(prefix) {
            let before = code[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue; // inside a longer path (`super::super::`) or a longer name
            }
            let mut at = i + prefix.len();
            let mut base: Vec<String> = match prefix {
                "crate::" => Vec::new(),
                "self::" => module.to_vec(),
                _ => module[..module.len().saturating_sub(1)].to_vec(),
            };
            while prefix == "super::" && code[at..].starts_with("super::") {
                base.pop();
                at += "super::".len();
            }
            path_tree(code, at, base, &mut out, 0);
        }
    }
    out
}

/// Parses the path tree at `code[at..]` (what follows a `::`: a name, `name::tree`, or a
/// `{tree, ...}` group), adding each path it names to `out` after `base`; returns where
/// it ends.
fn path_tree(
    code: &str,
    at: usize,
    base: Vec<String>,
    out: &mut BTreeSet<Vec<String>>,
    depth: usize,
) -> usize {
    let skip_ws = |mut i: usize| {
        while code.as_bytes().get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        i
    };
    let mut i = skip_ws(at);
    if depth > 16 || i >= code.len() {
        return i;
    }
    if code.as_bytes()[i] == b'{' {
        i += 1;
        loop {
            i = skip_ws(i);
            match code.as_bytes().get(i) {
                None => return i,
                Some(b'}') => return i + 1,
                Some(b',') => i += 1,
                Some(_) => {
                    let start = i;
                    i = path_tree(code, i, base.clone(), out, depth + 1);
                    if i == start {
                        i += 1; // `*`: names nothing in particular
                    }
                }
            }
        }
    }
    let name: String = code[i..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    if name.is_empty() {
        return i;
    }
    let end = i + name.len();
    let mut path = base;
    if name != "self" {
        path.push(name);
    }
    if code[end..].starts_with("::") {
        let after = path_tree(code, end + 2, path.clone(), out, depth + 1);
        if after == skip_ws(end + 2) {
            out.insert(path); // `a::*`
        }
        after
    } else {
        out.insert(path);
        end
    }
}

/// A folder's import graph: its child modules and, for each, the siblings it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// The import graph of every folder of the crate whose sources are in `dir`, by the
/// folder's module path (`[]` for the crate root, `["partition"]` for
/// `src/partition/`): code in `f::a` (or below it) naming `f::b` (or anything in it) is
/// an edge `a -> b` in folder `f`, and so is naming an item the folder's own file
/// re-exports from `b` (`super::X` for its `pub use b::X`). That file (`lib.rs`,
/// `main.rs`, `mod.rs`) declares the children and is no node; white-box tests
/// (`src/tests/`) and binaries (`src/bin/`) are left out.
fn module_graphs(dir: &Path) -> BTreeMap<Vec<String>, Graph> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut modules: Vec<(Vec<String>, PathBuf)> = Vec::new();
    for f in files {
        let rel = f.strip_prefix(dir).expect("under the crate");
        let mut parts: Vec<String> =
            rel.with_extension("").iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if matches!(parts.first().map(String::as_str), Some("tests" | "bin")) {
            continue;
        }
        if parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main") {
            parts.clear();
        } else if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        modules.push((parts, f));
    }
    let known: BTreeSet<Vec<String>> = modules.iter().map(|(m, _)| m.clone()).collect();
    // The items folder files import from their children: `f::X` -> the child of `f` it is in.
    let mut reexports: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for (folder, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).expect("readable"));
        for (i, _) in code.match_indices("use ") {
            if code[..i].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut paths = BTreeSet::new();
            path_tree(&code, i + "use ".len(), Vec::new(), &mut paths, 0);
            for p in paths {
                let mut child = folder.clone();
                child.push(p[0].clone());
                if p.len() >= 2 && known.contains(&child) {
                    let mut item = folder.clone();
                    item.push(p[p.len() - 1].clone());
                    reexports.insert(item, p[0].clone());
                }
            }
        }
    }
    let mut graphs: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
    for m in &known {
        if let Some((last, folder)) = m.split_last() {
            graphs.entry(folder.to_vec()).or_default().entry(last.clone()).or_default();
        }
    }
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).expect("readable"));
        for path in absolute_paths(&code, module) {
            let common = module.iter().zip(&path).take_while(|(a, b)| a == b).count();
            let (Some(from), Some(to)) = (module.get(common), path.get(common)) else {
                continue; // the module itself, an ancestor's items, or its own children
            };
            let folder = module[..common].to_vec();
            let mut sibling = folder.clone();
            sibling.push(to.clone());
            let to = match reexports.get(&sibling) {
                _ if known.contains(&sibling) => to.clone(),
                Some(child) if child != from => child.clone(),
                _ => continue, // an item of the folder's own file, or of `from` itself
            };
            graphs.entry(folder).or_default().entry(from.clone()).or_default().insert(to);
        }
    }
    graphs
}

/// A cycle through `start`, if there is one.
fn cycle_from(graph: &Graph, start: &str) -> Option<Vec<String>> {
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

/// One cycle of each folder of the crate in `dir` that has one, as `folder: a -> b -> a`.
fn cycles_in(dir: &Path) -> Vec<String> {
    let mut cycles = Vec::new();
    for (folder, graph) in module_graphs(dir) {
        let at = if folder.is_empty() { "crate".to_string() } else { folder.join("::") };
        if let Some(c) = graph.keys().find_map(|m| cycle_from(&graph, m)) {
            cycles.push(format!("{at}: {}", c.join(" -> ")));
        }
    }
    cycles
}

#[test]
fn no_import_cycle_between_the_modules_of_a_folder() {
    let mut cycles = Vec::new();
    let mut folders = BTreeSet::new();
    let mut edges_total = 0;
    for (name, dir) in libraries() {
        let dir = root().join(&dir);
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        assert!(!files.is_empty(), "{name}: no source found in {}", dir.display());
        for (folder, graph) in module_graphs(&dir) {
            let edges: usize = graph.values().map(BTreeSet::len).sum();
            edges_total += edges;
            let at = folder.join("::");
            println!("{name}:{at}: {} modules, {edges} imports between them", graph.len());
            folders.insert(format!("{name}:{at}"));
        }
        cycles.extend(cycles_in(&dir).into_iter().map(|c| format!("{name} ({c})")));
    }
    // The nested folders are seen, not only the crate roots.
    for f in [
        "hlo-spmd:partition",
        "hlo-runtime:exec",
        "hlo-runtime:codegen",
        "hlo-ir:text::resolve",
        "hlo-passes:fusion",
    ] {
        assert!(folders.contains(f), "folder {f} not checked: {folders:?}");
    }
    assert!(edges_total > 150, "only {edges_total} imports between modules found");
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let mut g = Graph::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(cycle_from(&g, "a"), Some(vec!["a".into(), "b".into(), "a".into()]));
    assert_eq!(cycle_from(&g, "c"), None);

    let module = ["f".to_string(), "m".to_string()];
    let code = code_of(
        "use super::{a, b::{c, self}, d::*};\nuse crate::x::Y;\n// crate::comment\n\
         fn f() { super::super::z::g(); self::h::i(); $crate::j::k!(); }\n",
    );
    let v = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let expected: BTreeSet<Vec<String>> = [
        v(&["f", "a"]),
        v(&["f", "b", "c"]),
        v(&["f", "b"]),
        v(&["f", "d"]),
        v(&["x", "Y"]),
        v(&["z", "g"]),
        v(&["f", "m", "h", "i"]),
        v(&["j", "k"]),
    ]
    .into_iter()
    .collect();
    assert_eq!(absolute_paths(&code, &module), expected);

    // Two files of a folder module that import each other, three levels down.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("layering_cycle");
    let _ = std::fs::remove_dir_all(&dir);
    let folder = dir.join("top/inner");
    std::fs::create_dir_all(&folder).expect("a temporary folder");
    let files = [
        ("lib.rs", "mod top;\n"),
        ("top/mod.rs", "mod inner;\n"),
        ("top/inner/mod.rs", "mod a;\nmod b;\nmod c;\npub use a::A;\n"),
        ("top/inner/a.rs", "use super::b::B;\npub struct A;\n"),
        ("top/inner/b.rs", "pub struct B;\nfn f() -> crate::top::inner::c::C { todo!() }\n"),
        ("top/inner/c.rs", "pub struct C(super::A);\nuse super::super::inner::a::A;\n"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("writable");
    }
    assert_eq!(cycles_in(&dir), ["top::inner: a -> b -> c -> a"]);
    // Through the folder's re-export (`super::A` for its `pub use a::A`) too.
    std::fs::write(dir.join("top/inner/c.rs"), "pub struct C(super::A);\n").expect("writable");
    assert_eq!(cycles_in(&dir), ["top::inner: a -> b -> c -> a"]);
    // Naming an item of the folder's own file is no edge.
    std::fs::write(dir.join("top/inner/c.rs"), "pub struct C(super::D);\n").expect("writable");
    assert!(cycles_in(&dir).is_empty());
}

/// The names of the packages `cargo tree --prefix none` lists (`name vX.Y.Z (path)`).
fn tree_packages(text: &str) -> BTreeSet<String> {
    text.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect()
}

/// `package`'s normal dependency closure (itself included), as cargo resolves it for a
/// build of that package alone (its features, not those other members ask for).
fn closure(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .current_dir(root())
        .args(["tree", "--frozen", "-e", "normal", "--prefix", "none", "-p", package])
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let packages = tree_packages(&String::from_utf8_lossy(&out.stdout));
    assert!(packages.contains(package), "cargo tree -p {package} lists {packages:?}");
    packages
}

/// What `package`'s closure holds that it must not: the members of `closure` that
/// `forbidden` names.
fn forbidden_in(
    package: &str,
    closure: &BTreeSet<String>,
    forbidden: impl Fn(&str) -> bool,
) -> Vec<String> {
    closure
        .iter()
        .filter(|p| *p != package && forbidden(p))
        .map(|p| format!("{package} depends on {p}"))
        .collect()
}

/// The workspace crates a member's manifest names in any dependency table (normal, dev,
/// build, per target).
fn manifest_workspace_deps(member: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut out = Vec::new();
    for line in manifest(member).lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.starts_with('[') {
            in_deps = line.trim_matches(['[', ']']).ends_with("dependencies");
        } else if in_deps && let Some((key, _)) = line.split_once('=') {
            let name = key.trim().split('.').next().unwrap_or_default().trim_matches('"');
            if name.starts_with("hlo-") || name.starts_with("hloc-") {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// The member (folder) whose package is `package`.
fn member_of(package: &str) -> String {
    workspace_members()
        .into_iter()
        .find(|m| package_name(m) == package)
        .unwrap_or_else(|| panic!("no workspace member is {package}"))
}

#[test]
fn the_leaf_and_host_crates_keep_their_dependency_closures() {
    let workspace: BTreeSet<String> = workspace_members().iter().map(|m| package_name(m)).collect();
    let mut wrong = Vec::new();
    // The chip model: tile programs in, cycles out; it knows nothing of the IR.
    let chip = member_of("hlo-chip");
    wrong.extend(
        manifest_workspace_deps(&chip).into_iter().map(|d| format!("{chip}/Cargo.toml names {d}")),
    );
    wrong.extend(forbidden_in("hlo-chip", &closure("hlo-chip"), |p| workspace.contains(p)));
    // The host runtime builds the driver without its TPU target.
    wrong.extend(forbidden_in("hlo-runtime", &closure("hlo-runtime"), |p| {
        matches!(p, "hlo-tpu" | "hlo-chip")
    }));
    // The partitioner decides where collectives go and runs nothing.
    wrong.extend(forbidden_in("hlo-spmd", &closure("hlo-spmd"), |p| p == "hlo-interp"));
    assert!(wrong.is_empty(), "dependencies that break the layering:\n{}", wrong.join("\n"));
}

#[test]
fn the_closure_check_finds_a_forbidden_crate() {
    let tree = "hlo-spmd v0.1.0 (/w/compiler/spmd)\nhlo-passes v0.1.0 (/w/compiler/passes)\n\
                hlo-interp v0.1.0 (/w/compiler/interp)\nhlo-ir v0.1.0 (/w/ir) (*)\n";
    let packages = tree_packages(tree);
    assert_eq!(packages.len(), 4);
    assert_eq!(
        forbidden_in("hlo-spmd", &packages, |p| p == "hlo-interp"),
        ["hlo-spmd depends on hlo-interp"]
    );
    assert!(forbidden_in("hlo-spmd", &packages, |p| p == "hlo-tpu").is_empty());
}

/// Calls that run a compile phase; outside the driver (and the phase's own crate) they
/// would sequence phases a second way.
const PHASE_CALLS: [(&str, &str); 5] = [
    ("default_pipeline()", "the optimize phase"),
    ("host_pipeline()", "the optimize phase"),
    ("lower::lower(", "the lower phase"),
    ("devices::plan(", "the partition phase"),
    ("check::check(", "the check phase"),
];

#[test]
fn only_the_driver_sequences_phases() {
    // Every library crate but the driver, the crates that define the phases (`hlo-passes`,
    // `hlo-ir`, `hlo-check`) and the tests' helpers.
    let mut found = Vec::new();
    let defining = ["hlo-driver", "hlo-passes", "hlo-ir", "hlo-check", "hlo-tests"];
    let scanned: Vec<String> = libraries()
        .into_iter()
        .filter(|(n, _)| !defining.contains(&n.as_str()))
        .map(|l| l.1)
        .collect();
    for must in ["runtime/src", "tools/src", "compiler/tpu/src", "compiler/spmd/src"] {
        assert!(scanned.iter().any(|d| d == must), "{must} is not scanned: {scanned:?}");
    }
    for dir in scanned {
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
