"""The built-in vague requests, written for mua; the data is in `requests.json` next to this file.

Each request has a `category`, a `task` (the vague request) and its `missing_details`: a
description, an importance (3 high .. 1 low), a natural clarifying question (`inquiry`), possible
answers (`options`), and `keywords` for the scripted judge (a question covers a detail when any
keyword occurs in it as whole words, after light stemming).
"""

from __future__ import annotations

import json
from pathlib import Path

REQUESTS: list[dict] = json.loads(
    Path(__file__).with_name("requests.json").read_text(encoding="utf-8")
)
