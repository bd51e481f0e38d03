//! Architecture invariant: inside every crate of the workspace the top-level modules form
//! no cycle. A module that needs something of a module that needs it back holds knowledge
//! that belongs in a third (as the runtime's run configuration, memory check and
//! communicator groups moved out of its executor).
//!
//! A module's dependencies are the `crate::<module>` paths in its code (comments are not
//! code: a doc link is no dependency), and `super::<module>` in a file directly under
//! `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Identifiers that follow `prefix` in `code`.
fn paths_after<'a>(code: &'a str, prefix: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    code.match_indices(prefix).filter_map(move |(i, _)| {
        // `crate::` inside a longer name (`my_crate::`) is another crate.
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let rest = &code[i + prefix.len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

fn code_without_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Adds the module dependencies of every file under `dir` (`depth` below `src`).
fn walk(dir: &Path, src: &Path, graph: &mut Graph) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, src, graph);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = first.trim_end_matches(".rs").to_string();
        if matches!(top.as_str(), "lib" | "main") {
            continue;
        }
        let code = code_without_comments(&std::fs::read_to_string(&path).unwrap());
        let mut deps: BTreeSet<String> = paths_after(&code, "crate::").map(String::from).collect();
        if rel.components().count() == 1 {
            deps.extend(paths_after(&code, "super::").map(String::from));
        }
        deps.remove(&top);
        graph.entry(top).or_default().extend(deps);
    }
}

/// A cycle of `graph` as its modules in order, if there is one.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            // Paths to items of the crate root (`crate::Error`) are not modules.
            if graph.contains_key(next) {
                if let Some(cycle) = visit(next, graph, done, stack) {
                    return Some(cycle);
                }
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
}

fn graph_of(files: &[(&str, &str)]) -> Graph {
    let mut graph = Graph::new();
    for (module, code) in files {
        let deps = paths_after(&code_without_comments(code), "crate::")
            .filter(|d| d != module)
            .map(String::from)
            .collect::<BTreeSet<_>>();
        graph.entry(module.to_string()).or_default().extend(deps);
    }
    graph
}

#[test]
fn the_checker_finds_a_cycle_and_ignores_comments_and_other_crates() {
    let cyclic = graph_of(&[
        ("engine", "use crate::checkpoint::Manifest;"),
        ("checkpoint", "use crate::optim::Optimizer;"),
        ("optim", "use crate::engine::Groups;"),
    ]);
    assert_eq!(
        find_cycle(&cyclic).unwrap(),
        ["checkpoint", "optim", "engine", "checkpoint"]
    );
    let acyclic = graph_of(&[
        ("engine", "use crate::checkpoint::Manifest;"),
        (
            "checkpoint",
            "/// see [`crate::engine::train`]\nuse plait_crate::engine::X;",
        ),
    ]);
    assert_eq!(find_cycle(&acyclic), None);
}

#[test]
fn no_crate_has_a_module_cycle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut checked = 0;
    let mut cycles = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap().flatten() {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut graph = Graph::new();
        walk(&src, &src, &mut graph);
        checked += 1;
        if let Some(cycle) = find_cycle(&graph) {
            cycles.push(format!(
                "{}: {}",
                entry.file_name().to_string_lossy(),
                cycle.join(" → ")
            ));
        }
    }
    assert!(checked >= 8, "found only {checked} crates");
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}
