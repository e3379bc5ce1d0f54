"""The second half of the docs pages (``test_docs_pages.py`` runs the first and states the rules): its own
page-runner process, so that pytest-xdist's whole-file scheduling runs the two halves on two workers."""
import pytest
import test_docs_pages as first
from test_docs_pages import HALVES, ROOT, check_page

page_results = first.page_results  # the module-scoped fixture: this file's pages, its own runner process


@pytest.mark.parametrize("page", HALVES[1], ids=[p.relative_to(ROOT / "docs").as_posix() for p in HALVES[1]])
def test_page_runs(page, page_results):
    check_page(page, page_results)
