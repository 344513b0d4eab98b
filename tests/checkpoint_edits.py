"""Damaged copies of a checkpoint, for the tests that it is refused in one line."""
import json

import numpy as np


def rewrite(source, target, change):
    """A copy of the .npz ``source`` at ``target`` after ``change(arrays)`` edits its dict."""
    with np.load(source, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    change(arrays)
    np.savez(target, **arrays)
    return target


def edit_meta(edit):
    """A change for `rewrite` that calls ``edit(meta)`` on the parsed JSON of 'meta'."""
    def change(arrays):
        meta = json.loads(str(arrays["meta"]))
        edit(meta)
        arrays["meta"] = np.array(json.dumps(meta))
    return change
