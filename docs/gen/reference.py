"""Build-time pages of the documentation site (run by the ``mkdocs-gen-files`` plugin, see ``mkdocs.yml``).

- ``index.md``: the README, its links as the site sees them.
- ``changelog.md``: ``CHANGELOG.md``, which lives at the repository's root.
"""

from __future__ import annotations

from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]


for source, page in (("CHANGELOG.md", "changelog.md"),):
    with mkdocs_gen_files.open(page, "w") as out:
        out.write((ROOT / source).read_text(encoding="utf-8"))


def _site_links(markdown: str) -> str:
    """README links as the site sees them: ``docs/x.md`` is ``x.md``; files outside ``docs/`` are generated pages."""
    return (markdown.replace("](docs/", "](")
            .replace("](CHANGELOG.md)", "](changelog.md)")
            )


with mkdocs_gen_files.open("index.md", "w") as out:
    out.write(_site_links((ROOT / "README.md").read_text(encoding="utf-8")))
