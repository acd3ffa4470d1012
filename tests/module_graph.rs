//! No file under src/ imports from a file that imports it: the file-to-file
//! import graph of the library and of each command has no cycle. How paths,
//! `mod` declarations and `pub use` re-exports count is told in
//! tests/module_graph/graph.rs; the tests at the end show the checker on
//! small made-up crates, passing and failing.

#[path = "module_graph/graph.rs"]
mod graph;
#[path = "module_graph/lex.rs"]
mod lex;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;

use graph::{cycles, edges};

/// Every `.rs` file under `dir`, by its path from the crate's root (`src/…`).
fn read_tree(root: &Path, dir: &Path, into: &mut BTreeMap<String, String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            read_tree(root, &path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = path.strip_prefix(root).expect("under the root");
            into.insert(name.to_string_lossy().replace('\\', "/"), text);
        }
    }
}

/// The crate roots in `files`: the library and each command.
fn roots(files: &BTreeMap<String, String>) -> Vec<&str> {
    files
        .keys()
        .map(String::as_str)
        .filter(|f| {
            *f == "src/lib.rs"
                || *f == "src/main.rs"
                || f.strip_prefix("src/bin/").is_some_and(|rest| {
                    !rest.contains('/')
                        || rest.ends_with("/main.rs") && rest.matches('/').count() == 1
                })
        })
        .collect()
}

/// The shortest circle through each import between two files of a group
/// (every such import lies on one), each once, shortest first.
fn circles(pairs: &BTreeMap<(&str, &str), Vec<String>>) -> BTreeSet<(usize, Vec<String>)> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for &(from, to) in pairs.keys() {
        next.entry(from).or_default().push(to);
    }
    let mut found = BTreeSet::new();
    for &(from, to) in pairs.keys() {
        // Breadth first from `to` back to `from`, remembering the way.
        let mut came: BTreeMap<&str, &str> = BTreeMap::new();
        let mut todo = VecDeque::from([to]);
        while let Some(f) = todo.pop_front() {
            if f == from {
                break;
            }
            for &n in next.get(f).into_iter().flatten() {
                if n != to && !came.contains_key(n) {
                    came.insert(n, f);
                    todo.push_back(n);
                }
            }
        }
        // from <- … <- to, read backwards from `from`.
        let mut back = vec![from];
        let mut at = from;
        while at != to {
            let Some(&prev) = came.get(at) else { break };
            back.push(prev);
            at = prev;
        }
        // from -> to -> … (back to from, which is left out).
        let mut path = vec![from];
        path.extend(back.iter().rev().take(back.len() - 1));
        // The same circle from its smallest file.
        let start = path
            .iter()
            .enumerate()
            .min_by_key(|(_, f)| **f)
            .map_or(0, |(i, _)| i);
        path.rotate_left(start);
        let mut circle: Vec<String> = path.iter().map(|f| f.to_string()).collect();
        circle.push(circle[0].clone());
        found.insert((circle.len(), circle));
    }
    found
}

/// The cycles of the crates in `files`, one paragraph each, or nothing:
/// the files of each group, the shortest circles among them, and every
/// import between two of them (line and path).
fn report(files: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for cycle in cycles(&edges(files, &roots(files))) {
        let _ = writeln!(out, "{}:", cycle.files.join(" <-> "));
        let mut pairs: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
        for e in &cycle.edges {
            pairs
                .entry((&e.from, &e.to))
                .or_default()
                .push(format!("{} {}", e.line, e.what));
        }
        let _ = writeln!(out, "  circles:");
        for (_, circle) in circles(&pairs) {
            let _ = writeln!(out, "    {}", circle.join(" -> "));
        }
        let _ = writeln!(out, "  imports:");
        for ((from, to), at) in pairs {
            let _ = writeln!(out, "    {from} -> {to}: {}", at.join(", "));
        }
    }
    out
}

#[test]
fn src_has_no_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = BTreeMap::new();
    read_tree(root, &root.join("src"), &mut files);
    assert!(files.contains_key("src/lib.rs"), "src/lib.rs not found");
    let found = report(&files);
    assert!(
        found.is_empty(),
        "files under src/ that import from a file importing them:\n{found}"
    );
}

