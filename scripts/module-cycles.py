#!/usr/bin/env python3
"""Lists import cycles between the files (modules) of each workspace crate.

File A depends on file B when A names, through a `crate::`, `super::` or
`self::` path (in a `use` or in code), an item that B defines. A path through
a re-export in `mod.rs` is followed to the file under that module that
defines the item. Comments and `#[cfg(test)] mod tests` are ignored. Prints
every strongly connected component of more than one file, per crate, and
exits 1 if there is any.

Usage: scripts/module-cycles.py [-v] [CRATE_SRC_DIR ...]   (default: src crates/*/src;
       -v lists the dependencies inside each cycle)
"""
import glob
import os
import re
import sys

DEF = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:unsafe\s+)?"
    r"(?:struct|enum|trait|fn|type|const|static|union|mod)\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)
USE = re.compile(r"\buse\s+([^;]+);", re.S)
PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def clean(text):
    i = text.find("#[cfg(test)]\nmod tests")
    text = text if i < 0 else text[:i]
    return re.sub(r"//[^\n]*", "", text)


def expand_use(tree):
    """`a::{b, c::{d as e}}` -> ["a::b", "a::c::d"]."""
    tree = re.sub(r"\s+as\s+[A-Za-z_0-9]+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, t):
        if "{" in t:
            head, rest = t.split("{", 1)
            body = rest[: rest.rfind("}")]
            depth, cur, parts = 0, "", []
            for ch in body:
                if ch == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                    continue
                depth += ch == "{"
                depth -= ch == "}"
                cur += ch
            if cur:
                parts.append(cur)
            for p in parts:
                walk(prefix + head, p)
        else:
            out.append(prefix + t)

    walk("", tree)
    return out


def module_of(src, f):
    rel = os.path.relpath(f, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return rel


def main():
    args = sys.argv[1:]
    verbose = "-v" in args
    args = [a for a in args if a != "-v"]
    dirs = args or ["src"] + sorted(glob.glob("crates/*/src"))
    bad = 0
    for src in dirs:
        files = sorted(glob.glob(os.path.join(src, "**", "*.rs"), recursive=True))
        texts = {f: clean(open(f, encoding="utf-8").read()) for f in files}
        mods = {tuple(module_of(src, f)): f for f in files}
        defs = {f: set(DEF.findall(t)) for f, t in texts.items()}

        def resolve(segs):
            # Longest module prefix that is a file; then the item in it, or
            # in a file under it (a re-export), else the module file itself.
            for k in range(len(segs), -1, -1):
                m = tuple(segs[:k])
                if m in mods:
                    rest = segs[k:]
                    if not rest:
                        return {mods[m]}
                    name = rest[0]
                    if not m:
                        # The crate root: an item of lib.rs, or a re-export
                        # of another crate (`pub use tonic_retry::policy`).
                        return set()
                    if name in defs[mods[m]] and not mods[m].endswith(("mod.rs", "lib.rs")):
                        return {mods[m]}
                    under = {
                        f for mm, f in mods.items()
                        if mm[: len(m)] == m and len(mm) > len(m) and name in defs[f]
                    }
                    return under or ({mods[m]} if not mods[m].endswith(("mod.rs", "lib.rs")) else set())
            return set()

        graph = {f: set() for f in files}
        for f, t in texts.items():
            here = module_of(src, f)
            paths = []
            for tree in USE.findall(t):
                paths += expand_use(tree)
            paths += PATH.findall(t)
            for p in paths:
                segs = [s for s in p.split("::") if s]
                if not segs or segs[0] not in ("crate", "super", "self"):
                    continue
                base = [] if segs[0] == "crate" else list(here)
                if segs[0] == "super":
                    base = base[:-1]
                    while len(segs) > 1 and segs[1] == "super":
                        base = base[:-1]
                        segs = segs[1:]
                for g in resolve(base + segs[1:]):
                    if g != f:
                        graph[f].add(g)
        comps = sccs(graph)
        print(f"{src}: {len(comps)} cycle(s)")
        for c in comps:
            bad += 1
            print("  " + " <-> ".join(os.path.relpath(x, src) for x in c))
            if verbose:
                for a in c:
                    for b in sorted(graph[a] & set(c)):
                        print(f"    {os.path.relpath(a, src)} -> {os.path.relpath(b, src)}")
    sys.exit(1 if bad else 0)


def sccs(graph):
    index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = i[0]
        i[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    main()
