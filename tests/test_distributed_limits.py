"""Limits of a local cluster's machine met with a clear outcome: a /dev/shm too small for
the shared buffers, and a FASTBPTT_WORKER_WAIT that is no number of seconds."""
import errno
import os
import re
import socket
import threading
import time

import pytest

import fastbptt
from pids import NO_PROCESS

distributed = pytest.importorskip("fastbptt.distributed", reason="needs dask[distributed]")


def test_a_mapping_that_dev_shm_cannot_hold_is_not_made(tmp_path, monkeypatch):
    """The pages are reserved when the mapping is made: a full /dev/shm is ENOSPC there
    (the run then sends its buffers over TCP), not a SIGBUS at the first write."""
    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate on this system")
    layout = distributed.Layout(fastbptt.init_params(5, 8, 5, seed=0))
    monkeypatch.setattr(distributed.Mapping, "FOLDER", str(tmp_path))
    made = distributed.Mapping.create(layout, 2)
    assert made is not None and made.part(2).size == layout.size
    made.remove()
    calls = []

    def full(fd, offset, length):
        calls.append(length)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    assert distributed.Mapping.create(layout, 2) is None
    assert calls == [made.stride * 3] and not list(tmp_path.iterdir())


@pytest.mark.parametrize("text", ["nan", "abc", "-1", "inf", ""])
def test_a_worker_wait_that_is_no_number_of_seconds_is_named(monkeypatch, text):
    monkeypatch.setenv("FASTBPTT_WORKER_WAIT", text)
    with pytest.raises(ValueError, match="FASTBPTT_WORKER_WAIT must be a finite number of "
                                         f"seconds, 0 or more; got '{text}'"):
        distributed._worker_wait()
    monkeypatch.setenv("FASTBPTT_WORKER_WAIT", "2.5")
    assert distributed._worker_wait() == 2.5


def test_addresses_dask_cannot_use_are_named_in_words_of_the_address(tmp_path):
    """Dask's own wording was its internals': an abstract class (ucx:// without its
    package), a missing ssl_context, a file not found without its name, a timeout."""
    import importlib.util

    import dask
    cases = [("inproc://127.0.0.1/1/1", {}, "is an address inside one process"),
             ("tls://127.0.0.1:8786", {}, "tls:// needs Dask's TLS settings: the CA's "
                                          "certificate and this process's certificate and key"),
             ("tls://127.0.0.1:8786", {"distributed.comm.tls.ca-file": __file__},
              "distributed.comm.tls.client.cert is not set"),
             ("tls://127.0.0.1:8786", {"distributed.comm.tls.ca-file": str(tmp_path / "no")},
              f"Dask's TLS setting distributed.comm.tls.ca-file names "
              f"'{tmp_path / 'no'}', which is not a file")]
    if importlib.util.find_spec("distributed_ucxx") is None:
        cases.append(("ucx://127.0.0.1:8786", {}, "Dask's ucx:// needs the distributed-ucxx "
                                                  "package, which is not installed"))
    for address, settings, words in cases:
        with dask.config.set({name: None for name in distributed._TLS_FILES}), \
                dask.config.set(settings):
            with pytest.raises(ConnectionError, match=re.escape(words)):
                distributed.Workers.connect(address)
    with socket.socket() as taken:             # a port nothing listens on
        taken.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
    with pytest.raises(ConnectionError, match=re.escape(
            f"no Dask scheduler answered at {address} within 1 s; start one there with "
            f"`dask scheduler`, and its workers with `dask worker {address}`")):
        distributed.Workers.connect(address, timeout=1)
    with pytest.raises(ConnectionError, match=f"answered at {address} within 1s; start"):
        distributed.Workers.connect(address, timeout="1s")          # Dask's time strings


