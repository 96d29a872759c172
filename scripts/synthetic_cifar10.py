#!/usr/bin/env python3
"""Writes CIFAR-10-format files (data_batch_1..5.bin, test_batch.bin: 1 label byte + 3072 pixel
bytes per record) filled with learnable synthetic images, so that the loader's real-format path
(reading, shuffling, normalising, augmenting, worker threads) can be measured on a machine
without the real dataset. Usage: scripts/synthetic_cifar10.py [--out data/cifar10] [--records 10000]
The rows trainbench writes name the folder as their data source; these are not CIFAR-10 images."""
import argparse
import os
import random
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/cifar10")
    parser.add_argument("--records", type=int, default=10000, help="records per file (CIFAR-10 has 10000)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    # One fixed pattern per class; each image is its pattern plus noise, clipped to a byte.
    patterns = [bytes(rng.randrange(40, 216) for _ in range(3072)) for _ in range(10)]
    noise = bytes(rng.randrange(0, 81) for _ in range(1 << 16))
    os.makedirs(args.out, exist_ok=True)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for name in names:
        records = bytearray()
        for _ in range(args.records):
            label = rng.randrange(10)
            offset = rng.randrange(len(noise) - 3072)
            pattern = patterns[label]
            records.append(label)
            records += bytes(max(0, min(255, p + n - 40)) for p, n in zip(pattern, noise[offset:offset + 3072]))
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(records)
        print(f"wrote {os.path.join(args.out, name)} ({len(records)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
