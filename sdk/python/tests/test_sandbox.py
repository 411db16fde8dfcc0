"""End-to-end tests of the SDK against a real Warren server: the one named by
WARREN_API_URL and WARREN_API_KEY (or the local admin key file).

They are skipped when no server answers, unless WARREN_TEST_REQUIRE_SERVER=1
(integration/python_sdk_test.go sets it: there a missing server is a
failure). Calls whose route the server does not serve yet (volumes) are
skipped with a message saying so.
"""

from __future__ import annotations

import os
import tempfile
import time
import unittest
import uuid
from typing import List

from warren import (
    Client,
    ConflictError,
    InvalidError,
    NotFoundError,
    Sandbox,
    Snapshot,
    UnauthorizedError,
    Volume,
    WarrenError,
)

MEMORY_MB = 512


def setUpModule() -> None:
    try:
        Client().health()
    except WarrenError as e:
        if os.environ.get("WARREN_TEST_REQUIRE_SERVER") == "1":
            raise
        raise unittest.SkipTest("no Warren server answers (%s); set WARREN_API_URL and WARREN_API_KEY" % e)


def unique(prefix: str) -> str:
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def served(test: unittest.TestCase, e: NotFoundError, what: str) -> None:
    """Skips test when e says the server has no such route (yet); otherwise
    re-raises e."""
    if "no such endpoint" in e.message:
        test.skipTest("the server does not serve %s yet: %s" % (what, e.message))
    raise e


