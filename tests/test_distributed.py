"""Data-parallel training on a real local Dask cluster (SPEC.md §9): the same numbers as one
process over the same cursors, checkpoints that resume on any number of workers, a
worker killed mid-run, and a cluster started with Dask's own commands."""
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_processes import SMALL, TEXT, env, finish, read_until, start, write_corpus
from fastbptt import checkpoint
from fastbptt._cursors import place_local
from fastbptt.params import leaves
from fastbptt.text import Codec
from fastbptt.train import TrainOptions, Trainer

distributed = pytest.importorskip("fastbptt.distributed", reason="needs dask[distributed]")
TOLERANCE = {"float64": 1e-10, "float32": 1e-5}
MODELS = [("elman", 1), ("lstm", 2)]


def relative(a, b):
    """The largest difference of two models' arrays over the largest entry of each; inf
    when any of them is not finite (a NaN would fail no ``<=``, and ``max`` drops one)."""
    errors = [float(np.abs(leaves(a)[k].astype(np.float64) - v).max() / np.abs(v).max())
              for k, v in leaves(b).items()]
    return max(errors) if np.isfinite(errors).all() else float("inf")


@pytest.fixture(scope="module")
def workers():
    with distributed.Workers.local(2) as cluster:
        yield cluster


def trainer(dtype, cell, layers, placement=None, resume=None):
    codec = Codec.from_text(TEXT)
    options = TrainOptions(hidden=12, seq_length=10, batch=7, lr=1e-2, dtype=dtype,
                           cell=cell, layers=layers)
    return Trainer(options, codec.encode(TEXT), codec, resume=resume, placement=placement)


def steps(*trainers, n):
    for _ in range(n):
        for t in trainers:
            t.train_step()


