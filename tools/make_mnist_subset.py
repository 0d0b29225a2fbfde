"""Cut the embedded MNIST subset (ella/data/mnist_subset.npz) from the original files.

    python tools/make_mnist_subset.py --data-dir ../shared/data

Keeps the first 3000 training and first 1000 test images, as uint8.
"""

import argparse
from pathlib import Path

import numpy as np

from ella.data.datasets import EMBEDDED_MNIST, load_idx_dataset

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--data-dir", default="../shared/data")
parser.add_argument("--train", type=int, default=3000)
parser.add_argument("--test", type=int, default=1000)
args = parser.parse_args()
x_train, y_train, x_test, y_test = load_idx_dataset("mnist", args.data_dir)
out = Path(__file__).resolve().parents[1] / "ella" / "data" / EMBEDDED_MNIST
np.savez_compressed(
    out,
    x_train=x_train[: args.train],
    y_train=y_train[: args.train],
    x_test=x_test[: args.test],
    y_test=y_test[: args.test],
)
print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")
