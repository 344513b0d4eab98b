"""One call of fastbptt (forward, loss, every gradient; S3: a layer's forward and back(dh))
per workload of the registry, on one thread, and the documents' loop (fastbptt.reference)
on W1. Workloads: fastbptt.bench.workloads."""
from fastbptt.bench.peers import PEERS, set_threads
from fastbptt.bench.workloads import WORKLOADS, make_data


def _prepare(peer, name):
    workload = WORKLOADS[name]
    call = PEERS[peer].make(workload, *make_data(workload))
    call()                                  # compiles, or loads Numba's cache
    return call


class Workloads:
    params = [list(WORKLOADS)]
    param_names = ["workload"]

    def setup(self, name):
        set_threads(1)
        self.call = _prepare("fastbptt", name)

    def time_fastbptt(self, name):
        self.call()


class DocumentsLoop:
    params = [["W1"]]
    param_names = ["workload"]

    def setup(self, name):
        set_threads(1)
        self.call = _prepare("documents' loop", name)

    def time_documents_loop(self, name):
        self.call()


class Strides:
    """BPTT(20; s) on W3's and G1's sizes: lag-major (s = 1), groups, chunks (s = 20)."""
    params = [["W3", "G1"], [1, 2, 4, 10, 20]]
    param_names = ["workload", "stride"]

    def setup(self, name, stride):
        set_threads(1)
        import fastbptt
        x, y, params = make_data(WORKLOADS[name])
        self.call = lambda: fastbptt.bptt(x, y, params, truncate=20, stride=stride)
        self.call()

    def time_fastbptt(self, name, stride):
        self.call()
