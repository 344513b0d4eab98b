"""Masked arrays, refused wherever fastbptt takes an array: np.asarray drops a mask
without a word, so a masked entry would be read as whatever value it hides."""
import numpy as np


def refuse_masked(name, value):
    """TypeError for a masked array, naming the argument and the fix."""
    if (isinstance(value, np.ndarray) and type(value) is not np.ndarray
            and isinstance(value, np.ma.MaskedArray)):
        hint = "; y.filled(-1) makes masked class ids steps without loss" if name == "y" else ""
        raise TypeError(f"{name} is a masked array, and fastbptt does not read masks: pass "
                        f"an ordinary array, .filled(value) with the value masked entries "
                        f"should take{hint}")
