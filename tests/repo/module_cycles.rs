//! No import cycle between the modules of `src/` (issue 21): the library's modules form a
//! directed acyclic graph, so each one can be read, tested and changed from its dependencies
//! up, never "everything at once". The same holds for testkit's library (`testkit/src/`, from
//! its `lib.rs`; its binaries in `src/bin/` are other crates).
//!
//! The module tree is followed from `src/lib.rs` through its `mod` declarations, so every file
//! has the module path the compiler gives it (`src/controller/act.rs` is `controller::act`, a
//! `mod.rs` is its directory's module, `lib.rs` is the crate root). Test code is left out:
//! modules and items under `#[cfg(test)]` (inline `mod tests { .. }` blocks, `mod tests;`
//! files) and `#[test]` functions. `src/main.rs` is another crate (it reaches the library by
//! its name, never by `crate::`), so it is not part of the graph.
//!
//! A module depends on another when its non-test code names it: in a `use` tree (groups and
//! `as` renames expanded) or in any path of the code, macro arguments included. Paths that
//! start with `crate::`, `super::` or `self::`, and paths whose first segment is a child
//! module of the current one (`status::write` in `controller/mod.rs`), are resolved relative
//! to the module they are written in; a path counts as a dependency on the deepest module it
//! goes through (`crate::controller::status_write::write` is `controller::status_write`,
//! `crate::controller::Context` is `controller`). Single-segment paths are not module paths
//! (a local `status` is a variable), and paths into other crates are not part of the graph.
//!
//! A parent and its children are modules like any other:
//! - a child using an item of its parent (`super::Context`) depends on the parent, so when the
//!   parent also uses the child it **is** a cycle: such shared items belong in a module of
//!   their own (`src/context.rs`), which both use;
//! - a re-export in a parent (`pub use child::Item;`) is a dependency of the parent on the
//!   child, and users of `parent::Item` depend on the parent: a re-export does not hide a
//!   cycle;
//! - declaring a child (`mod child;`) is not a use of it.
//!
//! The test fails listing every cycle (each strongly connected component of more than one
//! module), with one place in the code for each dependency inside it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A module path below the crate root (`["controller", "act"]`; empty for the root).
type Module = Vec<String>;

/// One place that makes a module depend on another: `file:line` and the path written there.
type Place = (String, String);

#[test]
fn the_modules_of_testkit_form_no_cycle() {
    assert_no_cycle("testkit/src");
}

#[test]
fn the_modules_of_src_form_no_cycle() {
    assert_no_cycle("src");
}

/// Follows the crate whose root is `<dir>/lib.rs` and fails listing its cycles.
fn assert_no_cycle(dir: &str) {
    let graph = Graph::of_crate(&Path::new(ROOT).join(dir));
    assert!(
        graph.modules.len() > 20,
        "the module tree was not followed: {:?}",
        graph.modules
    );
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "module cycles in {dir}/:\n{}",
        graph.describe(&cycles)
    );
}

#[test]
fn use_groups_renames_and_paths_are_dependencies() {
    let mut graph = Graph::default();
    for module in ["", "a", "a::b", "a::c", "a::c::d", "e", "x", "y", "z"] {
        graph.modules.insert(module_of(module));
    }
    graph.scan_source(
        &module_of("a::b"),
        Path::new("a/b.rs"),
        "use super::{c::{self, d as dee}, Shared};
         use crate::e::{Item as Other, *};
         #[cfg(test)]
         mod tests { use crate::x; }
         #[cfg(test)]
         use crate::y;
         pub(super) fn f() { let status = 1; std::mem::drop(status); tracing::info!(x = ?crate::z::Z); }",
    );
    let deps: BTreeSet<String> = graph.edges[&module_of("a::b")]
        .keys()
        .map(|m| name(m))
        .collect();
    let expected = ["a", "a::c", "a::c::d", "e", "z"].map(String::from);
    assert_eq!(deps, BTreeSet::from(expected));
}

#[test]
fn a_parent_using_a_child_that_uses_it_is_a_cycle() {
    let mut graph = Graph::default();
    for module in ["", "p", "p::child", "p::other"] {
        graph.modules.insert(module_of(module));
    }
    graph.scan_source(
        &module_of("p"),
        Path::new("p/mod.rs"),
        "mod child; mod other; pub use other::Thing; fn f() { child::run(); }",
    );
    graph.scan_source(
        &module_of("p::child"),
        Path::new("p/child.rs"),
        "use super::Context;",
    );
    graph.scan_source(
        &module_of("p::other"),
        Path::new("p/other.rs"),
        "pub struct Thing;",
    );
    let cycles = graph.cycles();
    assert_eq!(cycles, vec![vec![module_of("p"), module_of("p::child")]]);
}

fn module_of(path: &str) -> Module {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_string()
    } else {
        module.join("::")
    }
}

