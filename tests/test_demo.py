"""`memphis demo`: it shows its progress with or without tqdm (a dev dependency, not the
package's), and it answers alike with memphis off and on."""
import os
import subprocess
import sys

import pytest

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


@pytest.mark.slow
def test_the_demo_answers_alike_with_memphis_off_and_on_and_writes_its_tables(tmp_path):
    """`make demo`'s run at 20 000 rows, through benchmarks/demo_table.py, in a process of its own:
    it fails when a stage answers differently with memphis on."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks", "demo_table.py")
    result = subprocess.run([sys.executable, script, "--rows", "20000", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    table = (tmp_path / "demo.md").read_text()
    assert "every stage answers the same with memphis off and on" in table and "commit " in table
    assert "| total |" in table and (tmp_path / "demo.png").stat().st_size > 0