class TestInside(unittest.TestCase):
    """Commands, shells, code, files and jobs in one shared sandbox."""

    sb: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        cls.sb = Sandbox.create(memory_mb=MEMORY_MB, env={"FROM_CREATE": "yes"})

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.delete()

    def test_exec(self) -> None:
        sb = self.sb
        r = sb.exec("echo out; echo err >&2; exit 3")
        self.assertEqual((r.exit_code, r.stdout, r.stderr, r.ok), (3, "out\n", "err\n", False))
        r = sb.exec(["printf", "%s|", "a b", "c"])
        self.assertEqual((r.exit_code, r.stdout), (0, "a b|c|"))
        r = sb.exec(command="pwd; echo $X $FROM_CREATE; cat", cwd="/tmp", env={"X": "1"}, stdin="piped")
        self.assertEqual(r.stdout, "/tmp\n1 yes\npiped")
        r = sb.exec(["no-such-command"])
        self.assertEqual(r.exit_code, 127)
        r = sb.exec("sleep 30", timeout=0.5)
        self.assertEqual((r.exit_code, r.timed_out), (124, True))

    def test_exec_streams(self) -> None:
        sb = self.sb
        chunks: List[str] = []
        errs: List[str] = []
        r = sb.exec(
            "for i in 1 2 3; do echo $i; sleep 0.2; done; echo e >&2; exit 4",
            on_stdout=chunks.append,
            on_stderr=errs.append,
        )
        self.assertEqual("".join(chunks), "1\n2\n3\n")
        self.assertGreaterEqual(len(chunks), 2, "output came in one piece, not as it was written: %r" % chunks)
        self.assertEqual((errs, r.exit_code, r.stdout, r.stderr), (["e\n"], 4, "1\n2\n3\n", "e\n"))

        with sb.exec_stream(["sh", "-c", "echo a; echo b >&2; exit 2"]) as st:
            events = [(ev.stream, ev.data) for ev in st]
        self.assertEqual(sorted(events), [("stderr", "b\n"), ("stdout", "a\n")])
        self.assertEqual(st.exit_code, 2)

        # Closing a stream early kills the command.
        marker = "/tmp/" + unique("not-killed")
        st = sb.exec_stream("echo started; sleep 2; touch %s" % marker)
        self.assertEqual(next(iter(st)).data, "started\n")
        st.close()
        time.sleep(3)
        self.assertFalse(sb.files.exists(marker), "the command ran on after its stream was closed")

    def test_shell(self) -> None:
        sb = self.sb
        dev = sb.shell("dev", cwd="/srv", env={"WHO": "dev"})
        self.assertEqual(dev.run("pwd; echo $WHO").stdout, "/srv\ndev\n")
        dev.run("cd /tmp; export A=1; f() { echo fn-$1; }")
        again = sb.shell("dev")  # the same shell, not a new one
        self.assertEqual(again.run("pwd; echo $A; f x").stdout, "/tmp\n1\nfn-x\n")
        self.assertEqual(again.run(["echo", "argv in a shell"]).stdout, "argv in a shell\n")
        r = dev.run("sleep 30", timeout=0.5)
        self.assertEqual((r.exit_code, r.timed_out), (124, True))
        self.assertEqual(dev.run("echo $A").stdout, "1\n", "the shell did not survive a timeout")
        out: List[str] = []
        dev.run("echo streamed", on_stdout=out.append)
        self.assertEqual("".join(out), "streamed\n")
        info = dev.info()
        self.assertEqual(info.name, "dev")
        self.assertGreaterEqual(info.calls, 5)
        self.assertIn("dev", [s.name for s in sb.shells()])
        dev.close()
        self.assertNotIn("dev", [s.name for s in sb.shells()])
        with self.assertRaises(NotFoundError):
            sb.exec("true", shell="dev")

    def test_run_code(self) -> None:
        sb = self.sb
        r = sb.run_code("import math\nx = 41\nprint('hi')\nx + 1")
        self.assertEqual((r.result, r.stdout, r.ok), ("42", "hi\n", True))
        self.assertEqual(sb.run_code("x * math.floor(2.5)").result, "82")
        r = sb.run_code("1 / 0")
        self.assertFalse(r.ok)
        assert r.error is not None
        self.assertEqual(r.error.name, "ZeroDivisionError")
        self.assertIn("ZeroDivisionError", r.error.traceback)

        # Contexts are separate interpreters.
        ctx = sb.code_context(unique("ctx"))
        self.assertEqual(ctx.run("y = 'own'\ny").result, "'own'")
        r = ctx.run("x")
        assert r.error is not None
        self.assertEqual(r.error.name, "NameError")
        self.assertIn(ctx.name, [c.name for c in sb.code_contexts()])
        self.assertEqual(sb.code_context(ctx.name).run("y").result, "'own'")
        ctx.restart()
        r = ctx.run("y")
        assert r.error is not None
        self.assertEqual(r.error.name, "NameError", "restart kept the context's state")
        ctx.delete()
        self.assertNotIn(ctx.name, [c.name for c in sb.code_contexts()])

        r = sb.run_code("import time\ntime.sleep(30)", timeout=0.5)
        self.assertTrue(r.timed_out)
        self.assertEqual(sb.run_code("x").result, "41", "the default context lost its state at a timeout")

    def test_files(self) -> None:
        files = self.sb.files
        d = "/work/" + unique("files")
        fe = files.write(d + "/sub/a.txt", "héllo\n")
        self.assertEqual((fe.path, fe.type, fe.size, fe.mode), (d + "/sub/a.txt", "file", 7, "0644"))
        self.assertEqual(files.read_text(d + "/sub/a.txt"), "héllo\n")
        blob = bytes(range(256)) * 4
        files.write(d + "/bin", blob, mode=0o755)
        self.assertEqual(files.read(d + "/bin"), blob)
        self.assertEqual(files.stat(d + "/bin").mode, "0755")
        with tempfile.TemporaryFile() as f:
            f.write(b"from a file object")
            f.seek(0)
            files.write(d + "/fo", f)
        self.assertEqual(files.read(d + "/fo"), b"from a file object")

        self.assertEqual(sorted((e.name, e.type) for e in files.list(d)), [("bin", "file"), ("fo", "file"), ("sub", "dir")])
        self.assertIn(d + "/sub/a.txt", [e.path for e in files.list(d, depth=2)])
        self.assertTrue(files.stat(d + "/sub").is_dir)
        self.assertTrue(files.exists(d + "/sub/a.txt"))
        self.assertFalse(files.exists(d + "/nope"))
        with self.assertRaises(NotFoundError):
            files.read(d + "/nope")
        with self.assertRaises(InvalidError):
            files.read("relative/path")

        files.remove(d + "/bin")
        self.assertFalse(files.exists(d + "/bin"))
        with self.assertRaises(WarrenError):
            files.remove(d + "/sub")  # not empty, not recursive
        files.remove(d + "/sub", recursive=True)
        self.assertFalse(files.exists(d + "/sub"))

        with tempfile.TemporaryDirectory() as local, tempfile.TemporaryDirectory() as back:
            os.makedirs(os.path.join(local, "x", "y"))
            with open(os.path.join(local, "x", "y", "z.txt"), "w") as f:
                f.write("deep")
            with open(os.path.join(local, "top"), "wb") as f:
                f.write(b"\x00\x01")
            res = files.upload_dir(local, d + "/up")
            self.assertGreaterEqual(res.entries, 4)
            self.assertEqual(files.read_text(d + "/up/x/y/z.txt"), "deep")
            res = files.download_dir(d + "/up", back)
            with open(os.path.join(back, "x", "y", "z.txt")) as f:
                self.assertEqual(f.read(), "deep")
            with open(os.path.join(back, "top"), "rb") as f:
                self.assertEqual(f.read(), b"\x00\x01")
            self.assertGreaterEqual(res.entries, 4)

    def test_jobs(self) -> None:
        jobs = self.sb.jobs
        j = jobs.start("echo start; echo oops >&2; sleep 1; echo end")
        self.assertTrue(j.id.startswith("job-"))
        self.assertEqual(j.state, "running")
        self.assertIn(j.id, [x.id for x in jobs.list()])
        self.assertEqual(jobs.get(j).id, j.id)
        self.assertEqual(b"".join(jobs.follow(j)), b"start\nend\n")
        done = jobs.wait(j, timeout=30)
        self.assertEqual((done.state, done.exit_code, done.stdout_bytes), ("exited", 0, 10))
        self.assertEqual(jobs.output(j), "start\nend\n")
        self.assertEqual(jobs.output(j, offset=6), "end\n")
        self.assertEqual(jobs.output_bytes(j.id, stream="stderr"), b"oops\n")

        cat = jobs.start(["cat"])
        self.assertTrue(cat.stdin_open)
        jobs.write_stdin(cat, "to ")
        jobs.write_stdin(cat, b"stdin", close=True)
        self.assertEqual(jobs.wait(cat, timeout=30).exit_code, 0)
        self.assertEqual(jobs.output(cat), "to stdin")

        long = jobs.start("sleep 300")
        with self.assertRaises(TimeoutError):
            jobs.wait(long, timeout=0.3)
        jobs.kill(long, "KILL")
        killed = jobs.wait(long, timeout=30)
        self.assertEqual((killed.state, killed.exit_code), ("killed", 137))
        self.assertEqual(jobs.wait(jobs.start("sleep 300", timeout=0.5), timeout=30).timed_out, True)

        jobs.delete(j)
        with self.assertRaises(NotFoundError):
            jobs.get(j)

    def test_errors(self) -> None:
        with self.assertRaises(NotFoundError) as cm:
            Sandbox.get("sb-doesnotexist")
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
        with self.assertRaises(InvalidError) as cm2:
            self.sb.exec([""])
        self.assertEqual(cm2.exception.status, 400)
        with self.assertRaises(UnauthorizedError):
            Sandbox.list(api_url=self.sb.client.api_url, api_key="not-a-key")
        with self.assertRaises(InvalidError):
            self.sb.shell("x" * 65)  # names are at most 64 characters


