"""Checkpoint files: written atomically with the permissions of any new file, through
symbolic links, and read back only when whole: every kind of damage is a CheckpointError."""
import dataclasses
import os
import stat

import numpy as np
import pytest

from checkpoint_edits import edit_meta, rewrite
from pids import NO_PROCESS
from fastbptt import checkpoint
from fastbptt.checkpoint import CheckpointError
from fastbptt.text import Codec
from fastbptt.train import TrainOptions, Trainer

TEXT = "the quick brown fox jumps over the lazy dog. " * 20


@pytest.fixture(scope="module")
def trainer():
    codec = Codec.from_text(TEXT)
    t = Trainer(TrainOptions(hidden=6, seq_length=5, batch=2, cell="elman", layers=1),
                codec.encode(TEXT), codec)
    for _ in range(3):
        t.train_step()
    return t


def same(a, b):
    """Two checkpoints hold the same run."""
    assert a.step == b.step and a.codec == b.codec and a.options == b.options
    assert a.rng_state == b.rng_state and a.batcher == b.batcher
    for x, y in zip(a.params, b.params):
        assert (x is None and y is None) or np.array_equal(x, y)
    assert a.optimizer.keys() == b.optimizer.keys()
    for key, value in a.optimizer.items():
        assert np.array_equal(value, b.optimizer[key])
    assert np.array_equal(a.hidden, b.hidden)
    return True


@pytest.fixture
def umask():
    """Set the process's umask for one test."""
    saved = []

    def set_(mask):
        saved.append(os.umask(mask))
    yield set_
    if saved:
        os.umask(saved[0])


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_new_checkpoint_gets_the_permissions_the_umask_gives(trainer, tmp_path, umask,
                                                               mask, mode):
    umask(mask)
    path = trainer.save(tmp_path / "run.npz")
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    reference = tmp_path / "plain"
    reference.write_bytes(b"")
    assert stat.S_IMODE(reference.stat().st_mode) == mode     # as any new file


def test_a_replaced_checkpoint_keeps_its_permissions(trainer, tmp_path, umask):
    umask(0o022)
    path = tmp_path / "run.npz"
    trainer.save(path)
    os.chmod(path, 0o640)
    trainer.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_symbolic_link_keeps_pointing_at_the_updated_target(trainer, tmp_path):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "real.npz"
    link = tmp_path / "latest.npz"
    link.symlink_to(target)                                   # dangling: made on save
    trainer.save(link)
    assert link.is_symlink() and target.is_file()
    first = target.read_bytes()
    trainer.train_step()
    trainer.save(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes() != first and checkpoint.load(link).step == trainer.step
    assert sorted(os.listdir(tmp_path)) == ["latest.npz", "runs"]
    assert os.listdir(tmp_path / "runs") == ["real.npz"]      # no temporary file left


@pytest.mark.parametrize("breaking", ["savez", "fsync", "replace"])
def test_a_failed_save_leaves_the_last_good_checkpoint(trainer, tmp_path, monkeypatch,
                                                       breaking):
    path = tmp_path / "keep.npz"
    trainer.save(path)
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")
    target = np if breaking == "savez" else os
    monkeypatch.setattr(target, breaking, broken)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save(path, dataclasses.replace(trainer.checkpoint(), step=99))
    monkeypatch.undo()
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["keep.npz"]


def test_a_name_that_leaves_no_room_for_the_temporary_files_suffix_is_saved(trainer,
                                                                           tmp_path):
    """A checkpoint name of 241 to 255 bytes is a valid name, but its temporary file's,
    ".NAME.PID.N.tmp", was not: save failed, and check_target blamed the folder. The
    temporary name now shortens it, and the files that killed saves left are still found
    by it."""
    path = tmp_path / ("é" * 123 + ".npz")                  # 250 bytes
    checkpoint.check_target(path)
    trainer.save(path)
    assert os.listdir(tmp_path) == [path.name]
    assert checkpoint.load(path).step == trainer.checkpoint().step
    stale = [tmp_path / n for n in os.listdir(tmp_path)]
    f, tmp = checkpoint._new_file(str(tmp_path), path.name)
    f.close()
    assert len(os.fsencode(os.path.basename(tmp))) <= 255
    dead = os.path.join(str(tmp_path), os.path.basename(tmp).replace(f".{os.getpid()}.",
                                                                     f".{NO_PROCESS}."))
    os.rename(tmp, dead)                              # as a process no longer running left it
    assert checkpoint.remove_stale_temporaries(path) == 1
    assert [tmp_path / n for n in os.listdir(tmp_path)] == stale


@pytest.mark.parametrize("where", ["made", "written"])
def test_ctrl_c_during_a_save_leaves_no_temporary_file(trainer, tmp_path, monkeypatch, where):
    """A KeyboardInterrupt just after the temporary file was made (before the code that
    removes it on failure) left it beside the checkpoint for good, and its descriptor
    open."""
    path = tmp_path / "keep.npz"
    trainer.save(path)
    before = path.read_bytes()
    make = checkpoint._new_file

    def interrupted(*args, **kwargs):
        if where == "made":
            make(*args, **kwargs)
        raise KeyboardInterrupt
    monkeypatch.setattr(checkpoint, "_new_file", interrupted) if where == "made" else \
        monkeypatch.setattr(os, "replace", interrupted)
    fds = _open_descriptors()
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, dataclasses.replace(trainer.checkpoint(), step=99))
    monkeypatch.undo()
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["keep.npz"]
    assert _open_descriptors() == fds           # the temporary file's was left open


