//! The file-to-file import graph of a crate's sources, and its cycles.
//!
//! A file imports another when it declares it (`mod x;`) or names an item
//! or module in it by path: `use crate::…`, `use super::…`, `use self::…`,
//! a `use` path starting at a child module, and `crate::x::…`,
//! `super::x::…`, `self::x::…` paths in code. A path resolves to the file
//! that defines what it names:
//! - through child modules, to the file of the deepest module it names;
//! - through `use` (any visibility, `pub use` re-exports included), to
//!   where the imported name is defined: naming `crate::Key` when lib.rs
//!   has `pub use key::Key` imports key.rs, not lib.rs;
//! - a name that is neither a child module nor an import of a module is
//!   defined there, so the path imports that module's file.
//!
//! So lib.rs and a mod.rs may declare and re-export their children freely
//! (the edges run parent to child), while a child naming a function, type
//! or glob (`use super::*`) defined in the mod.rs that declares it closes a
//! cycle, as does any pair of files naming each other's items. Paths inside
//! an inline module (`mod tests { use super::*; }`) resolve from that
//! module, so a unit test importing its own file is no edge. Paths to
//! other crates and `$crate` paths in macro bodies are not followed.

use std::collections::{BTreeMap, BTreeSet};

use crate::lex::{Tok, Token, lex};

type ModPath = Vec<String>;
type ModKey = (usize, ModPath);

/// One module: the file it is written in, its child modules and the names
/// it imports (name → the path as written there).
#[derive(Default)]
struct Module {
    file: String,
    children: BTreeSet<String>,
    imports: BTreeMap<String, Vec<String>>,
}

/// A path written in a file, resolved once every module is known.
struct Reference {
    file: String,
    module: ModKey,
    segs: Vec<String>,
    line: usize,
    what: String,
}

/// That `from` imports `to`, at `from:line`, as `what`.
#[derive(Clone, Debug)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub line: usize,
    pub what: String,
}

/// A group of files that reach each other by imports (a strongly
/// connected component of two files or more), and the imports among them.
#[derive(Debug)]
pub struct Cycle {
    pub files: Vec<String>,
    pub edges: Vec<Edge>,
}

struct Crate<'a> {
    files: &'a BTreeMap<String, String>,
    modules: BTreeMap<ModKey, Module>,
    refs: Vec<Reference>,
    edges: Vec<Edge>,
}

/// The import edges of the crates rooted at `roots` (paths in `files`,
/// which maps a path such as `src/lib.rs` to its text).
pub fn edges(files: &BTreeMap<String, String>, roots: &[&str]) -> Vec<Edge> {
    let mut c = Crate {
        files,
        modules: BTreeMap::new(),
        refs: Vec::new(),
        edges: Vec::new(),
    };
    for (id, root) in roots.iter().enumerate() {
        let dir = root.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        c.parse_file(root, (id, Vec::new()), &dir);
    }
    let mut edges = std::mem::take(&mut c.edges);
    for r in &c.refs {
        let Some(abs) = c.absolute(&r.module, &r.segs, 0) else {
            continue;
        };
        if let Some(to) = c.resolve(r.module.0, &abs, 0)
            && to != r.file
        {
            edges.push(Edge {
                from: r.file.clone(),
                to,
                line: r.line,
                what: r.what.clone(),
            });
        }
    }
    edges
}

