# Sourced by the GPU parts (bench/*_gpu.sh): the pure-Python wheels the device image lacks
# (.whl/, carried: trl, datasets, ...) and bubblewrap unpacked from carried .debs/ files, so
# workers are jailed there as they are here. Prints what it found.
if ls .whl/*.whl >/dev/null 2>&1 && ! python3 -c 'import trl, datasets' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! command -v bwrap >/dev/null && ls .debs/*.deb >/dev/null 2>&1; then
  # Unpacked, not installed; its libraries are given to it alone, through the dynamic loader
  # (an LD_LIBRARY_PATH would reach every program, the workers included).
  for deb in .debs/*.deb; do dpkg -x "$deb" .debs/root; done
  libs=$(find "$PWD/.debs/root" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)
  mkdir -p .debs/bin
  printf '#!/bin/sh\nexec /lib64/ld-linux-x86-64.so.2 --library-path "%s" "%s" "$@"\n' \
    "$libs" "$PWD/.debs/root/usr/bin/bwrap" > .debs/bin/bwrap
  chmod +x .debs/bin/bwrap
  export PATH="$PWD/.debs/bin:$PATH"
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
echo "gpu_env: bwrap $(command -v bwrap || echo MISSING); trl $(python3 -c 'import trl; print(trl.__version__)' 2>/dev/null || echo MISSING)"