/// A made-up crate from `(path, text)` pairs.
fn krate(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

#[test]
fn a_parent_declaring_and_re_exporting_its_children_is_no_cycle() {
    let files = krate(&[
        ("src/lib.rs", "mod key;\npub mod net;\npub use key::Key;\n"),
        ("src/key.rs", "pub struct Key;\n"),
        (
            "src/net/mod.rs",
            "mod conn;\nmod wire;\npub use conn::Conn;\n",
        ),
        ("src/net/wire.rs", "pub fn encode() {}\n"),
        (
            "src/net/conn.rs",
            "use crate::Key;\nuse super::wire;\npub struct Conn(Key);\n\
             fn f() { wire::encode(); crate::net::Conn::new(); }\n\
             #[cfg(test)]\nmod tests { use super::*; }\n",
        ),
    ]);
    assert_eq!(report(&files), "");
    // The imports resolve to where things are defined, not to lib.rs.
    let all = edges(&files, &["src/lib.rs"]);
    let to = |from: &str| -> Vec<&str> {
        all.iter()
            .filter(|e| e.from == from)
            .map(|e| e.to.as_str())
            .collect()
    };
    assert!(to("src/net/conn.rs").contains(&"src/key.rs"), "{all:?}");
    assert!(
        to("src/net/conn.rs").contains(&"src/net/wire.rs"),
        "{all:?}"
    );
    assert!(!to("src/net/conn.rs").contains(&"src/lib.rs"), "{all:?}");
}

#[test]
fn a_child_using_a_helper_of_its_own_mod_rs_is_a_cycle() {
    let files = krate(&[
        ("src/lib.rs", "mod etcd;\n"),
        (
            "src/etcd/mod.rs",
            "mod session;\npub(crate) fn helper() {}\n",
        ),
        ("src/etcd/session.rs", "fn f() { super::helper(); }\n"),
    ]);
    let found = report(&files);
    assert!(
        found.starts_with("src/etcd/mod.rs <-> src/etcd/session.rs:"),
        "{found}"
    );
    assert!(
        found.contains("src/etcd/session.rs -> src/etcd/mod.rs: 1 super::helper\n"),
        "{found}"
    );
    assert!(
        found.contains("src/etcd/mod.rs -> src/etcd/session.rs: 1 mod session\n"),
        "{found}"
    );
    // So is a glob import of the parent.
    let files = krate(&[
        ("src/lib.rs", "mod a;\nfn shared() {}\n"),
        ("src/a.rs", "use super::*;\n"),
    ]);
    assert!(report(&files).contains("src/a.rs -> src/lib.rs: 1 use super\n"));
}

#[test]
fn siblings_importing_each_other_are_a_cycle_in_a_command_too() {
    let files = krate(&[
        ("src/lib.rs", "pub struct Key;\n"),
        ("src/bin/tool/main.rs", "mod demo;\nmod svg;\n"),
        (
            "src/bin/tool/demo.rs",
            "use crate::svg::draw;\npub struct Grant;\n",
        ),
        (
            "src/bin/tool/svg.rs",
            "use super::demo::{self, Grant as G};\npub fn draw() {}\n",
        ),
    ]);
    let found = report(&files);
    assert!(
        found.starts_with("src/bin/tool/demo.rs <-> src/bin/tool/svg.rs:"),
        "{found}"
    );
    assert!(found.contains("src/bin/tool/svg.rs -> src/bin/tool/demo.rs: 1 use super::demo, 1 use super::demo::Grant\n"), "{found}");
    assert!(
        found.contains(
            "\n    src/bin/tool/demo.rs -> src/bin/tool/svg.rs -> src/bin/tool/demo.rs\n"
        ),
        "{found}"
    );
    assert!(
        found.contains("src/bin/tool/demo.rs -> src/bin/tool/svg.rs: 1 use crate::svg::draw\n"),
        "{found}"
    );
    // A longer circle is one group.
    let files = krate(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        ("src/b.rs", "use crate::c::C;\npub struct B;\n"),
        ("src/c.rs", "pub struct C(crate::a::A);\n"),
    ]);
    let found = report(&files);
    assert!(
        found.starts_with("src/a.rs <-> src/b.rs <-> src/c.rs:\n"),
        "{found}"
    );
    assert!(
        found.contains("\n    src/a.rs -> src/b.rs -> src/c.rs -> src/a.rs\n"),
        "{found}"
    );
}

#[test]
fn text_that_only_looks_like_code_is_no_import() {
    let files = krate(&[
        ("src/lib.rs", "mod a;\nmod b;\npub struct A;\n"),
        (
            "src/a.rs",
            "//! use crate::b::B;\n/* use crate::b::B; /* nested */ */\n\
             const S: &str = \"use crate::b::B;\";\nconst R: &str = r#\"crate::b::B\"#;\n\
             const C: char = '\\'';\nfn f<'a>(x: &'a str) {}\n\
             macro_rules! m { () => { $crate::b::B }; }\npub struct A;\n",
        ),
        ("src/b.rs", "use crate::a::A;\npub struct B;\n"),
    ]);
    assert_eq!(report(&files), "");
}