/// Every group of files in `edges` that import each other in a circle.
pub fn cycles(edges: &[Edge]) -> Vec<Cycle> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        next.entry(&e.from).or_default().insert(&e.to);
        next.entry(&e.to).or_default();
    }
    // Two files are in one group when each reaches the other.
    let reach = |from: &str| {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![from]);
        while let Some(f) = todo.pop() {
            for &n in &next[f] {
                if seen.insert(n) {
                    todo.push(n);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&f| (f, reach(f))).collect();
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for (&f, r) in &reaches {
        if placed.contains(f) || !r.contains(f) {
            continue;
        }
        let group: BTreeSet<&str> = r
            .iter()
            .copied()
            .filter(|g| reaches[g].contains(f))
            .collect();
        placed.extend(group.iter().copied());
        if group.len() < 2 {
            continue;
        }
        out.push(Cycle {
            files: group.iter().map(|s| s.to_string()).collect(),
            edges: edges
                .iter()
                .filter(|e| group.contains(e.from.as_str()) && group.contains(e.to.as_str()))
                .cloned()
                .collect(),
        });
    }
    out
}

impl Crate<'_> {
    /// Reads the module `key` written in `file`, whose child modules'
    /// files are under `dir`, and every file it declares.
    fn parse_file(&mut self, file: &str, key: ModKey, dir: &str) {
        let Some(text) = self.files.get(file) else {
            return;
        };
        let tokens = lex(text);
        self.modules.entry(key.clone()).or_default().file = file.to_string();
        // The inline modules open at this point: (module, its dir, the
        // brace depth inside it).
        let mut stack: Vec<(ModKey, String, usize)> = vec![(key, dir.to_string(), 0)];
        let mut depth = 0;
        let mut i = 0;
        while i < tokens.len() {
            let (module, dir) = {
                let top = stack.last().expect("the file's own module");
                (top.0.clone(), top.1.clone())
            };
            let ident = |j: usize| match tokens.get(j).map(|t| &t.tok) {
                Some(Tok::Ident(s)) => Some(s.as_str()),
                _ => None,
            };
            let punct = |j: usize, c: char| tokens.get(j).map(|t| &t.tok) == Some(&Tok::Punct(c));
            let sep = |j: usize| tokens.get(j).map(|t| &t.tok) == Some(&Tok::Sep);
            match &tokens[i].tok {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    if stack.len() > 1 && stack.last().is_some_and(|t| t.2 == depth) {
                        stack.pop();
                    }
                    depth -= 1;
                }
                Tok::Ident(w) if w == "mod" && ident(i + 1).is_some() => {
                    let name = ident(i + 1).unwrap_or_default().to_string();
                    let mut child = module.clone();
                    child.1.push(name.clone());
                    self.module_mut(&module).children.insert(name.clone());
                    let child_dir = format!("{dir}/{name}");
                    if punct(i + 2, ';') {
                        let found = [format!("{child_dir}.rs"), format!("{child_dir}/mod.rs")]
                            .into_iter()
                            .find(|f| self.files.contains_key(f));
                        if let Some(child_file) = found {
                            self.edges.push(Edge {
                                from: file.to_string(),
                                to: child_file.clone(),
                                line: tokens[i].line,
                                what: format!("mod {name}"),
                            });
                            let grand_dir = child_file
                                .strip_suffix("/mod.rs")
                                .map_or(child_dir.clone(), str::to_string);
                            self.parse_file(&child_file, child, &grand_dir);
                        }
                        i += 3;
                        continue;
                    }
                    if punct(i + 2, '{') {
                        self.module_mut(&child).file = file.to_string();
                        depth += 1;
                        stack.push((child, child_dir, depth));
                        i += 3;
                        continue;
                    }
                }
                Tok::Ident(w) if w == "use" => {
                    let line = tokens[i].line;
                    let mut j = i + 1;
                    let mut items = Vec::new();
                    use_tree(&tokens, &mut j, Vec::new(), &mut items);
                    for (segs, name) in items {
                        if let Some(name) = name.filter(|n| n != "_") {
                            self.module_mut(&module).imports.insert(name, segs.clone());
                        }
                        let what = format!("use {}", segs.join("::"));
                        self.refs.push(Reference {
                            file: file.to_string(),
                            module: module.clone(),
                            segs,
                            line,
                            what,
                        });
                    }
                    while j < tokens.len() && !punct(j, ';') {
                        j += 1;
                    }
                    i = j + 1;
                    continue;
                }
                Tok::Ident(first) if sep(i + 1) && ident(i + 2).is_some() => {
                    let after_other =
                        i > 0 && matches!(tokens[i - 1].tok, Tok::Sep | Tok::Punct('$' | '.'));
                    let mut segs = vec![first.clone()];
                    let mut j = i + 1;
                    while sep(j) && ident(j + 1).is_some() {
                        segs.push(ident(j + 1).unwrap_or_default().to_string());
                        j += 2;
                    }
                    if !after_other {
                        self.refs.push(Reference {
                            file: file.to_string(),
                            module: module.clone(),
                            what: segs.join("::"),
                            segs,
                            line: tokens[i].line,
                        });
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn module_mut(&mut self, key: &ModKey) -> &mut Module {
        self.modules.entry(key.clone()).or_default()
    }

    /// `segs`, written in `module`, as a path from its crate's root;
    /// `None` for a path into another crate or to a name not imported.
    fn absolute(&self, module: &ModKey, segs: &[String], depth: usize) -> Option<ModPath> {
        let (first, rest) = segs.split_first()?;
        let here = self.modules.get(module)?;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => Some([module.1.as_slice(), rest].concat()),
            "super" => {
                let mut at = module.1.clone();
                let mut rest = segs;
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop()?;
                    rest = &rest[1..];
                }
                Some([at.as_slice(), rest].concat())
            }
            _ if here.children.contains(first) => Some([module.1.as_slice(), segs].concat()),
            _ if depth < 16 => {
                let target = here.imports.get(first)?;
                let base = self.absolute(module, target, depth + 1)?;
                Some([base.as_slice(), rest].concat())
            }
            _ => None,
        }
    }

    /// The file defining what the root-relative path `abs` names in crate
    /// `id`, or `None` when it leads into another crate.
    fn resolve(&self, id: usize, abs: &[String], depth: usize) -> Option<String> {
        let mut at: ModPath = Vec::new();
        for (i, seg) in abs.iter().enumerate() {
            let key = (id, at.clone());
            let module = self.modules.get(&key)?;
            if module.children.contains(seg) {
                at.push(seg.clone());
                continue;
            }
            if let Some(target) = module.imports.get(seg) {
                if depth >= 16 {
                    return Some(module.file.clone());
                }
                let base = self.absolute(&key, target, depth + 1)?;
                return self.resolve(id, &[base.as_slice(), &abs[i + 1..]].concat(), depth + 1);
            }
            return Some(module.file.clone());
        }
        self.modules.get(&(id, at)).map(|m| m.file.clone())
    }
}

/// Reads one `use` tree at `tokens[*i]` under `prefix`, adding each path
/// it imports with the name it binds (`None` for a glob).
fn use_tree(
    tokens: &[Token],
    i: &mut usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) {
    let at = |j: usize| tokens.get(j).map(|t| &t.tok);
    if at(*i) == Some(&Tok::Sep) {
        *i += 1;
    }
    loop {
        match at(*i) {
            Some(Tok::Ident(name)) => {
                let name = name.clone();
                if at(*i + 1) == Some(&Tok::Sep) {
                    prefix.push(name);
                    *i += 2;
                    continue;
                }
                *i += 1;
                let mut bound = name.clone();
                if at(*i) == Some(&Tok::Ident("as".into())) {
                    if let Some(Tok::Ident(alias)) = at(*i + 1) {
                        bound = alias.clone();
                    }
                    *i += 2;
                }
                if name == "self" {
                    if bound == "self" {
                        bound = prefix.last().cloned().unwrap_or_default();
                    }
                } else {
                    prefix.push(name);
                }
                out.push((prefix, Some(bound)));
                return;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                out.push((prefix, None));
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                while let Some(t) = at(*i) {
                    match t {
                        Tok::Punct('}') => {
                            *i += 1;
                            break;
                        }
                        Tok::Punct(',') => *i += 1,
                        _ => {
                            let before = *i;
                            use_tree(tokens, i, prefix.clone(), out);
                            if *i == before {
                                *i += 1;
                            }
                        }
                    }
                }
                return;
            }
            _ => return,
        }
    }
}