def test_a_port_that_takes_the_connection_and_never_answers_is_no_scheduler():
    """A scheduler's dashboard port, say: Dask's timeout covers the connection, not its
    handshake, and the Client waited for ever."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        said = []

        def attempt():                  # in a thread: a regression waits, not the suite
            try:
                distributed.Workers.connect(address, timeout=1)
            except ConnectionError as error:
                said.append(str(error))
        waiting = threading.Thread(target=attempt, daemon=True)
        waiting.start()
        waiting.join(60)
        assert not waiting.is_alive(), "Workers.connect still waits"
    assert said and said[0].startswith(f"no Dask scheduler answered at {address} within "
                                       f"1 s; start one there"), said


def test_tls_settings_that_hold_a_certificates_text_connect_and_are_never_quoted():
    """Dask takes PEM text for its TLS settings; they were refused as no file, the text
    (a private key, it may be) quoted in the line."""
    pytest.importorskip("cryptography", reason="Dask's Security.temporary() makes its "
                        "certificates with cryptography, which no extra installs")
    import dask
    from distributed import LocalCluster, Security

    security = Security.temporary()                   # the certificates as text
    settings = {"distributed.comm.tls.ca-file": security.tls_ca_file,
                "distributed.comm.tls.client.cert": security.tls_client_cert,
                "distributed.comm.tls.client.key": security.tls_client_key}
    assert all("\n" in text for text in settings.values())
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, host="127.0.0.1",
                      security=security, dashboard_address=None) as cluster:
        with dask.config.set(settings):
            with distributed.Workers.connect(cluster.scheduler_address) as workers:
                assert workers.addresses()[0].startswith("tls://127.0.0.1:")
        with dask.config.set(dict(settings, **{"distributed.comm.tls.client.cert": None})):
            with pytest.raises(ConnectionError) as refused:
                distributed.Workers.connect(cluster.scheduler_address)
    assert "client.cert is not set" in str(refused.value)
    assert "BEGIN" not in str(refused.value)


def test_a_wait_for_workers_ends_at_a_signal_the_command_received():
    """A run placed again after a worker left waits for workers with signals held back:
    the signal must end the wait (the run then exits with its status), not wait it out."""
    import signal
    import time

    from fastbptt._signals import Interrupted

    workers = object.__new__(distributed.Workers)
    workers.addresses = lambda: ["tcp://127.0.0.1:1"]
    workers.stopped, workers.refused = (lambda: None), set()
    began = time.monotonic()
    assert workers._available(2, 0.3) == ["tcp://127.0.0.1:1"]      # waited it out
    assert time.monotonic() - began >= 0.3
    workers.stopped = lambda: signal.SIGINT
    began = time.monotonic()
    with pytest.raises(Interrupted) as stop:
        workers._available(2, 60)
    assert stop.value.signum == signal.SIGINT and time.monotonic() - began < 5
    with pytest.raises(Interrupted):
        workers.forget("tcp://127.0.0.1:1", wait=60)


def test_workers_start_with_the_groups_signals_blocked():
    """Processes spawned from threads that start while a local cluster starts (Dask's
    nannies spawn their workers so) block SIGINT, SIGHUP and SIGTERM from their first
    instruction, so a Ctrl-C to the group during start-up prints no worker's traceback;
    the calling thread gets its mask back."""
    import signal
    import subprocess
    import sys
    import threading

    if not hasattr(signal, "pthread_sigmask") or not os.path.exists("/proc/self/status"):
        pytest.skip("needs pthread_sigmask and /proc")
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    seen = {}

    def spawn():
        seen["thread"] = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        seen["child"] = subprocess.run(
            [sys.executable, "-c", "print(next(l for l in open('/proc/self/status') "
                                   "if l.startswith('SigBlk')).split()[1])"],
            capture_output=True, text=True, check=True).stdout.strip()

    with distributed._blocked(distributed._GROUP_SIGNALS):
        thread = threading.Thread(target=spawn)
        thread.start()
    thread.join()
    group = {signal.SIGINT, signal.SIGHUP, signal.SIGTERM}
    assert group <= seen["thread"]
    blocked = int(seen["child"], 16)
    assert all(blocked >> (s - 1) & 1 for s in group)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before


def test_what_a_killed_run_left_in_dev_shm_goes_at_the_next_mapping(tmp_path, monkeypatch):
    """A run killed outright (SIGKILL, the OOM killer) while it placed its cursors left its
    mapping and its socket's folder; the next run removes them, and nothing of a process
    still running, nor one made in the last minute (its maker may not have claimed it
    yet)."""
    dead, alive = NO_PROCESS, os.getpid()
    (tmp_path / f"fastbptt-{dead}-123456").write_bytes(b"x" * 100)
    (tmp_path / f"fastbptt-{dead}-ab_cd12").mkdir()
    (tmp_path / f"fastbptt-{dead}-ab_cd12" / "steps").write_text("")
    kept = [f"fastbptt-{alive}-42", "fastbptt-other", "notes.txt"]
    for name in kept:
        (tmp_path / name).write_text("")
    young = [f"fastbptt-{dead}-7", f"fastbptt-{dead}-young_folder"]
    (tmp_path / young[0]).write_text("")
    (tmp_path / young[1]).mkdir()
    for path in tmp_path.iterdir():
        if path.name not in young:
            os.utime(path, (time.time() - 61, time.time() - 61))
    monkeypatch.setattr(distributed.Mapping, "FOLDER", str(tmp_path))
    made = distributed.Mapping.create(distributed.Layout(fastbptt.init_params(5, 8, 5,
                                                                              seed=0)), 1)
    made.remove()
    assert sorted(os.listdir(tmp_path)) == sorted(kept + young)


def test_what_a_running_process_claims_in_dev_shm_is_kept(tmp_path, monkeypatch):
    """A PID says nothing across PID namespaces (containers sharing /dev/shm): a run in
    another one is not seen running, and its mapping or socket folder was removed under
    it. Each is claimed (a shared flock) while its run needs it, and the cleanup keeps
    what it cannot lock; once the claim is let go, it goes."""
    from fastbptt import _step_socket
    from fastbptt._shm_claims import claim, claimed, release

    unseen = NO_PROCESS                 # a PID no process here has: another namespace's
    mapping, folder = tmp_path / f"fastbptt-{unseen}-123456", tmp_path / f"fastbptt-{unseen}-x"
    mapping.write_bytes(b"x" * 100)
    folder.mkdir()
    for path in (mapping, folder):      # older than a just-made one, which is kept anyway
        os.utime(path, (time.time() - 61, time.time() - 61))
    claims = [claim(str(mapping)), claim(str(folder))]
    monkeypatch.setattr(distributed.Mapping, "FOLDER", str(tmp_path))
    layout = distributed.Layout(fastbptt.init_params(5, 8, 5, seed=0))
    made = distributed.Mapping.create(layout, 1)
    assert claimed(made.path)                     # its own, until every worker has it
    made.remove()
    assert sorted(os.listdir(tmp_path)) == sorted([mapping.name, folder.name])
    for fd in claims:
        release(fd)
    distributed.Mapping.create(layout, 1).remove()
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(_step_socket, "_folder", lambda: str(tmp_path))
    listener = _step_socket.Listener(1)
    try:
        assert claimed(listener.folder)
    finally:
        listener.remove()
    assert not claimed(listener.folder) and os.listdir(tmp_path) == []


def test_a_socket_that_cannot_be_made_leaves_no_folder_and_no_claim(tmp_path, monkeypatch):
    """A Listener whose bind failed (a folder path too long for a Unix socket) left its
    folder behind, claimed, with the claim's descriptor open."""
    from fastbptt import _step_socket
    from fastbptt._shm_claims import claim

    deep = tmp_path / ("d" * 100) / ("e" * 100)
    deep.mkdir(parents=True)
    monkeypatch.setattr(_step_socket, "_folder", lambda: str(deep))
    opened = []
    monkeypatch.setattr(_step_socket, "claim",
                        lambda path: opened.append(claim(path)) or opened[-1])
    with pytest.raises(OSError):
        _step_socket.Listener(1)
    assert os.listdir(deep) == []
    with pytest.raises(OSError):                # the claim's descriptor is closed
        os.fstat(opened[0])
