#!/usr/bin/env python3
"""Every source path the docs name exists.

Why: files move (the rooms of the root crate, tonic-retry's split), and a
README or design note that names a file which is gone tells the reader
something that is not so. This reads README.md and docs/*.md and checks
each path they name that ends in `.rs` and starts with `src/`, `crates/`,
`tests/`, `benches/` or `examples/`, and each `.rs` file of a module map
(a ```text tree under a `src/` line, as the README's); brace lists (`src/a/{b,c}.rs`) are
expanded, and `*` globs must match at least one file.

Run: python3 scripts/doc-paths.py [ROOT]   (default: the repository root)
Exit 1, naming the document, line and path, when a path is missing.
"""
import glob
import os
import re
import sys

PREFIXES = ("src/", "crates/", "tests/", "benches/", "examples/")
# A path-looking token: letters, digits, `_-./*{},` ending in `.rs`.
TOKEN = re.compile(r"[A-Za-z0-9_\-./*{},]+\.rs\b")


def expand(path):
    """`a/{b,c}.rs` -> [`a/b.rs`, `a/c.rs`] (one level of braces at a time)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    out = []
    for part in m.group(1).split(","):
        out.extend(expand(path[: m.start()] + part + path[m.end():]))
    return out


def exists(root, path):
    full = os.path.join(root, path)
    if "*" in path:
        return bool(glob.glob(full))
    return os.path.isfile(full)


def named_paths(text):
    """(line number, path) for each source path the text names."""
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in TOKEN.finditer(line):
            token = m.group(0).strip(",.")
            start = token.find("{")
            head = token if start < 0 else token[:start]
            if not head.startswith(PREFIXES) and not token.startswith(PREFIXES):
                continue
            for path in expand(token):
                yield lineno, path


def tree_paths(text):
    """(line number, path) for the `.rs` files of module maps: inside a
    ```text block, an unindented `src/` (or `crates/x/src/`) line starts a
    tree; an entry `  dir/  a.rs, b.rs` names `dir/a.rs` and `dir/b.rs`
    (its deeper-indented continuation lines too), an entry `  x.rs` names
    itself."""
    base = None
    in_block = False
    entry_indent = None
    cur = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_block = not in_block and line.strip() == "```text"
            base = None
            continue
        if not in_block or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            word = line.strip()
            base = word if word.endswith("/") and word.startswith(PREFIXES) else None
            entry_indent = None
            continue
        if base is None:
            continue
        first, _, rest = line.strip().partition(" ")
        if entry_indent is None or indent <= entry_indent:
            entry_indent = indent
            if first.endswith("/"):
                cur = base + first
            elif first.endswith(".rs"):
                cur = base
                yield lineno, base + first
                continue
            else:
                cur = base
                rest = line.strip()
        else:
            rest = line.strip()
        for m in TOKEN.finditer(rest):
            token = m.group(0).strip(",.")
            if token.startswith(PREFIXES):
                continue
            for path in expand(token):
                yield lineno, cur + path


def documents(root):
    docs = [os.path.join(root, "README.md")]
    docs += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    return [d for d in docs if os.path.isfile(d)]


def main(argv):
    root = argv[0] if argv else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    missing = []
    checked = 0
    for doc in documents(root):
        with open(doc, encoding="utf-8") as fh:
            text = fh.read()
        for lineno, path in list(named_paths(text)) + list(tree_paths(text)):
            checked += 1
            if not exists(root, path):
                missing.append(f"{os.path.relpath(doc, root)}:{lineno}: {path} does not exist")
    for line in missing:
        print(line)
    print(f"{checked} source path(s) named in the docs, {len(missing)} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
