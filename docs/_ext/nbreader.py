"""myst-nb reader for the jupytext percent-format notebooks: a Python 3 kernelspec where the file has none."""
import jupytext


def read_percent(text: str):
    nb = jupytext.reads(text, fmt="py:percent")
    nb.metadata.setdefault("kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"})
    nb.metadata.setdefault("language_info", {"name": "python", "pygments_lexer": "ipython3"})
    return nb
