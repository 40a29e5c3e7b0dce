"""Shared helpers of the research scripts: importing flexpoint from the source tree, loading
data sets, writing CSV files and setting up matplotlib (Agg backend, no display needed)."""
from __future__ import annotations

import csv
import errno
import os
import stat
import sys
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))


def import_flexpoint():
    """Import flexpoint: the package beside this folder (python/flexpoint) when the script runs
    from the source tree, else the installed one."""
    src = os.path.dirname(HERE)
    if os.path.isfile(os.path.join(src, "flexpoint", "__init__.py")) and src not in sys.path:
        sys.path.insert(0, src)
    import flexpoint
    return flexpoint


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def write_csv(path: str, rows: Sequence[Dict[str, Any]], fields: Optional[List[str]] = None) -> str:
    """Write dict rows as CSV (header from `fields` or the first row's keys); returns path.

    The rows go to a new temporary file beside `path` (created exclusively, so that nothing
    planted under a temporary name, a FIFO say, is waited on or written through), are synced
    and renamed over `path`: a reader never sees a partial file. An existing `path` that is not
    a regular file (a folder, FIFO, device, symbolic-link loop) is refused at once with an
    OSError naming it; a failed write leaves `path` as it was and no temporary."""
    if fields is None:
        fields = list(rows[0].keys()) if rows else []
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:  # ELOOP, EACCES, ENOTDIR, ...
        raise OSError(e.errno, f"{path}: cannot write: {e.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, f"{path}: cannot write: not a regular file")
    folder, base = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=base + ".", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide the results from others
        with os.fdopen(fd, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for r in rows:
                w.writerow({k: _fmt(r.get(k)) for k in fields})
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return repr(v)
    return v


def add_data_args(p, default_dataset: str = "fashion-mnist", train_size: int = 10000,
                  test_size: int = 2000) -> None:
    """--dataset, --data-dir, --train-size, --test-size, --synthetic-shape."""
    p.add_argument("--dataset", choices=("fashion-mnist", "cifar10", "synthetic"),
                   default=default_dataset,
                   help="data set (default: %(default)s; synthetic needs no files)")
    p.add_argument("--data-dir", default=None,
                   help="directory of the data files (default: the library's: "
                        "FLEXPOINT_FASHION_MNIST_DIR / FLEXPOINT_CIFAR10_DIR or the system "
                        "location)")
    p.add_argument("--train-size", type=int, default=train_size,
                   help="training images used, from the start of the set; 0 = all "
                        "(default: %(default)s)")
    p.add_argument("--test-size", type=int, default=test_size,
                   help="test images used; 0 = all (default: %(default)s)")
    p.add_argument("--synthetic-shape", default="3x32x32",
                   help="CxHxW of synthetic images (default: %(default)s)")


def load_data(fx, args, seed: int = 0):
    """(train, test) data sets as the arguments of add_data_args ask."""
    if args.dataset == "synthetic":
        c, h, w = (int(v) for v in args.synthetic_shape.lower().split("x"))
        n_train = args.train_size or 10000
        n_test = args.test_size or 2000
        train = fx.data.synthetic(n_train, c, h, w, 10, seed=seed + 1)
        test = fx.data.synthetic(n_test, c, h, w, 10, seed=seed + 2)
        return train, test
    loader = fx.data.fashion_mnist if args.dataset == "fashion-mnist" else fx.data.cifar10
    train = loader(args.data_dir, True)
    test = loader(args.data_dir, False)
    if args.train_size and args.train_size < len(train):
        train = train.subset(0, args.train_size)
    if args.test_size and args.test_size < len(test):
        test = test.subset(0, args.test_size)
    return train, test


def ensure_dir(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    return path


def print_files(paths: Iterable[str]) -> None:
    for p in paths:
        print(f"wrote {p}")