class TestLifecycle(unittest.TestCase):
    def track(self, sb: Sandbox) -> Sandbox:
        self.addCleanup(sb.delete)
        return sb

    def test_create_get_list_delete(self) -> None:
        name = unique("py")
        tag = unique("tag")
        sb = self.track(
            Sandbox.create(
                name=name,
                cpus=0.5,
                memory_mb=MEMORY_MB,
                env={"GREETING": "hello"},
                metadata={"suite": tag},
                idle={"timeout_s": 3600, "action": "delete"},
            )
        )
        self.assertTrue(sb.id.startswith("sb-"))
        self.assertEqual((sb.name, sb.state, sb.cpus, sb.memory_mb), (name, "running", 0.5, MEMORY_MB))
        self.assertEqual(sb.metadata, {"suite": tag})
        self.assertEqual(sb.idle, {"timeout_s": 3600, "action": "delete"})
        self.assertIsNotNone(sb.created_at)
        self.assertEqual(sb.exec("echo $GREETING").stdout, "hello\n")

        self.assertEqual([s.id for s in Sandbox.list(metadata={"suite": tag})], [sb.id])
        self.assertIn(sb.id, [s.id for s in Sandbox.list(state="running")])
        self.assertEqual(Sandbox.get(sb.id), sb)
        self.assertEqual(sb.refresh().state, "running")
        with self.assertRaises(ConflictError):
            Sandbox.create(name=name, memory_mb=MEMORY_MB)

        sb.delete()
        with self.assertRaises(NotFoundError):
            Sandbox.get(sb.id)
        sb.delete()  # already gone: not an error

    def test_context_manager(self) -> None:
        with Sandbox.create(memory_mb=MEMORY_MB) as sb:
            sb.files.write("/work/kept", "yes")
        with self.assertRaises(NotFoundError):
            Sandbox.get(sb.id)

        with Sandbox.create(memory_mb=MEMORY_MB, on_exit="pause") as sb:
            self.track(sb)
            sb.shell("s").run("export KEPT=1")
        self.assertEqual(Sandbox.get(sb.id).state, "paused")
        with Sandbox.connect(sb.id) as again:  # resumes; on_exit "keep"
            self.assertEqual(again.state, "running")
            self.assertEqual(again.shell("s").run("echo $KEPT").stdout, "1\n")
        self.assertEqual(Sandbox.get(sb.id).state, "running")

    def test_pause_resume(self) -> None:
        sb = self.track(Sandbox.create(memory_mb=MEMORY_MB))
        job = sb.jobs.start("i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done")
        self.assertEqual(sb.pause().state, "paused")
        self.assertEqual(sb.state, "paused")
        with self.assertRaises(ConflictError):
            sb.exec("true")
        self.assertEqual(sb.resume().state, "running")
        self.assertEqual(sb.jobs.get(job).state, "running", "a job did not survive pause and resume")
        sb.pause()
        self.assertEqual(Sandbox.connect(sb.id).state, "running")

    def test_snapshot_revert_fork(self) -> None:
        sb = self.track(Sandbox.create(memory_mb=MEMORY_MB))
        sb.files.write("/work/state", "one")
        sb.run_code("v = 'in memory'")
        snap = sb.snapshot("py-snap")
        self.assertEqual((snap.name, snap.sandbox_id, snap.kind), ("py-snap", sb.id, "manual"))
        self.assertTrue(snap.id)
        self.assertEqual(Snapshot.get(snap.id), snap)
        self.assertIn(snap, sb.snapshots())
        self.assertIn(snap, Snapshot.list(sandbox=sb))
        self.assertIn(snap, Snapshot.list())

        sb.files.write("/work/state", "two")
        sb.run_code("v = 'changed'")
        self.assertEqual(sb.revert(snap).id, sb.id)
        self.assertEqual(sb.state, "running")
        self.assertEqual(sb.files.read_text("/work/state"), "one")
        self.assertEqual(sb.run_code("v").result, "'in memory'")

        forks = sb.fork(2)
        for f in forks:
            self.track(f)
        self.assertEqual(len(forks), 2)
        self.assertEqual(len({f.id for f in forks} | {sb.id}), 3)
        for f in forks:
            self.assertEqual(f.files.read_text("/work/state"), "one")
            self.assertEqual(f.run_code("v").result, "'in memory'")
        f0 = forks[0]
        f0.files.write("/work/state", "fork")
        self.assertEqual(sb.files.read_text("/work/state"), "one", "a fork wrote through to its parent")

        (child,) = snap.fork()
        self.track(child)
        self.assertEqual(child.files.read_text("/work/state"), "one")
        made = self.track(Sandbox.create(snapshot=snap))
        self.assertEqual(made.from_snapshot, snap.id)
        self.assertEqual(made.files.read_text("/work/state"), "one")

        extra = sb.snapshot()
        extra.delete()
        with self.assertRaises(NotFoundError):
            Snapshot.get(extra.id)


