"""Build-time pages of the documentation site (run by the ``mkdocs-gen-files`` plugin, see ``mkdocs.yml``).

- ``index.md``: the README, its links as the site sees them (``docs/x.md`` is ``x.md``; ``CHANGELOG.md`` is the
  generated ``changelog.md``).
- ``changelog.md``: ``CHANGELOG.md``, which lives at the repository's root.
"""

from __future__ import annotations

from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]

with mkdocs_gen_files.open("changelog.md", "w") as out:
    out.write((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))

with mkdocs_gen_files.open("index.md", "w") as out:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    out.write(readme.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)"))