/// The modules of the crate and the dependencies between them.
#[derive(Default)]
struct Graph {
    /// Every non-test module, inline ones included.
    modules: BTreeSet<Module>,
    /// Dependencies: module -> module it names -> the places that name it.
    edges: BTreeMap<Module, BTreeMap<Module, Vec<Place>>>,
    /// Sources to scan once every module is known: module, file, text.
    sources: Vec<(Module, PathBuf, String)>,
}

impl Graph {
    /// Follows the `mod` declarations from `src/lib.rs`, then collects the dependencies.
    fn of_crate(src: &Path) -> Self {
        let mut graph = Graph::default();
        graph.add_file(Vec::new(), &src.join("lib.rs"), src.to_path_buf());
        for (module, file, text) in std::mem::take(&mut graph.sources) {
            graph.scan_source(&module, &file, &text);
        }
        graph
    }

    /// Adds the module of `file` and, recursively, the files of its `mod x;` declarations
    /// (looked for in `dir`).
    fn add_file(&mut self, module: Module, file: &Path, dir: PathBuf) {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("cannot parse {}: {e}", file.display()));
        self.add_items(&module, &parsed.items, &dir);
        self.modules.insert(module.clone());
        self.sources.push((module, file.to_path_buf(), text));
    }

    fn add_items(&mut self, module: &Module, items: &[syn::Item], dir: &Path) {
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            if is_test(&m.attrs) {
                continue;
            }
            let child = [module.clone(), vec![m.ident.to_string()]].concat();
            let child_dir = dir.join(m.ident.to_string());
            match &m.content {
                Some((_, items)) => {
                    self.modules.insert(child.clone());
                    self.add_items(&child, items, &child_dir);
                }
                None => {
                    let flat = dir.join(format!("{}.rs", m.ident));
                    let file = if flat.exists() {
                        flat
                    } else {
                        child_dir.join("mod.rs")
                    };
                    self.add_file(child, &file, child_dir);
                }
            }
        }
    }

    /// Records the dependencies written in one file of `module`.
    fn scan_source(&mut self, module: &Module, file: &Path, text: &str) {
        let parsed = syn::parse_file(text)
            .unwrap_or_else(|e| panic!("cannot parse {}: {e}", file.display()));
        let shown = file
            .strip_prefix(ROOT)
            .unwrap_or(file)
            .display()
            .to_string();
        let mut scanner = Scanner {
            graph: self,
            module: module.clone(),
            file: shown,
        };
        scanner.visit_file(&parsed);
    }

    /// The module a path written in `from` goes to, if it is a path into this crate.
    fn resolve(&self, from: &[String], segments: &[String]) -> Option<Module> {
        let (mut base, rest): (Module, &[String]) = match segments.first()?.as_str() {
            "crate" => (Vec::new(), &segments[1..]),
            "self" => (from.to_vec(), &segments[1..]),
            "super" => {
                let supers = segments.iter().take_while(|s| *s == "super").count();
                let base = from[..from.len().checked_sub(supers)?].to_vec();
                (base, &segments[supers..])
            }
            first if segments.len() > 1 => {
                let child = [from.to_vec(), vec![first.to_string()]].concat();
                if !self.modules.contains(&child) {
                    return None;
                }
                (from.to_vec(), segments)
            }
            _ => return None,
        };
        for segment in rest {
            base.push(segment.clone());
            if !self.modules.contains(&base) {
                base.pop();
                break;
            }
        }
        Some(base)
    }

    /// The strongly connected components of more than one module (Tarjan's algorithm).
    fn cycles(&self) -> Vec<Vec<Module>> {
        let nodes: Vec<&Module> = self.modules.iter().collect();
        let index_of: BTreeMap<&Module, usize> =
            nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let successors: Vec<Vec<usize>> = nodes
            .iter()
            .map(|m| {
                self.edges
                    .get(*m)
                    .into_iter()
                    .flat_map(|deps| deps.keys())
                    .filter_map(|d| index_of.get(d).copied())
                    .collect()
            })
            .collect();
        let mut tarjan = Tarjan {
            successors: &successors,
            index: vec![None; nodes.len()],
            low: vec![0; nodes.len()],
            on_stack: vec![false; nodes.len()],
            stack: Vec::new(),
            next: 0,
            components: Vec::new(),
        };
        for node in 0..nodes.len() {
            if tarjan.index[node].is_none() {
                tarjan.connect(node);
            }
        }
        let mut cycles: Vec<Vec<Module>> = tarjan
            .components
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut modules: Vec<Module> = c.into_iter().map(|i| nodes[i].clone()).collect();
                modules.sort();
                modules
            })
            .collect();
        cycles.sort();
        cycles
    }

    /// Each cycle with the dependencies inside it and one place that makes each.
    fn describe(&self, cycles: &[Vec<Module>]) -> String {
        let mut out = String::new();
        for cycle in cycles {
            let names: Vec<String> = cycle.iter().map(|m| name(m)).collect();
            let _ = writeln!(out, "cycle of {}: {}", cycle.len(), names.join(", "));
            for from in cycle {
                for (to, places) in self.edges.get(from).into_iter().flatten() {
                    if cycle.contains(to) {
                        let (at, written) = &places[0];
                        let more = match places.len() {
                            1 => String::new(),
                            n => format!(" (+{} more)", n - 1),
                        };
                        let _ = writeln!(
                            out,
                            "  {} -> {}: {at} `{written}`{more}",
                            name(from),
                            name(to)
                        );
                    }
                }
            }
        }
        out
    }
}

