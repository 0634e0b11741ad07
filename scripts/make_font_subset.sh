#!/usr/bin/env bash
# Regenerates data/fonts/DejaVuSans-subset.ttf, the font bertpipe embeds to draw text in plots
# (`bertpipe stats --plot`). Source: DejaVu Sans 2.37 as shipped by Debian's fonts-dejavu-core
# (/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf). The subset keeps Latin, Latin-1, Latin
# Extended-A, Greek and the punctuation / math signs the charts use, without hinting: 760 KB -> 38 KB.
# Needs fonttools: .venv/bin/pip install fonttools
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf}
py=${PYTHON:-.venv/bin/python}
"$py" -m fontTools.subset "$src" \
  --unicodes="U+0020-017F,U+0391-03C9,U+2010-2027,U+2030-203A,U+2190-2193,U+2212,U+2248,U+2264-2265" \
  --no-hinting --desubroutinize --layout-features='kern,liga' \
  --output-file=data/fonts/DejaVuSans-subset.ttf
ls -l data/fonts/DejaVuSans-subset.ttf
