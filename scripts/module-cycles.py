#!/usr/bin/env python3
"""Fails on any import circle between the files (modules) of a crate.

Why: a circle between files means neither can be read, tested or moved
without the other; the layering the crates promise (error types as leaves,
drivers over pure cores) holds only while the file graph has no circle.

File A depends on file B when A names an item that B defines:
- through a `crate::`, `super::` or `self::` path, or a path that starts with
  a child module A declares (`mod x;` then `x::Item`), in a `use` or in code;
- a path inside an inline `mod name { .. }` block is read from that module
  (`super::X` there is the file's own X), and the block's items are the file's;
- items defined in `mod.rs` and `lib.rs` count like any other (a child that
  uses its parent's item depends on the parent);
- a `pub use` / `pub(crate) use` re-export of this crate's item is looked
  through: a user of the re-exported path depends on the file that defines
  the item, and the re-export itself adds no dependency;
- a name that a file brings in from another crate (`pub use tower::BoxError`)
  is that file's: a user of the path depends on the re-exporting file,
  whatever crate the item comes from (dropping that edge once hid a
  five-file circle);
- an inherent `impl Type { .. }` written in B for a type defined in A makes A
  depend on B when A's code calls one of the methods that block defines
  (`.name(`, `Self::name(`, `Type::name(`): the type's home then leans on
  behaviour written elsewhere, and the two files form the circle they are.

Also fails on a glob import (`use path::*;`, not a `pub use` re-export)
outside `#[cfg(test)]` code, since a glob hides which file a name comes from.

Comments and `#[cfg(test)]` (or `#[cfg(all(test, ..))]`) module blocks are
ignored. Prints every strongly
connected component of more than one file, per crate, and exits 1 if there is
any circle or glob.

Usage: scripts/module-cycles.py [-v] [CRATE_SRC_DIR ...]
       (default: src and crates/*/src; -v lists the edges inside each circle)
"""
import glob
import os
import re
import sys

ITEM_KINDS = r"(?:struct|enum|trait|fn|type|const|static|union|mod|macro_rules!)"
DEF = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
    + ITEM_KINDS
    + r"\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)
