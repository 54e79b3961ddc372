"""What a person reads of an output: report.html (report_page.py and its template) and
what changed between two outputs (changes.py, the `diff` command's)."""
