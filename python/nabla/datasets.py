"""Dataset files as `nabla run` reads them (docs/run-config.md, `data`)."""
import os as _os

from . import _nabla


def read_idx(path):
    """An IDX file (the MNIST format: big-endian magic and dims, then the
    data; gzip or plain) as an ndarray of its element type and shape, read by
    the same reader as a run config's `format: idx`."""
    return _nabla._read_idx(_os.fspath(path))
