"""Everything a comparison shows or writes: Rich tables, plots, result.json and report.md."""