TYPE_DEF = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:struct|enum|union)\s+([A-Za-z_][A-Za-z0-9_]*)", re.M
)
CHILD_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)
USE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M | re.S)
PATH = re.compile(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
INHERENT_IMPL = re.compile(r"^\s*impl\s*(?:<[^{]*?>)?\s+([A-Za-z_][A-Za-z0-9_]*)\s*(?:<[^{]*?>)?\s*\{", re.M)
# `#[cfg(..)] mod name {` (a block) and `#[cfg(..)] mod name;` (a file).
CFG_MOD = re.compile(r"#\[cfg\(([^\]]*)\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
CFG_MOD_FILE = re.compile(
    r"#\[cfg\(([^\]]*)\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;")


def test_only(cfg):
    """Whether code under `#[cfg(<cfg>)]` is built for tests only: `test`,
    `all(test, ..)`; not `any(test, feature = "..")`."""
    cfg = cfg.strip()
    if cfg == "test":
        return True
    m = re.fullmatch(r"all\s*\((.*)\)", cfg, re.S)
    if not m:
        return False
    return any(test_only(a) for a in split_top(m.group(1), "(", ")"))


def split_top(text, open_ch, close_ch):
    """`text` cut at the commas outside any `open_ch`..`close_ch` pair."""
    depth, cur, parts = 0, "", []
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == open_ch
        depth -= ch == close_ch
        cur += ch
    return parts + [cur]


INLINE_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", re.M)
FN_NAME = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def block_at(text, start):
    """The text of the brace block whose `{` ends just before `start`."""
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start:i]


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def strip_test_modules(text):
    """Removes every `#[cfg(test)] mod name { ... }` block (braces matched),
    and every block under `#[cfg(all(test, ..))]`."""
    pos = 0
    while True:
        m = CFG_MOD.search(text, pos)
        if not m:
            return text
        if not test_only(m.group(1)):
            pos = m.end()
            continue
        text = text[: m.start()] + text[m.end() + len(block_at(text, m.end())):]


def expand_use(tree):
    """`a::{b, c::{d as e}}` -> ["a::b", "a::c::d"]."""
    tree = re.sub(r"\s+as\s+[A-Za-z_0-9]+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, t):
        if "{" in t:
            head, rest = t.split("{", 1)
            body = rest[: rest.rfind("}")]
            parts = [p for p in split_top(body, "{", "}") if p]
            for p in parts:
                walk(prefix + head, p)
        else:
            out.append(prefix + t)

    walk("", tree)
    return [p for p in out if p]


def crate_path(segs):
    """`crate::a::b` for the segments ["a", "b"] (or ["a", "b", "self"])."""
    return "::".join(["crate"] + list(segs[:-1] if segs and segs[-1] == "self" else segs))


def module_of(src, f):
    rel = os.path.relpath(f, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


class Crate:
    """The files of one crate and what each names.

    facade_edges=True (scripts/floors.py): a path that names an item through a
    `pub use` / `pub(crate) use` re-export is also an edge to the re-exporting
    file (besides the edge to the file that defines the item), since such a
    path leans on the facade. The default (False) only looks through.
    """

    def __init__(self, src, facade_edges=False):
        self.src = src
        self.facade_edges = facade_edges
        self.files = sorted(glob.glob(os.path.join(src, "**", "*.rs"), recursive=True))
        self.text = {}
        for f in self.files:
            with open(f, encoding="utf-8") as fh:
                self.text[f] = strip_test_modules(strip_comments(fh.read()))
        self.mods = {module_of(src, f): f for f in self.files}
        self.blocks = {}  # file -> [(start, end, name)] of its inline module blocks
        self.module = {f: module_of(src, f) for f in self.files}
        self.defs = {f: set(DEF.findall(t)) for f, t in self.text.items()}
        self.types = {f: set(TYPE_DEF.findall(t)) for f, t in self.text.items()}
        self.children = {f: set(CHILD_MOD.findall(t)) for f, t in self.text.items()}
        # Names each file brings in with `use`: name -> crate path segments, or
        # None for another crate's item (a dead end for this crate's graph).
        self.imports = {f: {} for f in self.files}
        self.reexports = {f: set() for f in self.files}  # names a file re-exports
        self.uses = {f: [] for f in self.files}  # (is_pub, absolute segments)
        self.globs = []
        for f, t in self.text.items():
            for u in USE.finditer(t):
                vis, tree = u.groups()
                for p in expand_use(tree):
                    segs = self.absolute(f, p.split("::"), u.start())
                    if segs is None:
                        self.imports[f][p.split("::")[-1]] = None
                        continue
                    if segs[-1] == "*":
                        if not vis:
                            self.globs.append((f, p))
                        segs = segs[:-1]
                        self.uses[f].append((bool(vis), segs))
                        continue
                    self.uses[f].append((bool(vis), segs))
                    self.imports[f][segs[-1]] = segs
                    if vis:
                        self.reexports[f].add(segs[-1])

    def scope(self, f, pos):
        """The module at offset `pos` of file f: the file's, and the inline
        `mod name { .. }` blocks around `pos`."""
        if f not in self.blocks:
            t = self.text[f]
            self.blocks[f] = [(m.end(), m.end() + len(block_at(t, m.end())), m.group(1))
                              for m in INLINE_MOD.finditer(t)]
        return list(self.module[f]) + [name for start, end, name in self.blocks[f] if start <= pos < end]

    def absolute(self, f, segs, pos=-1):
        """The crate-relative path of `segs` as written in file f (at offset
        pos, inside whatever inline modules are there), or None for other crates."""
        segs = [s for s in segs if s]
        if not segs:
            return None
        here = self.scope(f, pos)
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] == "self":
            return here + segs[1:]
        if segs[0] == "super":
            base = here[:-1]
            segs = segs[1:]
            while segs and segs[0] == "super":
                base = base[:-1]
                segs = segs[1:]
            return base + segs
        if segs[0] in self.children[f]:
            return here + segs
        return None

    def resolve(self, segs, seen=None):
        """The files that define the item at crate path `segs`."""
        seen = seen or set()
        key = tuple(segs)
        if key in seen:
            return set()
        seen.add(key)
        for k in range(len(segs), -1, -1):
            m = tuple(segs[:k])
            if m not in self.mods:
                continue
            home = self.mods[m]
            rest = segs[k:]
            if not rest:
                return {home}
            name = rest[0]
            if name in self.defs[home]:
                return {home}
            if name in self.imports[home]:
                target = self.imports[home][name]
                # Another crate's item, named through this file: the file
                # chose it (a re-export such as `pub use tower::BoxError`),
                # so a user of the path depends on this file.
                if target is None:
                    return {home}
                found = self.resolve(target, seen)
                if self.facade_edges and name in self.reexports[home]:
                    found = found | {home}  # named through this file's re-export
                return found
            # Unknown here (macro-generated, say): the module file itself.
            return {home}
        return set()

    def graph(self):
        """File -> the files it depends on; self.why[(a, b)] says by which paths."""
        g = {f: set() for f in self.files}
        self.why = {}

        def add(f, targets, label):
            g[f] |= targets
            for b in targets:
                self.why.setdefault((f, b), set()).add(label)

        for f, t in self.text.items():
            for is_pub, segs in self.uses[f]:
                if is_pub:
                    continue  # looked through by whoever uses the re-exported path
                add(f, self.resolve(segs), "use " + crate_path(segs))
            # The paths of code: `use` items are read above (a re-export
            # written `pub use x::Y;` is looked through, as `pub use x::{Y};`).
            # (Blanked, not cut, so that offsets still tell the inline module.)
            t = USE.sub(lambda u: " " * len(u.group(0)), t)
            found = list(PATH.finditer(t))
            for child in self.children[f]:
                found += re.finditer(
                    r"(?<![A-Za-z0-9_:])(%s(?:::[A-Za-z_][A-Za-z0-9_]*)+)" % child, t)
            for m in found:
                p = m.group(1)
                segs = self.absolute(f, p.split("::"), m.start())
                if segs is not None:
                    add(f, self.resolve(segs), p)
            for m in INHERENT_IMPL.finditer(t):
                name = m.group(1)
                if name in self.types[f]:
                    continue
                methods = FN_NAME.findall(block_at(t, m.end()))
                for home in self.type_home(f, name):
                    add(f, {home}, "impl " + name)
                    calls = self.text[home]
                    if any(re.search(r"(?:\.|\bSelf::|\b%s::)%s\s*(?:::<[^>]*>)?\(" % (name, fn), calls)
                           for fn in methods):
                        add(home, {f}, "calls methods of impl %s" % name)
        for f in g:
            g[f].discard(f)
        return g

    def test_files(self):
        """Files of tests: modules declared under a `#[cfg(..test..)]`, and theirs."""
        roots = set()
        for f, t in self.text.items():
            for cfg, name in CFG_MOD_FILE.findall(t):
                if test_only(cfg):
                    roots.add(self.module[f] + (name,))
        return {f for f, m in self.module.items() if any(m[:len(r)] == r for r in roots)}

    def type_home(self, f, name):
        """Where the type `name`, implemented in f, is defined (through f's imports)."""
        for _, segs in self.uses[f]:
            if segs and segs[-1] == name:
                return {h for h in self.resolve(segs) if name in self.types[h]}
        return set()


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv):
    verbose = "-v" in argv
    dirs = [a for a in argv if a != "-v"] or ["src"] + sorted(glob.glob("crates/*/src"))
    bad = 0
    for src in dirs:
        crate = Crate(src)
        graph = crate.graph()
        comps = sccs(graph)
        print(f"{src}: {len(crate.files)} files, {sum(map(len, graph.values()))} edges, "
              f"{len(comps)} cycle(s), {len(crate.globs)} glob import(s)")
        for c in comps:
            bad += 1
            print("  cycle: " + " <-> ".join(os.path.relpath(x, src) for x in c))
            if verbose:
                for a in c:
                    for b in sorted(graph[a] & set(c)):
                        print(f"    {os.path.relpath(a, src)} -> {os.path.relpath(b, src)}")
        for f, p in crate.globs:
            bad += 1
            print(f"  glob import outside tests: {os.path.relpath(f, src)}: use {p}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