@pytest.mark.parametrize("cell,layers", MODELS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_two_workers_equal_one_process_and_resume_on_one_or_none(workers, tmp_path, dtype,
                                                                 cell, layers):
    """30 steps on 2 workers (7 cursors: 4 + 3) against one process; then the checkpoint
    written with 2 workers resumed on 1 worker and in one process, 10 steps more."""
    one = trainer(dtype, cell, layers)
    two = trainer(dtype, cell, layers, placement=workers.place)
    assert two.blocks.rows == [(0, 4), (4, 7)]
    steps(one, two, n=30)
    tol = TOLERANCE[dtype]
    assert relative(two.params, one.params) <= tol
    np.testing.assert_allclose(two.losses, one.losses, rtol=tol)
    np.testing.assert_allclose(two.carried.h, one.carried.h, rtol=0, atol=tol)
    saved = checkpoint.load(two.save(tmp_path / "two.npz"))
    two.close()
    single = workers.limited(1)
    on_one = trainer(dtype, cell, layers, placement=single.place, resume=saved)
    at_home = trainer(dtype, cell, layers, resume=saved)
    assert on_one.blocks.rows == [(0, 7)]
    steps(one, on_one, at_home, n=10)
    assert relative(on_one.params, one.params) <= tol
    assert relative(at_home.params, one.params) <= tol
    for name, value in leaves(at_home.params).items():       # the same blocks: same bits
        np.testing.assert_array_equal(value, leaves(on_one.params)[name])
    on_one.close()


def test_no_wait_for_workers_to_join_still_places_the_run(workers, monkeypatch):
    """FASTBPTT_WORKER_WAIT=0 (allowed) was also the time given to the placed blocks to
    connect to the run, so every run on a local cluster failed ("a block did not
    connect")."""
    monkeypatch.setenv("FASTBPTT_WORKER_WAIT", "0")
    one, split = trainer("float64", "elman", 1), trainer("float64", "elman", 1,
                                                         placement=workers.limited(2).place)
    steps(one, split, n=2)
    assert relative(split.params, one.params) <= TOLERANCE["float64"]
    split.close()


def test_the_workers_are_seen_while_the_client_refreshes_its_cached_view(workers):
    """Dask's Client replaces its cached view of the scheduler every 2 s by one without
    the workers: `addresses` read that cache just after asking for a full one, so now and
    then it saw no worker at all, and a run stopped ("a block did not connect", or "no
    Dask worker is left in the cluster")."""
    import dask
    from dask.distributed import Client
    expected = workers.addresses()
    assert len(expected) == 2
    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        client = Client(workers.client.scheduler.address, set_as_default=False)
    with distributed.Workers(client) as view:                # closes the client
        seen = [view.addresses() for _ in range(300)]
    assert [s for s in seen if s != expected] == []


def test_a_closed_run_keeps_no_mapping_of_shared_memory(workers):
    """The scheduler, in this process on a local cluster, keeps the tasks' arguments in its
    log: a Mapping among them, unpickled there, kept each run's shared file mapped (10 MB
    a run at H 256 on 3 workers) and its descriptors open."""
    import gc
    run = trainer("float64", "elman", 1, placement=workers.limited(2).place)
    steps(run, n=1)
    path = run.blocks.mapping.path
    run.close()
    gc.collect()
    assert not [o for o in gc.get_objects()          # type(), not isinstance(): that asks
                if type(o) is distributed.Mapping and o.path == path]   # objects' __class__


def test_ctrl_c_while_the_run_is_placed_leaves_nothing_in_dev_shm(workers, monkeypatch):
    """A KeyboardInterrupt while the blocks were placed skipped their cleanup: the shared
    file and the sockets' folder stayed in /dev/shm."""
    ours = f"fastbptt-{os.getpid()}-"
    before = {n for n in os.listdir("/dev/shm") if n.startswith(ours)}
    scatter = distributed.Workers._scatter
    calls = []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return scatter(self, *args, **kwargs)
    monkeypatch.setattr(distributed.Workers, "_scatter", interrupted)
    with pytest.raises(KeyboardInterrupt):
        trainer("float64", "elman", 1, placement=workers.limited(2).place)
    assert {n for n in os.listdir("/dev/shm") if n.startswith(ours)} == before


def test_a_worker_that_hangs_while_the_run_is_placed_is_given_up_on():
    """Dask's timeout does not bound a direct send: the placement waited for good for a
    stopped worker, which Dask keeps in the cluster for the 5 minutes of its heartbeats."""
    from fastbptt._cursors import BlockLost

    with distributed.Workers.local(2) as cluster:
        address, pid = sorted(cluster.client.run(os.getpid).items())[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            began = time.monotonic()
            with pytest.raises(BlockLost, match=re.escape(address)):
                trainer("float64", "elman", 1, placement=cluster.place)
            assert time.monotonic() - began < 5 * distributed.POLL + 10
        finally:
            os.kill(pid, signal.SIGCONT)


def test_a_local_cluster_leaves_this_processs_environment_as_it_found_it(monkeypatch):
    """Dask sets its workers' settings in the environment of the process that starts
    them, and left them there after the cluster closed."""
    import threadpoolctl  # noqa: F401   its first import sets KMP_DUPLICATE_LIB_OK
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    before = dict(os.environ)
    with distributed.Workers.local(1):
        assert os.environ.get("OMP_NUM_THREADS") == "1"         # the workers' setting
    assert dict(os.environ) == before


def test_a_worker_of_another_version_is_left_out_and_the_others_take_the_run():
    """A worker without the run's fastbptt that joined a cluster mid-run ended a healthy
    run at its next placement (after a checkpoint: "more Dask workers joined")."""
    with distributed.Workers.local(2) as cluster:
        bad, good = cluster.addresses()
        cluster.client.run(lambda: setattr(__import__("fastbptt.distributed").distributed,
                                           "__version__", "0.0.9"), workers=[bad])
        run = trainer("float64", "elman", 1, placement=cluster.place)
        assert run.blocks.addresses == [good] and cluster.refused == {bad}
        assert cluster.notes == [f"the worker {bad} was left out (RuntimeError: this worker "
                                 f"has fastbptt 0.0.9, the run fastbptt "
                                 f"{distributed.__version__}; install the same version "
                                 f"everywhere)"]
        assert cluster.growth(7) == 0                   # not placed again and again
        one = trainer("float64", "elman", 1)
        steps(run, one, n=2)
        assert relative(run.params, one.params) <= TOLERANCE["float64"]
        run.close()


def test_bad_worker_counts_and_clients_are_refused_naming_them(workers):
    for bad, error in ((0, ValueError), (-1, ValueError), (True, TypeError), (2.5, TypeError),
                       ("2", TypeError)):
        with pytest.raises(error, match=r"^want must be"):
            distributed.Workers(workers.client, want=bad)
        with pytest.raises(error, match=r"^n must be"):
            distributed.Workers.local(bad)
    with pytest.raises(TypeError, match=r"^client must be a dask.distributed.Client; got "
                                        r"NoneType"):
        distributed.Workers(None)
    assert distributed.Workers(workers.client, want=np.int64(1)).want == 1
    with pytest.raises(TypeError, match=r"^address must be a scheduler's address, a str "):
        distributed.Workers.connect(None)       # it started a default cluster of Dask's
    # want and timeout are checked before a client connects (and is left open)
    address = workers.client.scheduler.address
    clients = len(workers.client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.clients))
    with pytest.raises(ValueError, match=r"^want must be at least 1 worker; got 0"):
        distributed.Workers.connect(address, want=0)
    for bad, error in ((-1, ValueError), (0, ValueError), (float("nan"), ValueError),
                       (float("inf"), ValueError), ("abc", ValueError), (None, TypeError),
                       (True, TypeError)):
        with pytest.raises(error, match=r"^timeout must be a number of seconds"):
            distributed.Workers.connect(address, timeout=bad)
    assert len(workers.client.run_on_scheduler(
        lambda dask_scheduler: dask_scheduler.clients)) == clients
    workers.limited(1).close()                  # closed the client it shares
    assert len(workers.addresses()) == 2
    closed = distributed.Workers.local(1)
    client = closed.client
    later = distributed.Workers(client)
    closed.close()
    with pytest.raises(ValueError, match=r"^client is closed; give an open "):
        distributed.Workers(client)
    with pytest.raises(Exception, match=r"^the run's Dask client is closed \(by its owner"):
        later.addresses()                       # said the scheduler no longer answered
    recipe = trainer("float64", "elman", 1)
    place = [recipe.train_ids, 2, recipe.recipe, recipe.params, recipe.carried, 0]
    for ids, error, phrase in ((recipe.train_ids + 0.5, TypeError, "ids must be an array of "
                                "integer token ids; got float64"),
                               (recipe.train_ids - 4, ValueError, "ids must be token ids of "
                                "0 or more; got -4")):
        with pytest.raises(error, match=phrase):
            workers.limited(1).place(ids, *place[1:])
    # the batch and the params as a run in one process checks them, before any worker
    # is sent anything (a worker said NothingToSave, or a float32 W was cast)
    mixed = recipe.params._replace(W=recipe.params.W.astype(np.float32))
    for at, bad, error, phrase in ((1, 0, ValueError, "batch must be at least 1 cursor"),
                                   (1, 2.0, TypeError, "batch must be a whole number"),
                                   (3, [1, 2], ValueError, "params as a sequence must be"),
                                   (3, mixed, TypeError, "params must share one dtype")):
        with pytest.raises(error, match=phrase):
            workers.limited(1).place(*place[:at], bad, *place[at + 1:])


def test_workers_that_join_as_the_run_ends_do_not_place_it_again():
    """The step of a periodic checkpoint is the run's last, with workers that joined since:
    the run ends there, and is not restored and placed again on them first (a placement
    and a warm-up that came to nothing); with steps left, it is, from its state after
    that step, while the checkpoint it would go back to stays the one on disk."""
    from types import SimpleNamespace

    from fastbptt._train_command import _Loop

    class Joined:                       # one worker more than the run is placed on
        notes = []

        def growth(self, batch):
            return 1

    restored, said = [], []
    loop = _Loop.__new__(_Loop)
    loop.r = SimpleNamespace(workers=Joined(), options=SimpleNamespace(batch=4))
    loop.trainer = SimpleNamespace(step=11, last_saved="the checkpoint of step 10",
                                   checkpoint=lambda: "the state after step 11",
                                   blocks=SimpleNamespace(rows=[(0, 2), (2, 4)]))

    def restore(resume):
        restored.append(resume)
        loop.trainer.last_saved = resume
    loop.trainer.restore = restore
    loop.say, loop.budget, loop.start = said.append, None, 0.0
    for target, again in ((11, False), (12, True)):
        restored.clear()
        said.clear()
        loop.target = target
        loop.place_on_joined()
        assert restored == (["the state after step 11"] if again else [])
        assert loop.trainer.last_saved == "the checkpoint of step 10"
        assert said == (["more Dask workers joined: the run goes on from step 11 on 2 "
                         "workers, 2 + 2 cursors"] if again else [])


def test_a_workers_or_a_nannys_address_given_as_the_schedulers_is_named_so(workers):
    """Dask's Client said "TypeError: Worker.identity() got an unexpected keyword argument
    'n_workers'" (Server.identity() for a nanny)."""
    scheduler = workers.client.scheduler.address
    info = workers.client.sync(workers.client.scheduler.identity)["workers"]
    worker = sorted(info)[0]
    nanny = info[worker]["nanny"]
    with pytest.raises(ConnectionError, match=re.escape(
            f"{worker} is a Dask worker's address, not a scheduler's; its scheduler is at "
            f"{scheduler}: give that")):
        distributed.Workers.connect(worker)
    with pytest.raises(ConnectionError, match=re.escape(
            f"{nanny} is a Dask nanny's address, not a scheduler's; give its scheduler's, "
            f"which `dask worker` was started with")):
        distributed.Workers.connect(nanny)
    with distributed.Workers.connect(scheduler) as again:
        assert sorted(again.addresses()) == sorted(info)


def test_blocks_in_one_process_add_up_to_one_block():
    """The split itself, without Dask: 3 uneven blocks of 7 cursors in this process."""
    def three(*args):
        return place_local(*args, parts=3)
    one, split = trainer("float64", "gru", 2), trainer("float64", "gru", 2, placement=three)
    assert split.blocks.rows == [(0, 3), (3, 5), (5, 7)]
    steps(one, split, n=20)
    assert relative(split.params, one.params) <= 1e-10


def worker_pids(proc):
    """The Dask worker processes a `fastbptt train --workers` process started."""
    import psutil

    return [p.pid for p in psutil.Process(proc.pid).children()
            if "spawn_main" in " ".join(p.cmdline())]


def wait_for_step(path, step, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, finish(proc)
        try:
            if checkpoint.load(path).step >= step:
                return
        except (FileNotFoundError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint of step {step} within {timeout} s")


def test_a_killed_worker_costs_the_steps_since_the_last_checkpoint(tmp_path):
    write_corpus(tmp_path)
    proc = start(["train", "tiny.txt", *SMALL, "--sample-every", "0", "--steps", "1500",
                  "--workers", "2", "--checkpoint-every", "100", "--checkpoint", "k.npz"],
                 tmp_path)
    try:
        wait_for_step(tmp_path / "k.npz", 100, proc)
        pids = worker_pids(proc)
        assert len(pids) == 2
        os.kill(pids[0], signal.SIGKILL)
        outcome = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert outcome.status == 0 and outcome.err == "", outcome
    assert re.search(r"left the cluster during step \d+; the run goes on from its checkpoint "
                     r"of step \d+ on (1 worker, 2 cursors|2 workers, 1 \+ 1 cursors)\n",
                     outcome.out), outcome     # the one left, or with its restarted twin
    done = checkpoint.load(tmp_path / "k.npz")
    assert done.step == 1500 and done.history["loss"].size == 1500


def test_a_signal_while_a_step_waits_for_a_hung_worker_ends_the_run(tmp_path):
    """A stopped worker stays in the cluster (for its heartbeats' 5 minutes), so the step
    waits for it; the run ignored Ctrl-C, SIGTERM and all until then. Now the step goes on
    for at most GRACE seconds after a signal, and the last checkpoint stays."""
    write_corpus(tmp_path)
    proc = start(["train", "tiny.txt", *SMALL, "--sample-every", "0", "--steps", "100000",
                  "--workers", "2", "--checkpoint-every", "100", "--checkpoint", "h.npz"],
                 tmp_path)
    pids = []
    try:
        wait_for_step(tmp_path / "h.npz", 100, proc)
        pids = worker_pids(proc)
        os.kill(pids[0], signal.SIGSTOP)
        time.sleep(1.0)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        outcome = finish(proc)
        took = time.monotonic() - sent
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert outcome.status == 130, outcome
    kept = checkpoint.load(tmp_path / "h.npz").step
    assert outcome.err == (f"fastbptt train: interrupted by SIGINT while the run waited for "
                           f"Dask workers; nothing was saved over h.npz, which holds step "
                           f"{kept}: `fastbptt train --resume --checkpoint h.npz --steps "
                           f"100000 --sample-every 0` continues from it\n"), outcome
    assert took < distributed.GRACE + 30, took


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_group_reaches_the_run_and_not_its_workers(tmp_path, signum):
    """A terminal's Ctrl-C or hang-up, GNU timeout's SIGTERM and a service manager's signal
    the whole process group: the workers ignore them, so the run gathers their cursors'
    states into the checkpoint of the step it stopped at (a worker that died would cost
    the steps since the last periodic checkpoint), with no word from other processes."""
    write_corpus(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "fastbptt", "train", "tiny.txt", *SMALL,
                             "--sample-every", "0", "--time", "60", "--workers", "2",
                             "--checkpoint", "c.npz"], cwd=tmp_path, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        read_until(proc, "training for 60 s")
        time.sleep(0.5)
        os.killpg(proc.pid, signum)
        outcome = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert outcome.status == 128 + signum, outcome
    stopped = re.search(r"interrupted at step (\d+) ", outcome.out)
    assert stopped and "left the cluster" not in outcome.out, outcome
    assert checkpoint.load(tmp_path / "c.npz").step == int(stopped.group(1)) > 0
    assert "Traceback" not in outcome.err, outcome


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dask_cluster(tmp_path):
    """`dask scheduler` and two `dask worker ADDRESS --nthreads 1`, separate processes on
    127.0.0.1, as a user with a cluster starts them; each in its own process group."""
    address = f"tcp://127.0.0.1:{free_port()}"
    here = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
    commands = [["scheduler", "--port", address.rsplit(":", 1)[1], *here]] + \
        [["worker", address, "--nthreads", "1", *here]] * 2
    procs = []
    try:
        for command in commands:
            procs.append(subprocess.Popen([sys.executable, "-m", "dask", *command],
                                          cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))
        yield address, procs
    finally:
        stop(reversed(procs))


def stop(procs):
    """SIGTERM each process group, which Dask's commands answer by closing their workers and
    cleaning up after them (SIGKILL would leave their semaphores in /dev/shm); SIGKILL
    only for what is still there 30 s later."""
    procs = [p for p in procs if p.poll() is None]
    for proc in procs:
        os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def stop_mid_run(proc, path, procs):
    """Once the run ``proc`` has saved step 100 in ``path``, stop ``procs`` (part of its
    cluster); (its `Outcome`, the checkpoint's bytes just after the stop)."""
    try:
        wait_for_step(path, 100, proc)
        stop(procs)
        time.sleep(0.5)
        kept = path.read_bytes()
        return finish(proc), kept
    finally:
        if proc.poll() is None:
            proc.kill()


def test_train_on_a_cluster_of_dask_commands_then_lose_every_worker(tmp_path, dask_cluster):
    address, procs = dask_cluster
    write_corpus(tmp_path)
    run = ["train", "tiny.txt", *SMALL, "--sample-every", "0", "--scheduler", address,
           "--workers", "2", "--checkpoint-every", "50"]
    done = finish(start([*run, "--steps", "300", "--checkpoint", "s.npz"], tmp_path))
    assert done.status == 0 and done.err == "", done
    assert f"workers: 2 workers, 1 + 1 cursors of the Dask cluster at {address}" in done.out
    assert checkpoint.load(tmp_path / "s.npz").step == 300

    proc = start([*run, "--steps", "100000", "--checkpoint", "lost.npz"], tmp_path,
                 FASTBPTT_WORKER_WAIT="1")
    outcome, kept = stop_mid_run(proc, tmp_path / "lost.npz", procs[1:])  # every worker
    assert outcome.status == 1, outcome
    line = outcome.one_line("fastbptt train: no Dask worker is left in the cluster and none "
                            "joined within 1 s; nothing was saved over lost.npz, which holds "
                            "step ")
    assert ("`fastbptt train --resume --checkpoint lost.npz --steps 100000 --sample-every 0` "
            "continues from it") in line
    assert (tmp_path / "lost.npz").read_bytes() == kept


def test_a_worker_that_joins_mid_run_takes_part_from_the_next_checkpoint(tmp_path,
                                                                         dask_cluster):
    """A run on one worker of a cluster: a second worker that joins takes a block of
    cursors after the next periodic checkpoint (written in the step after the one it holds),
    from the run's state after that step; the run saves on a signal as usual, and resumes in
    one process."""
    address, procs = dask_cluster
    stop(procs[2:])                                     # one worker, for now
    write_corpus(tmp_path)
    proc = start(["train", "tiny.txt", *SMALL, "--sample-every", "0", "--scheduler", address,
                  "--checkpoint-every", "20", "--steps", "100000", "--checkpoint", "j.npz"],
                 tmp_path)
    here = ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
    try:
        read_until(proc, "workers: 1 worker, 2 cursors")
        wait_for_step(tmp_path / "j.npz", 20, proc)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "dask", "worker", address, "--nthreads", "1", *here],
            cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True))
        joined = read_until(proc, "more Dask workers joined")[-1]
        step = int(re.fullmatch(r"more Dask workers joined: the run goes on from step (\d+) "
                                r"on 2 workers, 1 \+ 1 cursors\n", joined)[1])
        wait_for_step(tmp_path / "j.npz", step + 20, proc)
        proc.send_signal(signal.SIGINT)
        outcome = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert outcome.status == 130 and outcome.err == "", outcome
    saved = checkpoint.load(tmp_path / "j.npz")
    assert saved.step > step + 20 and len(saved.history["loss"]) == saved.step
    more = finish(start(["train", "tiny.txt", *SMALL, "--sample-every", "0", "--resume",
                         "--checkpoint", "j.npz", "--steps", str(saved.step + 5)], tmp_path))
    assert more.status == 0, more
    assert checkpoint.load(tmp_path / "j.npz").step == saved.step + 5