class TestVolume(unittest.TestCase):
    def test_volume(self) -> None:
        name = unique("vol")
        try:
            vol = Volume.create(name, size_mb=64)
        except NotFoundError as e:
            served(self, e, "/v1/volumes")
            return
        self.addCleanup(lambda: _quietly(vol.delete))
        self.assertEqual(vol.name, name)
        self.assertEqual(Volume.get(name), vol)
        self.assertIn(vol, Volume.list())

        try:
            sb = Sandbox.create(memory_mb=MEMORY_MB, volumes=[(vol, "/data")])
        except InvalidError as e:
            self.skipTest("the server does not mount volumes yet: %s" % e)
        with sb:
            sb.files.write("/data/kept", "across sandboxes")
            self.assertEqual(vol.refresh().used_by, [sb.id])
            with self.assertRaises(ConflictError):
                vol.delete()
        with Sandbox.create(memory_mb=MEMORY_MB, volumes=[{"volume": name, "path": "/mnt", "read_only": True}]) as sb2:
            self.assertEqual(sb2.files.read_text("/mnt/kept"), "across sandboxes")
        vol.delete()
        with self.assertRaises(NotFoundError):
            Volume.get(name)


def _quietly(fn) -> None:  # type: ignore[no-untyped-def]
    try:
        fn()
    except WarrenError:
        pass


if __name__ == "__main__":
    unittest.main()