def _open_descriptors():
    return sorted(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None


def test_check_target_creates_nothing_and_names_the_problem(tmp_path):
    (tmp_path / "file").write_text("x")
    checkpoint.check_target(tmp_path / "new" / "deeper" / "run.npz")
    assert os.listdir(tmp_path) == ["file"]
    with pytest.raises(FileNotFoundError, match="does not exist"):
        checkpoint.check_target(tmp_path / "new" / "run.npz", make_folders=False)
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        checkpoint.check_target(tmp_path / "file" / "sub" / "run.npz")
    with pytest.raises(IsADirectoryError, match="that is a folder"):
        checkpoint.check_target(tmp_path)
    with pytest.raises(IsADirectoryError, match=r"ends in / names a folder; give the file's "
                                                r"name without it, e.g. .*new\.npz$"):
        checkpoint.check_target(f"{tmp_path}/new.npz/")
    assert os.listdir(tmp_path) == ["file"]


@pytest.fixture(scope="module")
def saved(trainer, tmp_path_factory):
    path = tmp_path_factory.mktemp("ck") / "good.npz"
    trainer.save(path)
    return path


def test_every_truncation_is_refused(saved, tmp_path):
    data = saved.read_bytes()
    cut = tmp_path / "cut.npz"
    for n in list(range(0, 64)) + list(range(64, len(data), 37)):
        cut.write_bytes(data[:n])
        with pytest.raises(CheckpointError, match="cut.npz"):
            checkpoint.load(cut)


def test_a_flipped_byte_is_refused_or_changes_nothing(saved, tmp_path):
    """zip's CRC-32 covers every entry; a flip outside them (a time stamp, say) leaves
    the same checkpoint."""
    data = saved.read_bytes()
    good = checkpoint.load(saved)
    flipped, refused = tmp_path / "flip.npz", 0
    for i in range(0, len(data), 23):
        damaged = bytearray(data)
        damaged[i] ^= 0x04
        flipped.write_bytes(bytes(damaged))
        try:
            loaded = checkpoint.load(flipped)
        except CheckpointError as error:
            assert "flip.npz" in str(error) and "\n" not in str(error)
            refused += 1
        else:
            assert same(loaded, good), i
    assert refused > 0.8 * (len(data) // 23)


def test_a_flipped_byte_in_an_entrys_shape_is_refused(saved, tmp_path):
    """np.load reads an entry's header and then only as many bytes as its shape says, so
    a shape made smaller passed unchecked (zipfile checks the CRC at an entry's end)."""
    data = saved.read_bytes()
    losses = checkpoint.load(saved).history["loss"].size
    header = f"'shape': ({losses},)".encode()
    assert data.count(header) == 1 and losses >= 2
    shorter = tmp_path / "shorter.npz"
    shorter.write_bytes(data.replace(header, f"'shape': ({losses - 1},)".encode()))
    with pytest.raises(CheckpointError, match=r"shorter.npz is damaged or not a fastbptt "
                                              r"checkpoint \(its entry history.loss.npy fails "
                                              r"its CRC-32 check\)"):
        checkpoint.load(shorter)


DAMAGE = [
    ("no meta", lambda a: a.pop("meta"), "no 'meta' entry"),
    ("no vocab", lambda a: a.pop("vocab"), "no 'vocab' entry"),
    ("no U", lambda a: a.pop("params.U"), "no params.U entry"),
    ("unknown param", lambda a: a.update({"params.Q": np.ones(3)}), "unknown entry params.Q"),
    ("integer W", lambda a: a.update({"params.W": np.ones((6, 6), int)}), "params.W is a"),
    ("3-D V", lambda a: a.update({"params.V": np.ones((2, 2, 2))}), "params.V is a 3-D"),
    ("object meta", lambda a: a.update({"meta": np.array([{}], object)}),
     "Object arrays cannot be loaded"),
    ("meta not JSON", lambda a: a.update({"meta": np.array("{step: 1")}), "damaged"),
    ("meta a list", lambda a: a.update({"meta": np.array("[1, 2]")}), "not a JSON object"),
    ("numeric meta", lambda a: a.update({"meta": np.arange(3)}), "not a JSON string"),
    ("format 7", edit_meta(lambda m: m.update(format=7)), "format 7 is not one this version reads"),
    ("format true", edit_meta(lambda m: m.update(format=True)),     # read as format 1
     "format True is not one this version reads"),
    ("no step", edit_meta(lambda m: m.pop("step")), "'meta' has no 'step'"),
    ("step a string", edit_meta(lambda m: m.update(step="3")), "'step' is a str, not a int"),
    ("negative step", edit_meta(lambda m: m.update(step=-2)), "'meta' step is -2"),
    ("options a list", edit_meta(lambda m: m.update(options=[])), "'options' is a list"),
    ("float vocab", lambda a: a.update({"vocab": np.ones(3)}), "not a list of code points"),
    ("vocab beyond Unicode", lambda a: a.update({"vocab": np.array([65, 0x110000])}),
     "not Unicode characters' code points"),
    ("vocab with a surrogate", lambda a: a.update({"vocab": np.array([65, 0xDFFF])}),
     "not Unicode characters' code points"),
    ("repeated vocab", lambda a: a.update({"vocab": np.array([65, 65])}), "repeated"),
    ("1-D hidden", lambda a: a.update({"hidden": np.ones(6, np.float32)}),
     "'hidden' is a 1-D"),
]


@pytest.mark.parametrize("change,phrase", [pytest.param(c, p, id=i) for i, c, p in DAMAGE])
def test_damaged_entries_are_refused_naming_the_problem(saved, tmp_path, change, phrase):
    bad = tmp_path / "bad.npz"
    rewrite(saved, bad, change)
    with pytest.raises(CheckpointError) as info:
        checkpoint.load(bad)
    message = str(info.value)
    assert message.startswith(f"{bad} is ") and phrase in message, message
    assert "\n" not in message


def test_missing_paths_are_os_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        checkpoint.load(tmp_path / "none.npz")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        checkpoint.load(tmp_path)


def test_todays_format_reads_back_through_the_params_pair(trainer):
    arrays = checkpoint.params_to_arrays(trainer.params)
    assert list(arrays) == ["U", "W", "V", "b", "c"]
    back = checkpoint.params_from_arrays(arrays, 1)
    assert all(a is b for a, b in zip(back, trainer.params))
    assert checkpoint.FORMAT in checkpoint.READABLE


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_a_fifo_at_the_path_is_refused_and_kept(trainer, tmp_path):
    """save renames its file over the path: a device or FIFO there would be replaced."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    with pytest.raises(OSError, match="that is a device, FIFO or socket, not a file"):
        checkpoint.check_target(path)
    with pytest.raises(OSError, match="that is a device, FIFO or socket, not a file"):
        trainer.save(path)
    assert stat.S_ISFIFO(os.stat(path).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]      # no file left over


def _optimizer(**changes):
    def change(ck):
        state = dict(ck.optimizer, **changes)
        return dataclasses.replace(ck, optimizer={k: v for k, v in state.items()
                                                  if v is not None})
    return change


def _nan_hidden(ck):
    hidden = ck.hidden.copy()
    hidden[0, 0] = np.nan
    return dataclasses.replace(ck, hidden=hidden)


def _buffer(key, value):
    return lambda ck: _optimizer(**{key: value(ck.optimizer[key])})(ck)


def _huge_V(ck):              # finite in float64, beyond the run's float32: inf once cast
    return dataclasses.replace(ck, params=ck.params._replace(
        V=ck.params.V.astype(np.float64) * 1e300))


UNFIT = [
    ("NaN carried state", _nan_hidden, "the carried state holds NaN or inf"),
    ("V beyond float32", _huge_V, "params V holds "),
    ("V beyond float32, said", _huge_V, "beyond the range of --dtype float32 (at most "
                                        "3.403e+38)"),
    ("m beyond float32", _buffer("m.V", lambda v: np.full(v.shape, 1e300)),
     "the optimizer's m.V holds 1e+300, beyond the range of --dtype float32"),
    ("evals not pairs", lambda ck: dataclasses.replace(
        ck, history=dict(ck.history, evals=np.array([1.0, 2.0, 3.0]))),
     "its history.evals holds 3 numbers, not pairs of a step and a validation loss"),
    ("NaN buffer", _buffer("v.W", lambda v: np.full_like(v, np.nan)),
     "the optimizer's v.W holds NaN or inf"),
    ("negative v", _buffer("v.W", lambda v: -np.ones_like(v)),
     "the optimizer's v.W holds a negative value, which a sum of squares cannot"),
    ("integer buffer", _buffer("m.W", lambda v: v.astype(np.int32)),
     "the optimizer's m.W holds int32, not float32 or float64"),
    ("missing buffer", _optimizer(**{"m.V": None}),
     "the optimizer's m.V is missing, which "),
    ("NaN eps", _optimizer(eps=float("nan")),
     "the adam state's eps must be positive and finite; got nan"),
    ("beta2 of 1", _optimizer(beta2=1.0), "the adam state's beta2 must lie in [0, 1); got 1.0"),
    ("beta1 a string", _optimizer(beta1="x"), "the adam state's beta1 must be a number; got str"),
    ("negative t", _optimizer(t=-5),
     "the adam state's step count t must be a whole number >= 0; got -5"),
    ("no t", _optimizer(t=None), "the adam state has no 't'"),
]


@pytest.mark.parametrize("change,phrase", [pytest.param(c, p, id=i) for i, c, p in UNFIT])
def test_a_resume_refuses_state_the_run_could_not_have_written(saved, change, phrase):
    """Values a run cannot have saved, which would otherwise pass into the run: a carried
    state that is not finite, optimizer state out of its ranges or incomplete."""
    ck = change(checkpoint.load(saved))
    codec = ck.codec
    options = TrainOptions(hidden=6, seq_length=5, batch=2, cell="elman", layers=1)
    with pytest.raises((ValueError, TypeError)) as info:
        Trainer(options, codec.encode(TEXT), codec, resume=ck)
    assert phrase in str(info.value), info.value


@pytest.mark.parametrize("batcher,error", [({"pos": 10**9, "passes": 0}, ValueError),
                                           ({"pos": "3", "passes": 0}, ValueError),
                                           ({"pos": 0, "passes": -1}, ValueError),
                                           ({"passes": 0}, ValueError)])
def test_a_cursor_position_the_text_cannot_have_is_refused_before_placing(trainer, tmp_path,
                                                                           batcher, error):
    """Where the cursors go to workers, a bad position must still be the checkpoint's
    fault, found here and not in a worker."""
    path = tmp_path / "run.npz"
    trainer.save(path)
    bad = dataclasses.replace(checkpoint.load(path), batcher=batcher)
    placed = []

    def placement(*args):
        placed.append(args)
        raise AssertionError("placed")

    with pytest.raises(error):
        Trainer(trainer.options, trainer.train_ids, trainer.codec, resume=bad,
                placement=placement)
    assert not placed


def _no_head(ck):
    return ck.params._replace(V=None, c=None)


class _Unreadable:
    """An array-like whose values cannot be read (a tensor that requires grad, say)."""

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("no values here")


@pytest.mark.parametrize("change,phrase", [
    (dict(step=-1), "'meta' step is -1"),
    (dict(rng_state=None), "'meta' 'rng_state' is a NoneType, not a dict"),
    (dict(hidden=np.zeros(6)), "'hidden' is a 1-D float64 array"),
    (dict(params=_no_head), "no params.V entry"),
    (dict(history={"loss": np.array([1.0, None], dtype=object)}),
     "its history.loss holds Python objects"),
    (dict(options={"s": {1, 2}}), "must be JSON's kinds of values"),
    (dict(hidden=[[0.0] * 6, [0.0]]), "its hidden must be an array of numbers"),
    (dict(params=lambda ck: ck.params._replace(W=_Unreadable())),
     r"its params.W must be an array of numbers \(no values here\)"),
], ids=["step", "rng", "hidden", "no-head", "objects", "options", "ragged", "unreadable"])
def test_save_refuses_what_load_would_and_keeps_the_file_there(trainer, tmp_path, change,
                                                               phrase):
    """save wrote such checkpoints atomically over a good one, which load then refused."""
    path = tmp_path / "run.npz"
    trainer.save(path)
    good = path.read_bytes()
    ck = trainer.checkpoint()
    change = {k: v(ck) if callable(v) else v for k, v in change.items()}
    with pytest.raises((CheckpointError, TypeError, ValueError), match=phrase):
        checkpoint.save(path, dataclasses.replace(ck, **change))
    assert path.read_bytes() == good and sorted(tmp_path.iterdir()) == [path]
    for bad, error in [(dict(step=2.7), "step must be an int; got 2.7"),
                       (dict(step=True), "step must be an int; got True"),
                       (dict(codec=None), "codec must be a fastbptt.text.Codec")]:
        with pytest.raises(TypeError, match=error):
            checkpoint.save(path, dataclasses.replace(trainer.checkpoint(), **bad))
    with pytest.raises(IsADirectoryError, match=str(tmp_path)):
        checkpoint.save(tmp_path, trainer.checkpoint())


def test_states_given_as_lists_are_saved_as_arrays(trainer, tmp_path):
    """np.savez saves a list as an array; save's checks before it took the list for one
    (and params of lists, which bptt takes, failed with an AttributeError)."""
    ck = trainer.checkpoint()
    path = checkpoint.save(tmp_path / "run.npz",
                           dataclasses.replace(ck, hidden=ck.hidden.tolist()))
    assert same(checkpoint.load(path), ck)
    listed = ck.params._replace(**{k: v.tolist() for k, v in ck.params._asdict().items()
                                   if v is not None})
    path = checkpoint.save(tmp_path / "lists.npz", dataclasses.replace(ck, params=listed))
    for k, v in checkpoint.load(path).params._asdict().items():
        np.testing.assert_array_equal(v, getattr(ck.params, k))


def test_any_bit_generators_state_is_saved(trainer, tmp_path):
    """MT19937's state holds an array, which JSON took for no value of its."""
    drawn = np.random.Generator(np.random.MT19937(3))
    drawn.random(4)
    path = checkpoint.save(tmp_path / "mt.npz", dataclasses.replace(
        trainer.checkpoint(), rng_state=drawn.bit_generator.state))
    again = np.random.Generator(np.random.MT19937())
    again.bit_generator.state = checkpoint.load(path).rng_state
    assert np.array_equal(again.random(5), drawn.random(5))


def test_sample_names_a_weight_beyond_the_runs_dtype(trainer, tmp_path, capsys):
    """It said 'holds NaN or inf', after NumPy's overflow warning, of finite numbers."""
    from fastbptt.cli import main
    path = tmp_path / "big.npz"
    checkpoint.save(path, _huge_V(trainer.checkpoint()))
    assert main(["sample", str(path), "--chars", "5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fastbptt sample: {path} is not a usable fastbptt checkpoint: "
                          f"params V holds ") and err.count("\n") == 1
    assert "beyond the range of --dtype float32" in err