struct Tarjan<'a> {
    successors: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    components: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn connect(&mut self, node: usize) {
        self.index[node] = Some(self.next);
        self.low[node] = self.next;
        self.next += 1;
        self.stack.push(node);
        self.on_stack[node] = true;
        for &next in &self.successors[node] {
            match self.index[next] {
                None => {
                    self.connect(next);
                    self.low[node] = self.low[node].min(self.low[next]);
                }
                Some(index) if self.on_stack[next] => self.low[node] = self.low[node].min(index),
                Some(_) => {}
            }
        }
        if Some(self.low[node]) == self.index[node] {
            let mut component = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack[top] = false;
                component.push(top);
                if top == node {
                    break;
                }
            }
            self.components.push(component);
        }
    }
}

/// `#[cfg(test)]` or `#[test]`: code that is not part of the library.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("test")
            || (attr.path().is_ident("cfg")
                && attr
                    .meta
                    .require_list()
                    .is_ok_and(|list| list.tokens.to_string() == "test"))
    })
}

/// Walks one file's syntax tree, recording the dependencies of the module it is in.
struct Scanner<'g> {
    graph: &'g mut Graph,
    /// The module of the code being visited (an inline `mod` changes it).
    module: Module,
    file: String,
}

impl Scanner<'_> {
    fn depend(&mut self, segments: &[String], line: usize) {
        let Some(to) = self.graph.resolve(&self.module, segments) else {
            return;
        };
        if to == self.module {
            return;
        }
        let place = (format!("{}:{line}", self.file), segments.join("::"));
        self.graph
            .edges
            .entry(self.module.clone())
            .or_default()
            .entry(to)
            .or_default()
            .push(place);
    }

    /// Every path of a `use` tree: `a::{b, c::{d as e, *}}` is `a::b`, `a::c::d` and `a::c`.
    fn use_paths(
        tree: &syn::UseTree,
        prefix: &mut Vec<String>,
        out: &mut Vec<(Vec<String>, usize)>,
    ) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                Self::use_paths(&p.tree, prefix, out);
                prefix.pop();
            }
            syn::UseTree::Name(n) if n.ident == "self" => {
                out.push((prefix.clone(), n.ident.span().start().line));
            }
            syn::UseTree::Name(n) => {
                out.push((
                    [prefix.clone(), vec![n.ident.to_string()]].concat(),
                    n.ident.span().start().line,
                ));
            }
            syn::UseTree::Rename(r) => {
                out.push((
                    [prefix.clone(), vec![r.ident.to_string()]].concat(),
                    r.ident.span().start().line,
                ));
            }
            syn::UseTree::Glob(g) => out.push((prefix.clone(), g.star_token.spans[0].start().line)),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    Self::use_paths(tree, prefix, out);
                }
            }
        }
    }

    /// The `a::b::c` paths inside a macro's arguments (which `syn` leaves unparsed).
    fn macro_paths(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(group) => {
                    self.macro_paths(group.stream());
                    i += 1;
                }
                TokenTree::Ident(first) => {
                    let line = first.span().start().line;
                    let mut segments = vec![first.to_string()];
                    i += 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (tokens.get(i), tokens.get(i + 1), tokens.get(i + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segments.push(next.to_string());
                        i += 3;
                    }
                    self.depend(&segments, line);
                }
                TokenTree::Punct(_) | TokenTree::Literal(_) => i += 1,
            }
        }
    }
}

impl<'ast> Visit<'ast> for Scanner<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::ExternCrate(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::ForeignMod(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::TraitAlias(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return visit::visit_item(self, item),
        };
        if !is_test(attrs) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test(&item.attrs) {
            visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        // A `mod x;` file is scanned on its own; an inline module is a module of its own.
        if let Some((_, items)) = &item.content {
            self.module.push(item.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        Self::use_paths(&item.tree, &mut Vec::new(), &mut paths);
        for (segments, line) in paths {
            self.depend(&segments, line);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = path
            .segments
            .first()
            .map_or(0, |s| s.ident.span().start().line);
        self.depend(&segments, line);
        visit::visit_path(self, path);
    }

    /// `pub(crate)`, `pub(super)`, `pub(in path)` say who may use an item, not what it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.macro_paths(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }
}
