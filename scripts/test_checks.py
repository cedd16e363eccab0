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

    def test_a_re_export_of_one_name_is_looked_through_as_a_braced_one(self):
        # `pub use state::S;` in mod.rs is no dependency of mod.rs on
        # state.rs, exactly as `pub use state::{S};` is not.
        for line in ("pub use state::S;", "pub use state::{S};"):
            rc, out = self.check({
                "lib.rs": "mod policy;\n",
                "policy/mod.rs": "mod state;\n" + line + "\npub struct P;\n",
                "policy/state.rs": "use super::P;\npub struct S(pub P);\n",
            })
            self.assertEqual(rc, 0, line + "\n" + out)

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

    def test_a_test_module_under_cfg_all_test_is_ignored_and_cfg_any_test_is_not(self):
        # `#[cfg(all(test, feature = ".."))]` is test code like `#[cfg(test)]`;
        # `#[cfg(any(test, feature = ".."))]` is built without tests too.
        rc, out = self.check({
            "lib.rs": "mod a;\n",
            "a.rs": "pub struct A;\n#[cfg(all(test, feature = \"x\"))]\nmod tests {\n    use super::*;\n"
                    "    #[test]\n    fn t() { let _ = A; }\n}\n",
        })
        self.assertEqual(rc, 0, out)
        rc, out = self.check({
            "lib.rs": "mod a;\n",
            "a.rs": "pub struct A;\n#[cfg(any(test, feature = \"x\"))]\npub mod util {\n    use super::*;\n"
                    "    pub fn f(_: A) {}\n}\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("glob import outside tests: a.rs", out)

    def test_super_inside_an_inline_module_is_the_file_itself(self):
        # `super::X` in a.rs's `mod inner { .. }` names a.rs's X, not lib.rs's
        # (the checker once read it as a.rs -> lib.rs: a circle with lib.rs).
        rc, out = self.check({
            "lib.rs": "mod a;\npub fn root() { a::f(); }\n",
            "a.rs": "pub struct X;\npub fn f() {}\nmod inner {\n    use super::X;\n"
                    "    pub fn g(_: X) { super::f() }\n}\n",
        })
        self.assertEqual(rc, 0, out)
        self.assertIn("0 cycle(s)", out)

    def test_another_crates_item_is_an_edge_to_the_file_that_re_exports_it(self):
        # lib.rs re-exports another crate's `policy`: a.rs, naming it through
        # lib.rs, depends on lib.rs (the checker once dropped this edge). A
        # same-named fn in a file of this crate is no dependency of lib.rs.
        rc, out = self.check({
            "lib.rs": "mod a;\nmod b;\npub use other::policy;\npub fn root() { b::h() }\n",
            "a.rs": "use crate::policy::Policy;\npub fn policy() {}\npub fn f(_: Policy) {}\n",
            "b.rs": "pub fn h() { crate::a::policy() }\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("a.rs <-> b.rs <-> lib.rs", out)
        self.assertIn("a.rs -> lib.rs", out)

    def test_the_five_file_circle_through_tower_box_error_fails(self):
        # The circle tonic-retry once had, which this checker reported as 0:
        # metrics/body.rs -> transport.rs (BoxError, tower's, re-exported)
        # -> request_error.rs -> retrying.rs (BoxFuture) -> recorder.rs
        # -> metrics/body.rs.
        rc, out = self.check({
            "lib.rs": "mod metrics;\nmod recorder;\npub mod request_error;\npub mod retrying;\npub mod transport;\n",
            "metrics/mod.rs": "pub(crate) mod body;\n",
            "metrics/body.rs": "use crate::transport::BoxError;\npub(crate) fn deliver(_: BoxError) {}\n",
            "transport.rs": "use crate::request_error::RequestErrorLayer;\npub use tower::BoxError;\n"
                            "pub fn grpc_channel() -> RequestErrorLayer { RequestErrorLayer }\n",
            "request_error.rs": "use crate::retrying::BoxFuture;\npub struct RequestErrorLayer;\n"
                                "pub fn call() -> BoxFuture<()> { Box::pin(async {}) }\n",
            "retrying.rs": "use crate::recorder::CallRecorder;\npub type BoxFuture<T> = "
                           "std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;\n"
                           "pub fn run(_: CallRecorder) {}\n",
            "recorder.rs": "use crate::metrics::body;\npub(crate) struct CallRecorder;\n"
                           "pub(crate) fn end() { body::deliver(todo!()) }\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("metrics/body.rs <-> recorder.rs <-> request_error.rs <-> retrying.rs <-> transport.rs", out)
        self.assertIn("metrics/body.rs -> transport.rs", out)

    def test_the_five_files_with_the_vocabulary_in_a_leaf_pass(self):
        # The same files once BoxError and BoxFuture live in a leaf module.
        rc, out = self.check({
            "lib.rs": "mod metrics;\nmod recorder;\nmod request_error;\npub mod retrying;\n"
                      "pub mod transport;\npub mod vocabulary;\n",
            "vocabulary.rs": "pub use tower::BoxError;\npub type BoxFuture<T> = "
                             "std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;\n",
            "metrics/mod.rs": "pub(crate) mod body;\n",
            "metrics/body.rs": "use crate::vocabulary::BoxError;\npub(crate) fn deliver(_: BoxError) {}\n",
            "transport.rs": "use crate::request_error::RequestErrorLayer;\n"
                            "pub fn grpc_channel() -> RequestErrorLayer { RequestErrorLayer }\n",
            "request_error.rs": "use crate::vocabulary::BoxFuture;\npub struct RequestErrorLayer;\n"
                                "pub fn call() -> BoxFuture<()> { Box::pin(async {}) }\n",
            "retrying.rs": "use crate::recorder::CallRecorder;\npub fn run(_: CallRecorder) {}\n",
            "recorder.rs": "use crate::metrics::body;\npub(crate) struct CallRecorder;\n"
                           "pub(crate) fn end() { body::deliver(todo!()) }\n",
        })
        self.assertEqual(rc, 0, out)
        self.assertIn("0 cycle(s)", out)


class Floors(unittest.TestCase):
    ORDER = "# bottom first\na\nb c  # siblings\nd\n"

    def check(self, files, order=ORDER, script="floors.py"):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            write_tree(src, files)
            write_tree(tmp, {"floors.txt": order})
            if script == "module-cycles.py":
                return run([sys.executable, os.path.join(HERE, script), src])
            return run([sys.executable, os.path.join(HERE, script), "--order", os.path.join(tmp, "floors.txt"), src])

    # a at the bottom, b and c above it, d (a folder) on top, lib.rs the roof.
    STACK = {
        "lib.rs": "mod a;\nmod b;\nmod c;\npub mod d;\npub use d::X;\npub fn root() -> a::A { a::A }\n",
        "a.rs": "pub struct A;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod more {\n    use crate::d::X;\n}\n",
        "a/tests.rs": "use crate::d::X;\n",
        "b.rs": "use crate::a::A;\npub struct B(pub A);\n",
        "c.rs": "pub struct C(pub crate::a::A);\n",
        "d/mod.rs": "mod x;\npub use x::X;\n",
        "d/x.rs": "use crate::b::B;\nuse crate::c::C;\npub struct X(pub B, pub C);\n",
    }

    def test_a_clean_stacked_tree_passes(self):
        # Test files and #[cfg(test)] modules may import any room.
        rc, out = self.check(self.STACK)
        self.assertEqual(rc, 0, out)
        self.assertIn("src: 4 rooms on 3 floors, 7 room-to-room imports, 0 upward, 0 sideways, "
                      "0 file cycles counting facade paths", out)

    def test_an_upward_import_fails_and_names_both_files(self):
        rc, out = self.check({**self.STACK, "a.rs": "pub struct A;\npub fn f(_: crate::d::x::X) {}\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("upward: a.rs (floor 1: a) -> d/x.rs (floor 3: d) via crate::d::x::X", out)

    def test_an_import_between_siblings_fails(self):
        rc, out = self.check({**self.STACK, "b.rs": "use crate::a::A;\nuse crate::c::C;\npub struct B(pub A, pub C);\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("sideways: b.rs (floor 2: b) -> c.rs (floor 2: c) via use crate::c::C", out)

    def test_an_unlisted_room_and_a_missing_room_fail(self):
        rc, out = self.check({**self.STACK, "e.rs": "pub struct E;\n"}, order=self.ORDER + "z\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("unlisted room: e (e.rs)", out)
        self.assertIn("missing room: z (floor 4)", out)

    def test_a_path_through_a_higher_rooms_re_export_fails(self):
        # conn defines ResultCompression; session re-exports it; conn's builder
        # names it through session: an import of session/mod.rs, upward.
        # module-cycles looks through the re-export and sees no fault.
        files = {
            "lib.rs": "mod conn;\npub mod session;\n",
            "conn/mod.rs": "pub(crate) mod rc;\nmod builder;\n",
            "conn/rc.rs": "pub struct ResultCompression;\n",
            "conn/builder.rs": "pub fn f() -> crate::session::ResultCompression { todo!() }\n",
            "session/mod.rs": "pub use crate::conn::rc::ResultCompression;\n",
        }
        rc, out = self.check(files, order="conn\nsession\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("upward: conn/builder.rs (floor 1: conn) -> session/mod.rs (floor 2: session) "
                      "via crate::session::ResultCompression", out)
        rc, out = self.check(files, script="module-cycles.py")
        self.assertEqual(rc, 0, out)

    def test_a_path_through_lib_rs_fails(self):
        rc, out = self.check({**self.STACK, "c.rs": "pub struct C(pub crate::a::A);\npub fn f(_: crate::X) {}\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("upward: c.rs (floor 2: c) -> lib.rs (roof) via crate::X", out)

    def test_a_lower_room_re_exporting_a_higher_rooms_item_fails(self):
        rc, out = self.check({**self.STACK, "a.rs": "pub struct A;\npub use crate::b::B;\n"})
        self.assertEqual(rc, 1, out)
        self.assertIn("upward: a.rs (floor 1: a) -> b.rs (floor 2: b) via pub use crate::b::B", out)

    def test_a_cycle_through_a_re_export_in_mod_rs_fails(self):
        # literal.rs names Value through mod.rs, which calls literal.rs: a
        # circle once facade paths count (module-cycles looks through it).
        files = {
            "lib.rs": "pub mod params;\n",
            "params/mod.rs": "mod literal;\nmod value;\npub use value::Value;\n"
                             "pub fn f() -> Value { literal::g() }\n",
            "params/value.rs": "pub struct Value;\n",
            "params/literal.rs": "use super::Value;\npub fn g() -> Value { Value }\n",
        }
        rc, out = self.check(files, order="params\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("cycle (facade paths count): params/literal.rs <-> params/mod.rs", out)
        self.assertIn("1 file cycles counting facade paths", out)
        rc, out = self.check(files, script="module-cycles.py")
        self.assertEqual(rc, 0, out)


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


# Stand-ins for the many-clients row of chaos_table.py: a server and a
# guard that only print where they listen, a fault proxy that reports the
# cuts it was told to make (fewer with FAKE_CUTS), and a client that
# reports range(n) exact, or one row short ("drop").
FAKE_LISTENER = """\
    import signal, sys, time
    print("listening on 127.0.0.1:9", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(1)
    """
FAKE_PROXY = """\
    import json, os, signal, sys, time
    cuts = sys.argv[sys.argv.index("--cuts") + 1]
    made = int(os.environ.get("FAKE_CUTS", len(cuts.split(","))))
    print("127.0.0.1:9", flush=True)
    def done(*_):
        print(json.dumps({"cuts": made}), flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, done)
    while True:
        time.sleep(1)
    """
FAKE_CLIENT = """\
    import json, re, sys
    n = int(re.search(r"range\\((\\d+)\\)", sys.argv[sys.argv.index("--query") + 1]).group(1))
    rows = n - 1 if sys.argv[1] == "drop" else n
    print(json.dumps({"rows": rows, "wrong": None, "error": None, "seconds": 0.1}))
    """


class ChaosTableMany(unittest.TestCase):
    def check(self, kinds, n, env=None):
        with tempfile.TemporaryDirectory() as tmp:
            write_tree(tmp, {"listener.py": FAKE_LISTENER, "proxy.py": FAKE_PROXY,
                             "client.py": FAKE_CLIENT,
                             "s.toml": '[expect]\nquery = "SELECT id FROM range(100)"\nrows = 100\n'})
            for name in ("listener", "proxy"):
                exe = os.path.join(tmp, name)
                with open(exe, "w") as fh:
                    fh.write(f"#!/bin/sh\nexec {sys.executable} {exe}.py \"$@\"\n")
                os.chmod(exe, 0o755)
            listener = os.path.join(tmp, "listener")
            clients = [arg for kind in kinds for arg in
                       ("--client", f"{kind}={sys.executable} {tmp}/client.py {kind}")]
            p = subprocess.run(
                [sys.executable, os.path.join(HERE, "chaos_table.py"), "--chaos", listener,
                 "--guard", listener, "--proxy", os.path.join(tmp, "proxy"), *clients,
                 "--many", str(n), "--many-scenario", os.path.join(tmp, "s.toml"),
                 "--many-cuts", "1M,2M,2M"],
                capture_output=True, text=True, env={**os.environ, "CHAOS_LOG_DIR": tmp, **(env or {})})
            return p.returncode, p.stdout + p.stderr

    def test_every_client_exact_and_every_cut_made_passes(self):
        rc, out = self.check(["exact", "also"], 4)
        self.assertEqual(rc, 0, out)
        self.assertIn("many-4: 4/4 exact", out)
        self.assertIn("| 2/2 exact", out)
        self.assertIn("3 of 3 cuts", out)

    def test_one_client_a_row_short_fails_and_is_named(self):
        rc, out = self.check(["exact", "drop"], 4)
        self.assertEqual(rc, 1, out)
        self.assertIn("**FAIL**: 2/4 exact", out)
        self.assertIn("client 1 (drop): 99 of 100, no error", out)
        self.assertIn("2 failed cell(s)", out)

    def test_no_cut_at_all_fails(self):
        rc, out = self.check(["exact"], 2, env={"FAKE_CUTS": "0"})
        self.assertEqual(rc, 1, out)
        self.assertIn("the fault proxy made no cut (schedule 1M,2M,2M)", out)

    def test_some_cuts_of_the_schedule_pass_and_are_counted(self):
        rc, out = self.check(["exact"], 2, env={"FAKE_CUTS": "1"})
        self.assertEqual(rc, 0, out)
        self.assertIn("1 of 3 cuts", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
