"""What a new process pays, each timed around a fresh subprocess (like numpy's
bench_import.py): the import of the package and its engine (``fastbptt.bptt``: the package
loads its names on first use), import + first W2 call with a warm Numba cache, and the first
call of each dtype with an empty NUMBA_CACHE_DIR (the compile time)."""
import shutil
import subprocess
import sys
import tempfile

from fastbptt.bench import startup


def _python(code, *args, env=None):
    subprocess.run([sys.executable, "-c", code, *args], check=True, env=env,
                   stdout=subprocess.DEVNULL)


class Import:
    timeout = 120

    def setup(self):
        startup.run_child(startup.WARM_CHILD)   # the Numba cache is warm before timing

    def time_import(self):
        _python("import fastbptt; fastbptt.bptt")

    def time_first_call(self):
        _python(startup.WARM_CHILD)


class ColdCompile:
    """First call in a process with an empty Numba cache: W2 (float32) or W1 (float64)."""
    params = [["float32", "float64"]]
    param_names = ["dtype"]
    number = 1
    repeat = 1
    warmup_time = 0
    timeout = 600

    def setup(self, dtype):
        self.cache_dir = tempfile.mkdtemp(prefix="fastbptt-asv-cold-")
        self.env = startup.cold_env(self.cache_dir)

    def teardown(self, dtype):
        shutil.rmtree(self.cache_dir, ignore_errors=True)

    def time_cold_first_call(self, dtype):
        _python(startup.COLD_CHILD, {"float32": "W2", "float64": "W1"}[dtype], env=self.env)
