#!/usr/bin/env python3
"""Fails when the rooms of a crate's src do not stack in the listed floors.

Why: a crate whose top-level modules stack in floors can be read bottom up,
and each room tested and changed knowing only the rooms below it. A room is
`src/X.rs` or the folder `src/X/`; `lib.rs` is the roof, above every floor.
The order file (default scripts/floors.txt) lists one floor per line, bottom
first; rooms on one line are siblings. `#` starts a comment.

What it reads: the file graph of scripts/module-cycles.py (its `Crate`, the
same text-level reading of `use` items and `crate::`/`super::`/`self::`
paths, `#[cfg(test)]` modules stripped), built with facade_edges=True: a path
that names an item through a re-export (`pub use` in a room's mod.rs or file,
or in lib.rs) is also an import of the re-exporting file, so internal code
must name an item where it is defined. A `pub use` itself imports the file
that defines the item (a lower room may not re-export a higher room's item).
Test files (modules declared under `#[cfg(test)]`, and theirs) are skipped.
The check reads Rust as text, like module-cycles, on purpose: cargo-modules,
which would read it through rust-analyzer, took about 59 minutes to install
on the CI machine, and these scripts need only python3.

Fails on:
- an import from a room to a room on a higher floor, or to lib.rs ("upward");
- an import between two rooms on the same floor ("sideways");
- a room of src that no floor lists, a listed room src does not have, or a
  room listed twice;
- any file cycle of the graph where facade paths count.

Prints one line per failing file-to-file import with the paths behind it,
then `SRC: R rooms on F floors, E room-to-room imports, U upward, S sideways,
C file cycles counting facade paths` (E, U and S count file-to-file imports
between different rooms). Exits 1 on any failure.

Usage: scripts/floors.py [-v] [--order FILE] [SRC_DIR]
       (defaults: scripts/floors.txt, src; -v lists the edges inside each cycle)
"""
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

_spec = importlib.util.spec_from_file_location("module_cycles", os.path.join(HERE, "module-cycles.py"))
module_cycles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(module_cycles)

ROOF = None  # the room of lib.rs
MAX_VIA = 4


def read_order(path):
    """[[room, ...] per floor, bottom first], and the problems of the file."""
    floors, problems, seen = [], [], {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            rooms = line.split("#", 1)[0].split()
            if not rooms:
                continue
            for r in rooms:
                if r in seen:
                    problems.append(f"listed twice: {r} ({os.path.basename(path)} lines {seen[r]} and {n})")
                seen.setdefault(r, n)
            floors.append(rooms)
    return floors, problems


def main(argv):
    verbose = "-v" in argv
    argv = [a for a in argv if a != "-v"]
    order = os.path.join(HERE, "floors.txt")
    if "--order" in argv:
        i = argv.index("--order")
        if i + 1 >= len(argv):
            print("--order needs a file", file=sys.stderr)
            return 2
        order = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if len(argv) > 1 or any(a.startswith("-") for a in argv):
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    src = argv[0] if argv else "src"

    for path, isit in ((order, os.path.isfile), (src, os.path.isdir)):
        if not isit(path):
            print(f"no such {'file' if isit is os.path.isfile else 'folder'}: {path}", file=sys.stderr)
            return 2
    floors, problems = read_order(order)
    floor = {r: i + 1 for i, rooms in enumerate(floors) for r in rooms}

    crate = module_cycles.Crate(src, facade_edges=True)
    graph = crate.graph()
    tests = crate.test_files()
    files = [f for f in crate.files if f not in tests]
    keep = set(files)
    rel = lambda f: os.path.relpath(f, src)

    def room_of(f):
        m = crate.module[f]
        return m[0] if m else ROOF

    found = {}
    for f in files:
        r = room_of(f)
        if r is not ROOF:
            found.setdefault(r, f)
    lib = crate.mods.get(())
    for r in sorted(set(found) - set(floor)):
        problems.append(f"unlisted room: {r} ({rel(found[r])}) is on no floor of {os.path.basename(order)}")
    for r in sorted(set(floor) - set(found), key=floor.get):
        inline = lib and re.search(r"\bmod\s+%s\s*\{" % re.escape(r), crate.text[lib])
        where = ", an inline module of lib.rs" if inline else ""
        problems.append(f"missing room: {r} (floor {floor[r]}) has no {r}.rs or {r}/ in {src}{where}")

    # The imports between rooms: the graph's, and each `pub use` of a room,
    # which imports the files that define (and re-export) what it re-exports.
    edges = {(a, b): set(crate.why.get((a, b), ())) for a in files for b in graph[a] if b in keep}
    for f in files:
        for is_pub, segs in crate.uses[f]:
            if is_pub:
                for b in crate.resolve(segs):
                    if b != f and b in keep:
                        edges.setdefault((f, b), set()).add("pub use " + module_cycles.crate_path(segs))

    def place(f):
        r = room_of(f)
        return f"{rel(f)} (roof)" if r is ROOF else f"{rel(f)} (floor {floor[r]}: {r})"

    between = upward = sideways = 0
    for (a, b), via in sorted(edges.items()):
        ra, rb = room_of(a), room_of(b)
        if ra == rb:
            continue
        between += 1
        if ra is ROOF or ra not in floor or (rb is not ROOF and rb not in floor):
            continue  # lib.rs may import anything; unlisted rooms are reported above
        fa, fb = floor[ra], (len(floors) + 1 if rb is ROOF else floor[rb])
        if fb < fa:
            continue
        kind = "upward" if fb > fa else "sideways"
        if fb > fa:
            upward += 1
        else:
            sideways += 1
        via = sorted(via)
        more = f" (+{len(via) - MAX_VIA} more)" if len(via) > MAX_VIA else ""
        print(f"{kind}: {place(a)} -> {place(b)} via {', '.join(via[:MAX_VIA])}{more}")

    for p in problems:
        print(p)

    sub = {f: graph[f] & keep for f in files}
    comps = module_cycles.sccs(sub)
    for c in comps:
        print("cycle (facade paths count): " + " <-> ".join(rel(x) for x in c))
        if verbose:
            for a in c:
                for b in sorted(sub[a] & set(c)):
                    print(f"    {rel(a)} -> {rel(b)} via {', '.join(sorted(crate.why.get((a, b), ())))}")

    print(f"{src}: {len(found)} rooms on {len(floors)} floors, {between} room-to-room imports, "
          f"{upward} upward, {sideways} sideways, {len(comps)} file cycles counting facade paths")
    return 1 if problems or upward or sideways or comps else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
