#!/usr/bin/env python3
"""Fails when an item of a crate is public under more than one path.

Why: every public path is a promise kept at each release; two spellings of
one item split users, docs and tests between them for no gain. One path per
item means: re-export an item from a private module, or make its module
public, never both.

Reads rustdoc's HTML (run `cargo doc --workspace --all-features --no-deps`
first) and reports, per crate:
- a `pub use` listed in a module's "Re-exports" whose target is a page of the
  same crate (the item is then reachable at its own path and at the
  re-export), including a glob `pub use module::*` of a public module;
- two item pages (not redirects) for one definition, as `#[doc(inline)]`
  makes, found by their identical source location.
Re-exports of another crate's items (`deps::tonic`, say) are one path in this
crate and are not reported.

Usage: scripts/one-path.py [DOC_DIR]   (default target/doc); exit 1 on any finding.
"""
import glob
import html
import os
import re
import sys

REEXPORTS = re.compile(r'<h2 id="reexports".*?</h2>(.*?)(?:<h2 |</section>|$)', re.S)
ENTRY = re.compile(r"<code>(pub use .*?;)</code>", re.S)
HREF = re.compile(r'href="([^"#]+)')
SRC_LINK = re.compile(r'<a class="src" href="([^"]+)"')
ITEM_PAGE = re.compile(r"/(struct|enum|fn|trait|type|constant|macro|static|union|traitalias|attr|derive)\.([^/]+)\.html$")
TAG = re.compile(r"<[^>]+>")


def crates(doc):
    for d in sorted(glob.glob(os.path.join(doc, "*", "index.html"))):
        crate_dir = os.path.dirname(d)
        if os.path.basename(crate_dir) not in ("src", "static.files", "search.index", "trait.impl", "type.impl"):
            yield crate_dir


def is_redirect(text):
    return 'http-equiv="refresh"' in text


def check_crate(crate_dir):
    name = os.path.basename(crate_dir)
    findings = []
    by_source = {}
    for page in glob.glob(os.path.join(crate_dir, "**", "*.html"), recursive=True):
        with open(page, encoding="utf-8") as fh:
            text = fh.read()
        if is_redirect(text):
            continue
        rel = os.path.relpath(page, crate_dir)
        if os.path.basename(page) == "index.html":
            module = "::".join([name] + rel.split(os.sep)[:-1])
            m = REEXPORTS.search(text)
            if m:
                for entry in ENTRY.findall(m.group(1)):
                    for href in HREF.findall(entry):
                        target = os.path.normpath(os.path.join(os.path.dirname(page), href))
                        if target.startswith(crate_dir + os.sep) and os.path.exists(target):
                            stmt = html.unescape(TAG.sub("", entry))
                            findings.append(f"{module}: `{stmt}` re-exports {name}'s own "
                                            f"{os.path.relpath(target, crate_dir)}, also public at its own path")
                            break
        kind = ITEM_PAGE.search(page)
        src = SRC_LINK.search(text)
        if kind and src:
            source = os.path.normpath(os.path.join(os.path.dirname(page), src.group(1)))
            by_source.setdefault((kind.group(1), kind.group(2), source), []).append(rel)
    for (kind, item, _), pages in sorted(by_source.items()):
        if len(pages) > 1:
            findings.append(f"{name}: {kind} {item} has {len(pages)} pages: {', '.join(sorted(pages))}")
    return findings


def main(argv):
    doc = argv[0] if argv else "target/doc"
    if not os.path.isdir(doc):
        print(f"{doc}: no rustdoc output (run cargo doc first)")
        return 2
    bad = 0
    for crate_dir in crates(doc):
        findings = check_crate(crate_dir)
        print(f"{os.path.basename(crate_dir)}: {len(findings)} item(s) under a second public path")
        for f in findings:
            print("  " + f)
        bad += len(findings)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
