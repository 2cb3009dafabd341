"""Run in whisper's referee Python: the official ``speech2text/manifest.py`` reads a manifest as
QSL.py and accuracy_eval.py do (their labels, max_duration 30); prints each kept clip's audio
path, duration and transcript indices, and the filtered seconds, as JSON.

usage: whisper_referee_manifest.py SPEECH2TEXT_DIR DATA_DIR MANIFEST"""

import json
import sys

sys.path.insert(0, sys.argv[1])
from accuracy_eval import labels  # noqa: E402  (the official label list)
from manifest import Manifest  # noqa: E402

manifest = Manifest(sys.argv[2], [sys.argv[3]], labels, len(labels), max_duration=30.0)
print(json.dumps({"clips": [[m["audio_filepath"][0], m["duration"], m["transcript"]]
                            for m in manifest],
                  "filtered": manifest.filtered_duration}))
