"""`memphis demo` shows its progress with or without tqdm (a dev dependency, not the package's)."""
import sys

from memphis import demo


def test_without_tqdm_the_demo_prints_a_line_per_stage(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # `from tqdm import tqdm` raises ImportError
    with demo.progress(2) as bar:
        bar.set_postfix_str("memphis off: exploration")
        bar.update()
        bar.set_postfix_str("memphis off: grid search")
        bar.update()
    assert capsys.readouterr().err.splitlines() == ["demo: 1/2 stages done (memphis off: exploration)",
                                                    "demo: 2/2 stages done (memphis off: grid search)"]


def test_with_tqdm_the_demo_shows_a_bar():
    from tqdm import tqdm

    with demo.progress(3) as bar:
        assert isinstance(bar, tqdm) and bar.total == 3
