#!/usr/bin/env python3
"""Tests of the house checks themselves: each must fail on a planted fault.

Why: a check that reports success is only worth something if it is seen to
fail where it must. Each case writes a tiny crate into a temporary folder,
runs the check on it and asserts the verdict (and, for failures, that the
report names the files or paths involved).

Run: python3 scripts/test_checks.py   (needs cargo for the one-path cases)
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def write_tree(root, files):
    for rel, body in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(textwrap.dedent(body))


def run(args, cwd=None):
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


class ModuleCycles(unittest.TestCase):
    def check(self, files):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            write_tree(src, files)
            return run([sys.executable, os.path.join(HERE, "module-cycles.py"), "-v", src])

    def test_a_clean_tree_passes(self):
        rc, out = self.check({
            "lib.rs": "mod a;\nmod b;\npub use a::Thing;\n",
            "a.rs": "pub struct Thing;\n",
            "b.rs": "use crate::a::Thing;\npub fn f(_: Thing) {}\n",
        })
        self.assertEqual(rc, 0, out)
        self.assertIn("0 cycle(s)", out)

    def test_a_circle_through_an_item_of_mod_rs_fails(self):
        # The old checker dropped every dependency on an item of a mod.rs.
        rc, out = self.check({
            "lib.rs": "mod session;\n",
            "session/mod.rs": "mod upload;\npub struct SessionError;\npub fn go() { upload::send(); }\n",
            "session/upload.rs": "use super::SessionError;\npub fn send() -> Option<SessionError> { None }\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("session/mod.rs <-> session/upload.rs", out)

    def test_a_three_file_circle_fails(self):
        rc, out = self.check({
            "lib.rs": "mod a;\nmod b;\nmod c;\n",
            "a.rs": "pub struct A;\npub fn f() -> crate::b::B { crate::b::B }\n",
            "b.rs": "pub struct B;\npub fn g() -> crate::c::C { crate::c::C }\n",
            "c.rs": "use crate::a::A;\npub struct C;\npub fn h(_: A) {}\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("a.rs <-> b.rs <-> c.rs", out)

    def test_a_re_export_is_looked_through(self):
        # b names the re-exported path; it depends on a.rs, not on lib.rs.
        rc, out = self.check({
            "lib.rs": "mod a;\nmod b;\npub use a::X;\npub fn root() { b::f(); }\n",
            "a.rs": "pub struct X;\n",
            "b.rs": "pub fn f() -> crate::X { crate::X }\n",
        })
        self.assertEqual(rc, 0, out)

    def test_methods_written_beside_a_caller_that_needs_them_fail(self):
        # service.rs dispatches to methods that executions.rs writes in an
        # `impl Service` block, importing Service back: a circle.
        rc, out = self.check({
            "lib.rs": "mod service;\nmod executions;\n",
            "service.rs": "pub struct Service;\nimpl Service {\n    pub fn call(&self) { self.execute(); }\n}\n",
            "executions.rs": "use crate::service::Service;\nimpl Service {\n    pub fn execute(&self) {}\n}\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("executions.rs <-> service.rs", out)

    def test_methods_elsewhere_that_the_home_never_calls_pass(self):
        rc, out = self.check({
            "lib.rs": "mod service;\nmod extra;\n",
            "service.rs": "pub struct Service;\n",
            "extra.rs": "use crate::service::Service;\nimpl Service {\n    pub fn extra(&self) {}\n}\n",
        })
        self.assertEqual(rc, 0, out)

    def test_a_glob_import_outside_tests_fails_and_inside_tests_passes(self):
        rc, out = self.check({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub struct A;\n",
            "b.rs": "use crate::a::*;\npub fn f(_: A) {}\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("glob import outside tests: b.rs", out)
        rc, out = self.check({
            "lib.rs": "mod a;\n",
            "a.rs": "pub struct A;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn t() { let _ = A; }\n}\n",
        })
        self.assertEqual(rc, 0, out)

    def test_other_crates_are_not_followed(self):
        # lib.rs re-exports another crate's `policy`; a same-named fn in a
        # file of this crate must not become a dependency.
        rc, out = self.check({
            "lib.rs": "mod a;\nmod b;\npub use other::policy;\n",
            "a.rs": "use crate::policy::Policy;\npub fn policy() {}\npub fn f(_: Policy) { crate::b::g() }\n",
            "b.rs": "pub fn g() {}\npub fn h() { crate::a::policy() }\n",
        })
        self.assertEqual(rc, 1, out)  # a -> b -> a through real paths only
        self.assertIn("a.rs <-> b.rs", out)


class OnePath(unittest.TestCase):
    def check(self, lib):
        if shutil.which("cargo") is None:
            self.skipTest("cargo not installed")
        with tempfile.TemporaryDirectory() as tmp:
            write_tree(tmp, {
                "Cargo.toml": '[package]\nname = "fixture"\nversion = "0.0.0"\nedition = "2021"\n',
                "src/lib.rs": lib,
            })
            rc, out = run(["cargo", "doc", "--no-deps", "-q"], cwd=tmp)
            self.assertEqual(rc, 0, out)
            return run([sys.executable, os.path.join(HERE, "one-path.py"), os.path.join(tmp, "target", "doc")])

    def test_an_item_under_one_path_passes(self):
        rc, out = self.check("mod inner { pub struct X; }\npub use inner::X;\npub mod m { pub struct Y; }\n")
        self.assertEqual(rc, 0, out)

    def test_a_public_item_re_exported_elsewhere_fails(self):
        rc, out = self.check("pub mod errors { pub struct UploadError; }\npub use errors::UploadError;\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("UploadError", out)

    def test_a_glob_re_export_of_a_public_module_fails(self):
        rc, out = self.check("pub mod spark { pub mod connect { pub struct Plan; } }\npub use spark::connect::*;\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("spark::connect", out)

    def test_an_inlined_second_copy_fails(self):
        rc, out = self.check("pub mod a { pub struct Z; }\n#[doc(inline)]\npub use a::Z;\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("Z", out)


class DocPaths(unittest.TestCase):
    def check(self, files):
        with tempfile.TemporaryDirectory() as tmp:
            write_tree(tmp, files)
            return run([sys.executable, os.path.join(HERE, "doc-paths.py"), tmp])

    FILES = {
        "src/a.rs": "",
        "src/room/b.rs": "",
        "src/room/c.rs": "",
        "crates/k/src/d.rs": "",
    }

    def test_paths_that_exist_pass(self):
        rc, out = self.check({**self.FILES, "README.md": """\
            See `src/a.rs`, `src/room/{b,c}.rs` and `crates/k/src/*.rs`.

            ```text
            src/
              a.rs       the a
              room/      b.rs, c.rs
                         and c.rs again
            ```
            """})
        self.assertEqual(rc, 0, out)
        self.assertIn("8 source path(s)", out)

    def test_a_missing_path_in_a_note_fails(self):
        rc, out = self.check({**self.FILES, "docs/note.md": "Moved: `src/room/{b,gone}.rs`.\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("docs/note.md:1: src/room/gone.rs does not exist", out)

    def test_a_missing_file_in_a_module_map_fails(self):
        rc, out = self.check({**self.FILES, "README.md": """\
            ```text
            src/
              room/      b.rs, hedge.rs (every hedging rule)
            ```
            """})
        self.assertEqual(rc, 1, out)
        self.assertIn("README.md:3: src/room/hedge.rs does not exist", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
