#!/usr/bin/env bash
# Downloads the original MNIST, Fashion-MNIST and CIFAR-10 (binary version) files into
# DATA_DIR (default ./data), one sub-folder per dataset, and checks their MD5 sums. For
# machines with internet access; the tests never run it. Usage: scripts/fetch_datasets.sh [DATA_DIR]
# Checksums as published by the datasets' authors (and used by torchvision).
set -euo pipefail
dir=${1:-data}
mkdir -p "$dir"/mnist "$dir"/fashion-mnist "$dir"/cifar10

fetch() {  # url target md5
  local url=$1 target=$2 md5=$3
  if [ -f "$target" ] && echo "$md5  $target" | md5sum -c --status; then
    echo "ok       $target"
    return
  fi
  echo "fetching $url"
  curl -fL --retry 3 -o "$target.part" "$url"
  if ! echo "$md5  $target.part" | md5sum -c --status; then
    echo "error: $target: MD5 $(md5sum "$target.part" | cut -d' ' -f1), expected $md5 (download again?)" >&2
    rm -f "$target.part"
    exit 1
  fi
  mv "$target.part" "$target"
}

mnist=https://ossci-datasets.s3.amazonaws.com/mnist
fetch $mnist/train-images-idx3-ubyte.gz "$dir/mnist/train-images-idx3-ubyte.gz" f68b3c2dcbeaaa9fbdd348bbdeb94873
fetch $mnist/train-labels-idx1-ubyte.gz "$dir/mnist/train-labels-idx1-ubyte.gz" d53e105ee54ea40749a09fcbcd1e9432
fetch $mnist/t10k-images-idx3-ubyte.gz "$dir/mnist/t10k-images-idx3-ubyte.gz" 9fb629c4189551a2d022fa330f9573f3
fetch $mnist/t10k-labels-idx1-ubyte.gz "$dir/mnist/t10k-labels-idx1-ubyte.gz" ec29112dd5afa0611ce80d1b7f02629c

fashion=http://fashion-mnist.s3-website.eu-central-1.amazonaws.com
fetch $fashion/train-images-idx3-ubyte.gz "$dir/fashion-mnist/train-images-idx3-ubyte.gz" 8d4fb7e6c68d591d4c3dfef9ec88bf0d
fetch $fashion/train-labels-idx1-ubyte.gz "$dir/fashion-mnist/train-labels-idx1-ubyte.gz" 25c81989df183df01b3e8a0aad5dffbe
fetch $fashion/t10k-images-idx3-ubyte.gz "$dir/fashion-mnist/t10k-images-idx3-ubyte.gz" bef4ecab320f06d8554ea6380940ec79
fetch $fashion/t10k-labels-idx1-ubyte.gz "$dir/fashion-mnist/t10k-labels-idx1-ubyte.gz" bb300cfdad3c16e7a12a480ee83cd310

fetch https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz "$dir/cifar10/cifar-10-binary.tar.gz" c32a1d4ab5d03f1284b67883e8d87530
tar -xzf "$dir/cifar10/cifar-10-binary.tar.gz" -C "$dir/cifar10"
echo "datasets in $dir: run trainbench --data_dir=$dir"
