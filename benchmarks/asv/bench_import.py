"""What a new process pays, each timed around a fresh subprocess (like numpy's
bench_import.py): the import of the package and its engine (``fastbptt.bptt``: the package
loads its names on first use), import + the first call of each cell with a warm Numba cache, and the first
call of each cell and dtype with an empty NUMBA_CACHE_DIR (the compile time)."""
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


class WarmStart:
    """Import + first call, warm Numba cache: W2 (Elman), G1 (LSTM), G2 (GRU)."""
    params = [["elman", "lstm", "gru"]]
    param_names = ["cell"]
    timeout = 120

    def setup(self, cell):
        startup.run_child(startup.WARM_CHILD, (startup.WARM_CASES[cell],))

    def time_first_call(self, cell):
        _python(startup.WARM_CHILD, startup.WARM_CASES[cell])


class ColdCompile:
    """First call in a process with an empty Numba cache, of each cell and dtype
    (`startup.COLD_CASES`: W2 and W1 for Elman, G1 for LSTM, G2 for GRU)."""
    params = [["elman", "lstm", "gru"], ["float32", "float64"]]
    param_names = ["cell", "dtype"]
    number = 1
    repeat = 1
    warmup_time = 0
    timeout = 600

    def setup(self, cell, dtype):
        self.cache_dir = tempfile.mkdtemp(prefix="fastbptt-asv-cold-")
        self.env = startup.cold_env(self.cache_dir)

    def teardown(self, cell, dtype):
        shutil.rmtree(self.cache_dir, ignore_errors=True)

    def time_cold_first_call(self, cell, dtype):
        _python(startup.COLD_CHILD, startup.COLD_CASES[cell, dtype], env=self.env)
