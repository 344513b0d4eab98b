"""The bench's malloc thresholds: set for the bench program on glibc, never over the
user's own, and never by an in-process call."""
import platform

import pytest

from fastbptt import cli
from fastbptt.bench import allocator

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")


@glibc
def test_sets_both_thresholds_and_keeps_the_rest():
    env = allocator.steady_environment({"PATH": "/bin", "OPENBLAS_NUM_THREADS": "1"})
    assert env["PATH"] == "/bin" and env["OPENBLAS_NUM_THREADS"] == "1"
    assert int(env["MALLOC_MMAP_THRESHOLD_"]) == 256 << 20
    assert int(env["MALLOC_TRIM_THRESHOLD_"]) == 1 << 30
    assert env["FASTBPTT_BENCH_MALLOC"] == "set"


@pytest.mark.parametrize("name", sorted(allocator.VARIABLES))
def test_a_users_own_setting_is_kept(name):
    assert allocator.steady_environment({name: "131072"}) is None


def test_an_in_process_call_never_re_executes(monkeypatch):
    def refuse(*args):
        raise AssertionError("execve called")

    monkeypatch.setattr(cli.os, "execve", refuse)
    monkeypatch.setattr(cli, "run_command", lambda *a, **k: 0)
    assert cli.main(["bench", "--workloads", "W2", "--no-peers"]) == 0


@glibc
def test_the_program_re_executes_once_with_them(monkeypatch):
    calls = []
    monkeypatch.setattr(cli.os, "execve", lambda *args: calls.append(args))
    monkeypatch.setattr(cli, "run_command", lambda *a, **k: 0)
    for name in allocator.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli.sys, "argv", ["fastbptt", "bench", "--workloads", "W2"])
    cli.main()
    (executable, argv, env), = calls
    assert argv[1:] == ["-m", "fastbptt", "bench", "--workloads", "W2"]
    assert all(env[name] == value for name, value in allocator.VARIABLES.items())