def test_a_lost_scheduler_ends_the_run_in_one_line_that_says_how_to_resume(tmp_path,
                                                                            dask_cluster):
    """The scheduler stops mid-run: status 1 and one line, whichever call notices first
    (a step, placing the run again, or the save that fails after them), saying that the
    checkpoint, untouched, holds the last saved step and how to go on from it."""
    address, procs = dask_cluster
    write_corpus(tmp_path)
    proc = start(["train", "tiny.txt", *SMALL, "--sample-every", "0", "--scheduler", address,
                  "--workers", "2", "--checkpoint-every", "50", "--steps", "100000",
                  "--checkpoint", "gone.npz"], tmp_path, FASTBPTT_WORKER_WAIT="1")
    try:
        outcome, kept = stop_mid_run(proc, tmp_path / "gone.npz", procs[:1])  # the scheduler
    finally:
        stop(procs[1:])
    assert outcome.status == 1, outcome
    line = outcome.one_line("fastbptt train: ")
    assert "unexpected" not in line and "nothing was saved over gone.npz, which holds step " \
        in line, line
    assert line.endswith("`fastbptt train --resume --checkpoint gone.npz --steps 100000 "
                         "--sample-every 0` continues from it"), line
    assert (tmp_path / "gone.npz").read_bytes() == kept


def test_without_dask_the_options_name_the_extra(tmp_path, capsys, monkeypatch):
    from fastbptt.cli import main

    write_corpus(tmp_path)
    import fastbptt

    monkeypatch.setitem(sys.modules, "distributed", None)     # import distributed fails
    monkeypatch.delitem(sys.modules, "fastbptt.distributed")
    monkeypatch.delattr(fastbptt, "distributed")
    for option, value in (("--workers", "2"), ("--scheduler", "tcp://127.0.0.1:1")):
        assert main(["train", str(tmp_path / "tiny.txt"), *SMALL, option, value]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"fastbptt train: {option} needs Dask: pip install "
                       "'fastbptt[distributed]'"]
