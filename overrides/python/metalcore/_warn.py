"""Warnings that point at the user's line: the first frame outside the
metalcore package and PyTorch (which calls into it through the overrides)."""
import pathlib
import sys
import warnings

import torch

_OURS = (str(pathlib.Path(__file__).resolve().parent), str(pathlib.Path(torch.__file__).resolve().parent))


def warn(message, category=UserWarning):
    frame, level = sys._getframe(1), 2  # level 1 is this function
    while frame is not None and frame.f_code.co_filename.startswith(_OURS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
