"""The bench's malloc thresholds: set for the bench program on glibc, never over the
user's own, and never by an in-process call."""
import os
import platform
import subprocess
import sys

import pytest

import fastbptt
from fastbptt import cli
from fastbptt.bench import allocator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastbptt.__file__)))
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


def _re_executed(monkeypatch, program):
    """(argv, environment) with which the program ``program`` re-executes itself."""
    calls = []
    monkeypatch.setattr(cli.os, "execve", lambda *args: calls.append(args))
    monkeypatch.setattr(cli, "run_command", lambda *a, **k: 0)
    for name in allocator.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli.sys, "argv", program)
    cli.main()
    (executable, argv, env), = calls
    return argv, env


@glibc
def test_the_program_re_executes_once_with_them(monkeypatch):
    argv, env = _re_executed(monkeypatch, ["fastbptt", "bench", "--workloads", "W2"])
    assert argv[-5] == "-c" and argv[-3:] == ["bench", "--workloads", "W2"]
    assert all(env[name] == value for name, value in allocator.VARIABLES.items())


@glibc
def test_the_program_re_executes_with_every_x_option(monkeypatch):
    monkeypatch.setattr(cli.sys, "_xoptions", {"int_max_str_digits": "9000",
                                               "faulthandler": True, "no_debug_ranges": True})
    argv, env = _re_executed(monkeypatch, ["fastbptt", "bench"])
    options = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "-X"]
    assert sorted(options) == ["faulthandler", "int_max_str_digits=9000", "no_debug_ranges"]


@glibc
def test_the_program_runs_again_from_its_own_package(tmp_path):
    """A fastbptt folder in the current directory does not take over the re-executed
    bench (``-m fastbptt`` would import it)."""
    (tmp_path / "fastbptt").mkdir()
    (tmp_path / "fastbptt" / "__init__.py").write_text("import sys\nprint('SHADOW')\n"
                                                      "sys.exit(7)\n")
    env = {k: v for k, v in os.environ.items() if k not in allocator.VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    code = (f"import sys; sys.path.insert(0, {ROOT!r}); sys.argv[0] = 'fastbptt'; "
            "from fastbptt._start import main; sys.exit(main())")      # as the script runs
    done = subprocess.run([sys.executable, "-c", code, "bench", "--workloads", "W2",
                           "--no-peers", "--repeat", "1"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "SHADOW" not in done.stdout, done
    assert "W2" in done.stdout


@glibc
def test_the_pytest_benchmark_suite_times_with_them_too(tmp_path):
    """It timed PyTorch with glibc's defaults (G1 90 ms a call where the bench measured
    74), beside the bench's figures in the README."""
    pytest.importorskip("pytest_benchmark")
    environ = {k: v for k, v in os.environ.items() if k not in allocator.VARIABLES}
    out = tmp_path / "times.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_workloads.py", "-q",
         "-p", "no:cacheprovider", "-k", "W2 and fastbptt", "--benchmark-only",
         "--benchmark-max-time", "0.01", f"--benchmark-json={out}"],
        cwd=ROOT, env=environ, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    import json
    info = json.loads(out.read_text())["machine_info"]["fastbptt_bench"]["environment"]
    assert {k: info.get(k) for k in allocator.VARIABLES} == allocator.VARIABLES
