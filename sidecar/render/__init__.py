"""Reports for people: Markdown, self-contained HTML with plots, CSV exports (pure apart from drawing)."""
