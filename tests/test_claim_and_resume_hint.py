"""A checkpoint's claim on a full disk, and the resume command as a shell reads it."""
import errno
import os
import shlex

import pytest

from fastbptt import _checkpoint_claim
from fastbptt._run_saves import resume_hint


def test_a_claim_holds_when_the_disk_cannot_take_the_holders_process_id(tmp_path,
                                                                          monkeypatch):
    path = tmp_path / "run.npz"
    real_write = os.write

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with _checkpoint_claim.claimed(str(path)):
        assert os.path.exists(_checkpoint_claim.lock_path(str(path)))
        monkeypatch.setattr(os, "write", real_write)
        with pytest.raises(Exception, match="is being written by another fastbptt train"):
            with _checkpoint_claim.claimed(str(path)):
                pass
    assert not os.path.exists(_checkpoint_claim.lock_path(str(path)))


@pytest.mark.skipif(os.name != "posix", reason="claims are flock's, POSIX only")
def test_a_checkpoint_name_too_long_for_the_lock_files_suffix_is_claimed(tmp_path):
    """.NAME.lock of a 250-byte NAME is no valid name: the run went on unclaimed, and a
    second run on the same checkpoint was not stopped."""
    fits = str(tmp_path / ("m" * 240 + ".npz"))      # .NAME.lock has 255 bytes: as always
    assert os.path.basename(_checkpoint_claim.lock_path(fits)) == f".{'m' * 240}.npz.lock"
    path = str(tmp_path / ("m" * 246 + ".npz"))
    with _checkpoint_claim.claimed(path):
        assert os.path.exists(_checkpoint_claim.lock_path(path))
        with pytest.raises(Exception, match="is being written by another fastbptt train"):
            with _checkpoint_claim.claimed(path):
                pass


@pytest.mark.parametrize("path", ["run.npz", "sp ace.npz", "it's.npz", "a;b.npz"])
def test_the_resume_command_reads_back_as_its_path(path):
    hint = resume_hint(path, again="--steps 1500")
    assert hint.startswith("`") and hint.endswith("`")
    words = shlex.split(hint[1:-1])
    assert words == ["fastbptt", "train", "--resume", "--checkpoint", path, "--steps", "1500"]
