"""``import fastbptt`` itself imports neither NumPy nor Numba, and nothing it loads imports
PyTorch or JAX; every public name loads its module on first use; a bridge whose framework
is missing says in one line which extra to install; NUMBA_DISABLE_JIT is refused in one
line whether the environment or Numba's configuration sets it. Each check runs in a fresh
interpreter."""
import os
import subprocess
import sys

import pytest

import fastbptt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)


def test_import_fastbptt_imports_no_framework():
    r = python("import sys, fastbptt, fastbptt.bench.workloads\n"
               "from fastbptt import *\n"
               "print(sorted(m for m in ('torch', 'jax', 'jaxlib') if m in sys.modules))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("bridge, framework, extra", [("torch", "torch", "torch"),
                                                      ("jax", "jax", "jax"),
                                                      ("distributed", "dask", "distributed")])
def test_missing_framework_names_the_extra(bridge, framework, extra):
    """In one line, as a ModuleNotFoundError: ``pytest.importorskip`` skips only that
    kind from pytest 8.2 on (a plain ImportError stopped the collection of the tests)."""
    r = python(f"import sys\nsys.modules[{framework!r}] = None\n"
               f"try:\n    import fastbptt.{bridge}\n"
               f"except ModuleNotFoundError as e:\n    print(e)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"pip install 'fastbptt[{extra}]'")
    assert len(r.stdout.strip().splitlines()) == 1


def test_import_fastbptt_imports_neither_numpy_nor_numba():
    r = python("import sys, fastbptt\n"
               "print(sorted(m for m in ('numpy', 'numba', 'scipy') if m in sys.modules))")
    assert (r.returncode, r.stdout.strip()) == (0, "[]"), r.stderr


def test_every_public_name_resolves_to_its_module():
    r = python("import fastbptt, fastbptt.api, fastbptt.params, fastbptt.optim\n"
               "assert fastbptt.grad is fastbptt.api.grad\n"
               "assert fastbptt.Params is fastbptt.params.Params\n"
               "assert fastbptt.Adam is fastbptt.optim.Adam\n"
               "names = {}\n"
               "exec('from fastbptt import *', names)\n"
               "assert set(fastbptt.__all__) <= set(names) and set(fastbptt.__all__) <= "
               "set(dir(fastbptt))\n"
               "assert names['layer'] is fastbptt.layer and names['sample'] is "
               "fastbptt.sampling.sample\n"
               "print(fastbptt.reference.grad.__module__)")
    assert (r.returncode, r.stdout.strip()) == (0, "fastbptt.reference.head"), r.stderr


def test_the_training_modules_the_docstring_names_load_on_first_use():
    """fastbptt.train and fastbptt.corpus were an AttributeError until imported; the
    frameworks' modules (torch, jax, distributed) stay imported only by name."""
    r = python("import sys, fastbptt\n"
               "print(fastbptt.train.Trainer.__name__, fastbptt.corpus.__name__)\n"
               "print(sorted(m for m in ('torch', 'jax', 'dask') if m in sys.modules))")
    assert (r.returncode, r.stdout.split()) == (0, ["Trainer", "fastbptt.corpus", "[]"]), \
        r.stderr


def test_an_unknown_name_is_an_attribute_error():
    for name in ("gradient", "Trainer", "_WHERE_NOT"):
        try:
            getattr(fastbptt, name)
        except AttributeError as error:
            assert str(error) == f"module 'fastbptt' has no attribute {name!r}"
        else:
            raise AssertionError(f"fastbptt.{name} exists")


def test_disable_jit_in_numbas_configuration_is_refused_at_the_engines_import():
    r = python("import numba\n"
               "numba.config.DISABLE_JIT = True\n"
               "import fastbptt\n"
               "try:\n"
               "    from fastbptt import grad\n"
               "except ImportError as error:\n"
               "    print(type(error).__name__, error)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"JitDisabledError {fastbptt._DISABLED_JIT_CONFIG}"
    assert "remove that setting" in r.stdout and "unset NUMBA_DISABLE_JIT" not in r.stdout


def command_with(env, args, cwd=None):
    """The fastbptt command as its installed script runs it, and as ``python -m``, with
    ``env`` over this environment and without NUMBA_DISABLE_JIT unless ``env`` sets it."""
    env = dict({k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"},
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               **env)
    script = os.path.join(os.path.dirname(sys.executable), "fastbptt")
    runs = [[sys.executable, "-m", "fastbptt", *args]]
    if os.path.isfile(script):
        runs.append([sys.executable, script, *args])
    return [subprocess.run(run, capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
            for run in runs]


def test_the_command_runs_without_docstrings():
    """``PYTHONOPTIMIZE=2`` (``python -OO``) drops docstrings: the parser does not read
    them, and a short demo runs."""
    for r in command_with({"PYTHONOPTIMIZE": "2"}, ["--help"]):
        assert r.returncode == 0 and "usage: fastbptt" in r.stdout, r.stderr
    for r in command_with({"PYTHONOPTIMIZE": "2"}, ["demo", "--steps", "5", "--hidden", "4",
                                                    "--repeat", "1"]):
        assert r.returncode == 0 and "loss: kernels" in r.stdout, r.stderr


def test_the_command_refuses_a_disabled_jit_in_one_line(tmp_path):
    """NUMBA_DISABLE_JIT=1 stops `import fastbptt` before the command's own error handling:
    still one line, status 1; from Numba's configuration file, the line names that file."""
    for r in command_with({"NUMBA_DISABLE_JIT": "1"}, ["demo", "--repeat", "1"]):
        assert r.returncode == 1
        assert r.stderr == f"fastbptt: {fastbptt._DISABLED_JIT.removeprefix('fastbptt ')}\n"
    pytest.importorskip("yaml")             # Numba reads its configuration file with it
    (tmp_path / ".numba_config.yaml").write_text("disable_jit: 1\n")
    for r in command_with({}, ["demo", "--repeat", "1"], cwd=tmp_path):
        assert r.returncode == 1
        assert r.stderr == (f"fastbptt demo: "
                            f"{fastbptt._DISABLED_JIT_CONFIG.removeprefix('fastbptt ')}\n")


def test_the_command_answers_help_and_wrong_options_without_numpy():
    r = python("import sys\n"
               "from fastbptt.cli import main\n"
               "for argv in (['-h'], ['train', '-h'], ['train', '--hidden', '0'], "
               "['sample', '-h'], ['--steps', '0']):\n"
               "    try:\n"
               "        main(argv)\n"
               "    except SystemExit as e:\n"
               "        assert e.code == (2 if '0' in argv else 0), (argv, e.code)\n"
               "    else:\n"
               "        raise AssertionError(argv)\n"
               "print(sorted(m for m in ('numpy', 'numba') if m in sys.modules))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
    assert "--hidden: must be an integer of at least 1; got 0" in r.stderr
